"""Exact data-loading wait: the time blocked in ``next()`` on a loader."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from ..core import PerformanceListener, fetch_wait
from . import _loop_hooks as loop_hooks
from ._advice import loader_advisor, on_cuda_of
from ._attach import Attachment
from ._oom import OOM_ERRORS, saw_oom
from ._tap import attachments_of, is_listened

__all__ = ["TimedLoader", "timed"]

T = TypeVar("T")


def _resolve(targets: tuple[Any, ...]) -> tuple[list[PerformanceListener], list[Attachment]]:
    """The listeners named directly, and the attachments of the listened-to models."""
    listeners: list[PerformanceListener] = []
    attachments: list[Attachment] = []
    for target in targets:
        if isinstance(target, PerformanceListener):
            listeners.append(target)
        elif is_listened(target):
            attachments.extend(attachments_of(target))
        else:
            raise TypeError(f"targets must be PerformanceListener objects or listened-to models, got {target!r}")
    return listeners, attachments


class TimedLoader(Generic[T]):
    """Wraps an iterable; every ``next()`` adds the time it blocked to the listeners' data wait.

    Args:
        iterable: a DataLoader or any iterable of batches.
        *targets: listeners, or models with listeners attached (resolved on each ``iter()``). A model's
            listeners also take the batches' samples from what the loader delivered.
    """

    def __init__(self, iterable: Iterable[T], *targets: Any) -> None:
        if not targets:
            raise ValueError("timed() needs at least one listener or listened-to model in targets")
        self.iterable = iterable
        self.targets = targets
        listeners, attachments = _resolve(targets)
        for listener in [*listeners, *(a.listener for a in attachments)]:
            listener.add_advisor(loader_advisor(iterable, on_cuda_of(listener)))

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        listeners, attachments = _resolve(self.targets)
        if len(listeners) + len(attachments) == 1:  # the common case: one clock
            yield from self._iterate_one(listeners, attachments)
            return
        # Each target measures on its own clock (each leaves out its own excluded time).
        clocks = [*(listener.clock for listener in listeners), *(a.clock for a in attachments)]
        with loop_hooks.suppressed():  # a DataLoader inside is timed here, not twice
            starts = [clock() for clock in clocks]
            iterator = iter(self.iterable)
            ends = [clock() for clock in clocks]
        k = len(listeners)
        for attachment, started, ended in zip(attachments, starts[k:], ends[k:], strict=True):
            attachment.on_fetch(started, ended, None)
        waiting = [*(listener.about_to_wait for listener in listeners), *(a.about_to_wait for a in attachments)]
        while True:
            for about_to_wait in waiting:
                about_to_wait()
            starts = [clock() for clock in clocks]
            try:
                with loop_hooks.suppressed():
                    batch = next(iterator)
            except OOM_ERRORS as error:  # the loader's own (a batch too large to collate): its evidence
                saw_oom([*listeners, *(a.listener for a in attachments)], error)
                raise
            except StopIteration:
                ends = [clock() for clock in clocks]
                for attachment, started, ended in zip(attachments, starts[k:], ends[k:], strict=True):
                    attachment.on_fetch(started, ended, None)  # an epoch's end: data time, no batch
                return
            ends = [clock() for clock in clocks]
            for listener, started, ended in zip(listeners, starts, ends, strict=False):
                listener.add_etl(fetch_wait(listener.gc_pauses, started, ended))
            for attachment, started, ended in zip(attachments, starts[k:], ends[k:], strict=True):
                attachment.on_fetch(started, ended, batch)
            yield batch

    def _iterate_one(self, listeners: list[PerformanceListener], attachments: list[Attachment]) -> Iterator[T]:
        clock = listeners[0].clock if listeners else attachments[0].clock
        attachment = attachments[0] if attachments else None
        with loop_hooks.suppressed():  # a DataLoader inside is timed here, not twice
            started = clock()
            iterator = iter(self.iterable)
            ended = clock()
        if attachment is not None:
            attachment.on_fetch(started, ended, None)
        about_to_wait = listeners[0].about_to_wait if listeners else attachments[0].about_to_wait
        blocked = True  # the last fetch waited: say so before the next one (see loop_hooks.BLOCKED_S)
        while True:
            if blocked:
                about_to_wait()
            started = clock()
            try:
                with loop_hooks.suppressed():
                    batch = next(iterator)
            except OOM_ERRORS as error:  # the loader's own (a batch too large to collate): its evidence
                saw_oom([*listeners, *(a.listener for a in attachments)], error)
                raise
            except StopIteration:
                if attachment is not None:
                    attachment.on_fetch(started, clock(), None)  # an epoch's end: data time, no batch
                return
            ended = clock()
            blocked = ended - started >= loop_hooks.BLOCKED_S
            if attachment is None:
                listeners[0].add_etl(fetch_wait(listeners[0].gc_pauses, started, ended))
            else:
                attachment.on_fetch(started, ended, batch)
            yield batch


def timed(iterable: Iterable[T], *targets: Any) -> TimedLoader[T]:
    """Measure the exact time the loop blocks on ``iterable``; see :class:`TimedLoader`."""
    return TimedLoader(iterable, *targets)
