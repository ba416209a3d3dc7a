"""What the Trainer callback changes on one ``Trainer`` instance, and gives back.

The callback events hand over the model, the optimizer and the training loader, not the Trainer.
A few things only the Trainer has are needed:

* ``get_batch_samples`` fetches every micro-batch of a step: the loader fetches inside it are the
  training's (an evaluation's are not), and it returns the batches the step trains on;
* the Trainer's own collectives on the training thread: ``accelerator.gather`` (inside
  ``get_batch_samples`` when ``average_tokens_across_devices`` counts the label tokens of every rank
  for the loss; after each micro-batch with ``include_num_input_tokens_seen``), ``accelerator.reduce``,
  and ``torch.distributed``'s collectives it calls itself when it logs (the gather of the loss, the
  broadcast of its FLOP count). A rank blocked in one is waiting for a slower rank (collective wait),
  not doing host work; the time is given to the callback as it returns (see
  :class:`~trainperf.torch.shared.BlockedCalls`);
* ``evaluate`` and ``_save_checkpoint``: their time is reported on its own (``eval_ms``,
  ``checkpoint_ms``), collectives inside them included;
* ``model_wrapped``: the ``DistributedDataParallel`` whose collectives are timed, or the FSDP model
  whose collectives are not (said once);
* ``_inner_training_loop``: however ``train()`` ends (an exception, ``KeyboardInterrupt``), the
  callback removes its hooks and closes its listener.

The Trainer is found in one place, :func:`find_trainer`, up the call stack of the event that
``Trainer.__init__`` sends (or, for a callback added later, of ``on_train_begin``). Each wrapper is an
attribute of that instance; the :class:`~trainperf.torch.shared.Teardown` given to a ``wrap_*`` gives
the instance back what it had before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from ..torch.shared import BlockedCalls, Teardown, find_fsdp

__all__ = ["collective_model", "find_trainer", "wrap_steps", "wrap_training_loop"]

#: The accelerator's collectives the Trainer calls on the training thread.
_ACCELERATOR_COLLECTIVES = ("gather", "reduce", "gather_for_metrics", "pad_across_processes", "wait_for_everyone")

#: How far up the call stack the Trainer is looked for (its ``__init__`` or training loop, then the
#: callback handler's ``call_event`` and the event method).
_FRAMES = 8


class Trainee(Protocol):
    """What the wrappers call on the callback."""

    clock: Callable[[], float]
    in_step_fetch: bool

    def took(self, batches: int) -> None: ...
    def waited(self, seconds: float) -> None: ...
    def spent(self, kind: str, seconds: float) -> None: ...
    def training_ended(self) -> None: ...


def find_trainer(frame: Any) -> Any:
    """The ``Trainer`` that sent the event whose caller's frame is ``frame`` (its callback handler does
    not know it), else ``None``."""
    for _ in range(_FRAMES):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if callable(getattr(owner, "get_batch_samples", None)) and hasattr(owner, "callback_handler"):
            return owner
        frame = frame.f_back
    return None


def wrap_training_loop(trainer: Any, callback: Trainee, wrappers: Teardown) -> None:
    """``train()`` runs ``trainer._inner_training_loop`` (looked up on the instance each time): however
    it ends, the callback's training ends with it."""

    def make(original: Any) -> Any:
        def inner_training_loop(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                callback.training_ended()

        return inner_training_loop

    wrappers.wrap(trainer, "_inner_training_loop", make)


def wrap_steps(trainer: Any, callback: Trainee, wrappers: Teardown) -> None:
    """Wrap what one training run needs (see the module's docstring), undone by ``wrappers.undo()``."""
    clock = callback.clock
    blocked = BlockedCalls(clock, callback.waited)  # on this thread, the training thread
    wrappers.defer(blocked.close)

    def batch_samples(original: Any) -> Any:
        def get_batch_samples(epoch_iterator: Any, num_batches: int, device: Any) -> Any:
            callback.in_step_fetch = True
            try:
                batches, items = original(epoch_iterator, num_batches, device)
            finally:
                callback.in_step_fetch = False
            callback.took(len(batches))
            return batches, items

        return get_batch_samples

    def spans(kind: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            inner = blocked.aside(original)  # its collectives are part of it

            def timed(*args: Any, **kwargs: Any) -> Any:
                began = clock()
                try:
                    return inner(*args, **kwargs)
                finally:
                    callback.spent(kind, clock() - began)

            return timed

        return make

    wrappers.wrap(trainer, "get_batch_samples", batch_samples)
    accelerator = getattr(trainer, "accelerator", None)
    for name in _ACCELERATOR_COLLECTIVES:
        wrappers.wrap(accelerator, name, blocked.timed)
    wrappers.wrap(trainer, "_nested_gather", blocked.timed)  # the loss gathered when logging, before transformers 5
    wrappers.wrap(trainer, "evaluate", spans("eval"))
    wrappers.wrap(trainer, "_save_checkpoint", spans("checkpoint"))


def collective_model(trainer: Any, model: Any) -> tuple[Any, Any, str | None]:
    """What a multi-rank training times around its collectives, as ``(model, ddp, fsdp)`` for
    :meth:`~trainperf.torch.shared.TrainingSetup.join`: the ``model_wrapped`` DDP's forwards and
    collectives; under FSDP (``model_wrapped`` or ``model`` sharded; ``fsdp`` says how) nothing, said
    once; otherwise nothing (``model`` ``None``)."""
    wrapped = getattr(trainer, "model_wrapped", None)
    if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel):
        return (model if model is not None else wrapped.module), wrapped, None
    fsdp = find_fsdp(model, wrapped)
    if fsdp is not None:
        return (model if model is not None else wrapped), None, fsdp
    return None, None, None
