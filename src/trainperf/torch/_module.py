"""``ListenerModule``: Deeplearning4j's ``setListeners`` and ``fit`` on a ``torch.nn.Module``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..base import check_int
from ..core import PerformanceListener
from ._attach import Attachment, attach, detach
from ._batch import map_tensors
from ._loader import timed
from ._oom import OOM_ERRORS, saw_oom
from ._tap import attachments_of

__all__ = ["ListenerModule"]



class ListenerModule:
    """Mix into a model class to give it ``set_listeners`` and a reference ``fit`` loop.

    Example:
        >>> class Net(ListenerModule, torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.layer = torch.nn.Linear(4, 1)
        ...     def forward(self, x):
        ...         return self.layer(x)
        >>> model = Net()
        >>> _ = model.set_listeners(PerformanceListener(10, sinks=[], report_gc=True))
        >>> len(model.listeners)
        1
    """

    def set_listeners(self, *listeners: PerformanceListener, start_iteration: int = 0) -> list[Attachment]:
        """Replace this model's listeners with ``listeners`` (no argument removes them all).
        ``start_iteration``: the iterations done before, for a run resumed from a checkpoint (the first
        record's ``first_iteration`` is ``start_iteration + 1``)."""
        self._check_module()
        detach(self)  # type: ignore[arg-type]
        return self.add_listeners(*listeners, start_iteration=start_iteration)

    def add_listeners(self, *listeners: PerformanceListener, start_iteration: int = 0) -> list[Attachment]:
        """Add listeners beside those already set (``start_iteration`` as for :meth:`set_listeners`)."""
        self._check_module()
        check_int("start_iteration", start_iteration)  # said even with no listener given
        return [attach(self, listener, start_iteration=start_iteration)  # type: ignore[arg-type]
                for listener in listeners]

    @property
    def listeners(self) -> list[PerformanceListener]:
        """The listeners attached to this model."""
        return [a.listener for a in attachments_of(self)]

    def set_score(self, loss: Any) -> None:
        """Hand the current step's loss to every listener (read on report iterations only)."""
        for attachment in attachments_of(self):
            attachment.set_score(loss)

    def fit(
        self,
        loader: Iterable[Any],
        optimizer: torch.optim.Optimizer,
        loss_fn: Callable[[Any, Any], torch.Tensor],
        epochs: int = 1,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        """A plain training loop: batches are ``(inputs, targets)``, one optimizer step per batch.

        The data wait is the exact time blocked on ``loader``, and the loss is reported as the score.

        Args:
            loader: an iterable of ``(inputs, targets)`` batches (nested inputs are fine).
            optimizer: the optimizer over this model's parameters.
            loss_fn: ``loss_fn(outputs, targets)`` returns a scalar tensor.
            epochs: passes over ``loader`` (a positive int).
            device: where to move each batch; defaults to the device of the model's parameters.
        """
        self._check_module()
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs must be a positive int, got {epochs!r}")
        if not callable(loss_fn):
            raise TypeError(f"loss_fn must be callable, got {loss_fn!r}")
        module: torch.nn.Module = self  # type: ignore[assignment]
        if device is None:
            param = next(module.parameters(), None)
            target = param.device if param is not None else torch.device("cpu")
        else:
            target = torch.device(device)
        module.train()
        listeners = self.listeners
        # the loss goes to the listeners that record a score (report_score=False refuses it)
        scored = [listener for listener in listeners if listener.options.report_score is not False]
        source = timed(loader, self) if listeners else loader
        try:
            self._fit(source, listeners, scored, optimizer, loss_fn, epochs, target)
        except OOM_ERRORS as error:
            saw_oom(listeners, error)  # its evidence written, it goes on unchanged
            raise
        for listener in listeners:
            listener.flush()

    def _fit(self, source: Iterable[Any], listeners: list[PerformanceListener], scored: list[PerformanceListener],
             optimizer: torch.optim.Optimizer, loss_fn: Callable[[Any, Any], torch.Tensor], epochs: int,
             target: torch.device) -> None:
        module: torch.nn.Module = self  # type: ignore[assignment]
        for epoch in range(epochs):
            for listener in listeners:
                listener.set_epoch(epoch)
            for batch in source:
                inputs, targets = map_tensors(batch[:2], lambda t: t.to(target, non_blocking=True))
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(module(inputs), targets)
                loss.backward()  # type: ignore[no-untyped-call]
                if scored:
                    score = loss.detach()
                    for listener in scored:
                        listener.set_score(score)
                optimizer.step()

    def _check_module(self) -> None:
        if not isinstance(self, torch.nn.Module):
            raise TypeError(f"{type(self).__name__} must also subclass torch.nn.Module to use ListenerModule")
