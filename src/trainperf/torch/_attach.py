"""Hooks that turn an unchanged PyTorch loop into listener calls.

One iteration is one optimizer step. A forward pass (with autograd on) opens an iteration; a step
of an optimizer that holds the model's parameters closes it. Gradient accumulation therefore
counts every micro-batch's samples in the step that consumes them.

Data wait, when the loop is not wrapped with :func:`trainperf.torch.timed`, is the host time from
the end of one optimizer step to the start of the next forward pass: it covers ``next()`` on the
loader, moving the batch to the device, ``zero_grad()`` and whatever else the loop does between
the two. With ``timed(loader, model)`` it is exactly the time blocked in ``next()``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, is_grad_enabled
from torch.optim.optimizer import register_optimizer_step_post_hook

from .._listener import IterationTimer, PerformanceListener
from ._batch import batch_size
from ._tap import attachments_of, tap_of, untap
from .shared import process_rank, use_model_device

__all__ = ["Attachment", "attach", "detach"]


class Attachment:
    """The link between one model and one listener; :meth:`detach` removes every hook it added.

    Args:
        model: the module whose forward passes open iterations.
        listener: the listener that receives one call per optimizer step.
        timer_factory: builds the per-iteration timer for a CUDA model (tests pass a fake);
            by default CUDA events on CUDA and the host clock elsewhere.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        listener: PerformanceListener,
        *,
        timer_factory: Callable[[torch.device], IterationTimer] | None = None,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(listener, PerformanceListener):
            raise TypeError(f"listener must be a PerformanceListener, got {listener!r}")
        if listener.closed:
            raise ValueError("listener is closed; create a new one")
        self.model = model
        self.listener = listener
        self._timer_factory = timer_factory
        self._clock = listener.clock
        self._record = listener.record_iteration
        self._open = False
        self._started = False
        self._start = 0.0
        self._samples: int | None = 0
        self._micro = 0
        self._owned: dict[int, bool] = {}
        self._last_owned: torch.optim.Optimizer | None = None  # the one optimizer checked by identity
        tap_of(model).callbacks.append(self._on_forward)
        self._step_handle = register_optimizer_step_post_hook(self._on_step)
        self._detached = False
        listener.on_close(self.detach)
        attachments_of(model, create=True).append(self)

    # hot path ---------------------------------------------------------------
    def _on_forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not is_grad_enabled():
            return None
        first = args[0] if args else None
        if type(first) is Tensor and first.ndim:  # the common case, without the general search
            n: int | None = first.shape[0]
        else:
            n = batch_size(args) if args else batch_size(kwargs)
        if self._open:  # another micro-batch of the same optimizer step
            self._micro += 1
            self._samples = None if n is None or self._samples is None else self._samples + n
            return None
        self._open = True
        self._samples = n
        self._micro = 1
        self._start = self._clock()
        if not self._started:
            self._first_forward()
        return None

    def _on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._open and (optimizer is self._last_owned or self._owns(optimizer)):
            self._open = False
            self._record(self._samples, self._micro, 0.0, None, self._start)

    # set-up -----------------------------------------------------------------
    def _first_forward(self) -> None:
        self._started = True
        param = next(self.model.parameters(), None)
        if param is not None:
            use_model_device(self.listener, param.device, self._timer_factory)
        rank = process_rank()
        if rank is not None:
            self.listener.set_rank(rank)
        self.listener.start()
        self._start = self.listener.clock()

    def _owns(self, optimizer: torch.optim.Optimizer) -> bool:
        key = id(optimizer)
        owned = self._owned.get(key)
        if owned is None:
            ours = {id(p) for p in self.model.parameters()}
            owned = any(id(p) in ours for group in optimizer.param_groups for p in group["params"])
            self._owned[key] = owned
            weakref.finalize(optimizer, self._owned.pop, key, None)
        if owned:
            self._last_owned = optimizer
        return owned

    # public -----------------------------------------------------------------
    def set_score(self, loss: Any) -> None:
        """Remember the loss of the current step; read (``.item()``) only on report iterations."""
        self.listener.set_score(loss)

    def detach(self) -> None:
        """Remove the forward and optimizer hooks (idempotent); the listener stays usable elsewhere."""
        if self._detached:
            return
        self._detached = True
        untap(self.model, self._on_forward)
        self._step_handle.remove()
        self._last_owned = None
        attachments = attachments_of(self.model)
        if self in attachments:
            attachments.remove(self)

    @property
    def detached(self) -> bool:
        return self._detached


def attach(
    model: torch.nn.Module,
    listener: PerformanceListener,
    *,
    timer_factory: Callable[[torch.device], IterationTimer] | None = None,
) -> Attachment:
    """Listen to ``model`` in an unchanged training loop; for models whose class you can't change.

    Example:
        >>> handle = trainperf.torch.attach(model, PerformanceListener(10))  # doctest: +SKIP
        >>> ...                                    # your loop, unchanged
        >>> handle.detach()                        # or listener.close()
    """
    return Attachment(model, listener, timer_factory=timer_factory)


def detach(model: torch.nn.Module) -> None:
    """Remove every listener attached to ``model``."""
    for attachment in list(attachments_of(model)):
        attachment.detach()
