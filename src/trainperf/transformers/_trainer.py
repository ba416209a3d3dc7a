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
* the loads of a training resumed with ``resume_from_checkpoint=`` (the model's weights, the optimizer
  and scheduler, the scaler, the callbacks' and random generators' states) and of the best model at
  the end: ``checkpoint_load``. Most happen inside ``train()`` before ``on_train_begin``, so
  :func:`wrap_loads` is installed as ``train()`` starts (see below);
* ``model_wrapped``: the ``DistributedDataParallel`` whose collectives are timed, or the FSDP model
  whose collectives are not (said once);

The Trainer is found in one place, :func:`find_trainer`, up the call stack of the event that
``Trainer.__init__`` sends (or, for a callback added later, of ``on_train_begin``). Each wrapper is an
attribute of that instance; the :class:`~trainperf.torch.shared.Teardown` given to a ``wrap_*`` gives
the instance back what it had before.

One thing cannot wait for the Trainer to be found: an exception ends ``train()`` without a callback
event (``on_train_end`` is not sent), and a callback added with ``add_callback`` first hears of its
Trainer inside ``train()``, too late to wrap that call. So while a callback is open,
:func:`watch_training` wraps ``transformers.Trainer.train`` itself (once, for every callback): however
``train()`` ends (an exception, ``KeyboardInterrupt``, normally), each watched callback of that Trainer
is told, with the exception, which then goes on unchanged; each is also told as ``train()`` starts,
before anything is loaded. The last :func:`unwatch_training` gives the class its ``train`` back.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import torch
import transformers

from ..core import PerformanceListener
from ..torch.shared import BlockedCalls, Teardown, find_fsdp

__all__ = ["collective_model", "find_trainer", "unwatch_training", "watch_training", "wrap_loads", "wrap_steps"]

#: The accelerator's collectives the Trainer calls on the training thread.
_ACCELERATOR_COLLECTIVES = ("gather", "reduce", "gather_for_metrics", "pad_across_processes", "wait_for_everyone")

#: What the Trainer calls to load a checkpoint: to resume (``train(resume_from_checkpoint=)``), and the
#: best model at the end (``load_best_model_at_end``).
_LOADS = ("_load_from_checkpoint", "_load_optimizer_and_scheduler", "_load_scaler", "_load_rng_state",
          "_load_callback_state", "_load_best_model")

#: How far up the call stack the Trainer is looked for (its ``__init__`` or training loop, then the
#: callback handler's ``call_event`` and the event method).
_FRAMES = 8


class Trainee(Protocol):
    """What the wrappers call on the callback."""

    clock: Callable[[], float]
    in_step_fetch: bool
    whole_fetch: bool
    listener: PerformanceListener

    def fetched(self, started: float, ended: float) -> None: ...

    def took(self, batches: int) -> None: ...
    def waited(self, seconds: float) -> None: ...
    def training_starting(self, trainer: Any) -> None: ...
    def training_ended(self, error: BaseException | None = None) -> None: ...


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


_watch_lock = threading.Lock()
#: The callbacks whose Trainers' ``train()`` ends are watched (open callbacks; collected ones leave).
_watched: weakref.WeakSet[Any] = weakref.WeakSet()
#: ``(the class's own train, or None when it inherits one; our wrapper)`` while the wrapper is installed.
_installed: tuple[Any, Any] | None = None


def watch_training(callback: Trainee) -> None:
    """Until :func:`unwatch_training`, tell ``callback`` when ``train()`` of a Trainer it is a callback
    of ends, however it ends: ``callback.training_ended(error)``, ``error`` ``None`` after a normal end."""
    global _installed
    with _watch_lock:
        _watched.add(callback)
        if _installed is None:
            trainer_class = transformers.Trainer
            wrapper = _ending(trainer_class.train)
            _installed = (vars(trainer_class).get("train"), wrapper)
            trainer_class.train = wrapper  # type: ignore[method-assign]


def unwatch_training(callback: Trainee) -> None:
    """Stop telling ``callback``; the last one out gives ``Trainer`` its own ``train`` back (unless
    something wrapped it again since: ours then stays inside, telling no one). Idempotent."""
    global _installed
    with _watch_lock:
        _watched.discard(callback)
        if _watched or _installed is None:
            return
        own, wrapper = _installed
        _installed = None
        trainer_class = transformers.Trainer
        if vars(trainer_class).get("train") is not wrapper:
            return
        if own is None:
            del trainer_class.train
        else:
            trainer_class.train = own  # type: ignore[method-assign]


def _ending(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def train(self: Any, *args: Any, **kwargs: Any) -> Any:
        for callback in _callbacks_of(self):
            callback.training_starting(self)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as error:
            _tell(self, error)
            raise  # the training's own exception, as it was
        _tell(self, None)
        return result

    return train


def _callbacks_of(trainer: Any) -> list[Trainee]:
    """The watched callbacks of ``trainer``."""
    callbacks = getattr(getattr(trainer, "callback_handler", None), "callbacks", None)
    # (a callback that takes no weak reference is not ours)
    return [c for c in list(callbacks) if c in _watched] if isinstance(callbacks, list) else []


def _tell(trainer: Any, error: BaseException | None) -> None:
    """Tell the watched callbacks of ``trainer`` that its ``train()`` ended (with ``error``)."""
    for callback in _callbacks_of(trainer):
        try:
            callback.training_ended(error)
        except Exception:
            if error is None:
                raise
            # ``-W error`` turned a warning of the clean-up into an exception: the training's own
            # exception is the one the user must get


class WholeFetches:
    """The epoch's iterator as the Trainer's ``get_batch_samples`` takes each batch from it: each ``next``
    is timed whole (accelerate's loader moves the batch, keeps its state and fetches the next one ahead
    around the base loader's fetch: the loop waits for all of it) and handed to the callback as data
    wait; the batches are counted where the base loader gives them, on the host."""

    __slots__ = ("inner", "callback")

    def __init__(self, inner: Any, callback: Trainee) -> None:
        self.inner, self.callback = inner, callback

    def __iter__(self) -> WholeFetches:
        return self

    def __next__(self) -> Any:
        callback = self.callback
        callback.whole_fetch = True
        started = callback.clock()
        try:
            return next(self.inner)
        finally:
            callback.whole_fetch = False
            callback.fetched(started, callback.clock())


def wrap_steps(trainer: Any, callback: Trainee, wrappers: Teardown) -> None:
    """Wrap what one training run needs (see the module's docstring), undone by ``wrappers.undo()``."""
    clock = callback.clock
    blocked = BlockedCalls(clock, callback.waited)  # on this thread, the training thread
    wrappers.defer(blocked.close)

    def batch_samples(original: Any) -> Any:
        def get_batch_samples(epoch_iterator: Any, num_batches: int, device: Any) -> Any:
            callback.in_step_fetch = True
            try:
                batches, items = original(WholeFetches(epoch_iterator, callback), num_batches, device)
            finally:
                callback.in_step_fetch = False
            callback.took(len(batches))
            return batches, items

        return get_batch_samples

    def spans(kind: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            inner = blocked.aside(original)  # its collectives are part of it

            def timed(*args: Any, **kwargs: Any) -> Any:
                with callback.listener.span(kind):
                    return inner(*args, **kwargs)

            return timed

        return make

    wrappers.wrap(trainer, "get_batch_samples", batch_samples)
    accelerator = getattr(trainer, "accelerator", None)
    for name in _ACCELERATOR_COLLECTIVES:
        wrappers.wrap(accelerator, name, blocked.timed)
    wrappers.wrap(trainer, "_nested_gather", blocked.timed)  # the loss gathered when logging, before transformers 5
    wrappers.wrap(trainer, "evaluate", spans("eval"))
    wrappers.wrap(trainer, "_save_checkpoint", spans("checkpoint"))


def wrap_loads(trainer: Any, listener: PerformanceListener, wrappers: Teardown) -> None:
    """Time the Trainer's checkpoint loads as ``checkpoint_load`` spans of ``listener`` (a load inside
    another counts once), undone by ``wrappers.undo()``."""

    def make(original: Any) -> Any:
        def load(*args: Any, **kwargs: Any) -> Any:
            with listener.span("checkpoint_load"):
                return original(*args, **kwargs)

        return load

    for name in _LOADS:
        wrappers.wrap(trainer, name, make)


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
