"""What an unchanged loop does besides forwards and optimizer steps: DataLoader fetches and skipped steps.

Installed once, when the first model is listened to, and removed with the last one:

* the ``torch.utils.data.DataLoader`` iterator's ``__next__`` (and ``DataLoader.__iter__``, which
  starts worker processes) are timed, and each fetch is handed to the active attachments with the
  batch it delivered, so every micro-batch's load counts in the step that consumes it;
* ``torch.amp.GradScaler.update`` tells the attachments that an optimizer step happened even when
  the scaler skipped ``optimizer.step()`` for inf/NaN gradients.
* a fetch (or ``iter()``) on the training thread with autograd off is an evaluation loader's: an
  observer with an ``on_eval_fetch(started)`` method is told where it started.

Only fetches on the thread that trains the model count, so a background prefetch thread that
iterates a DataLoader does not. A loader wrapped in :func:`trainperf.torch.timed` is timed there
instead (see :func:`suppressed`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from threading import get_ident
from typing import Any, Protocol

import torch
from torch import is_grad_enabled
from torch.utils.data import dataloader as _dl

__all__: list[str] = []


class LoopObserver(Protocol):
    """What the hooks call; :class:`trainperf.torch.Attachment` implements it."""

    def on_fetch(self, started: float, ended: float, batch: Any) -> None: ...

    def on_loader(self, loader: Any, iterator: Any) -> None: ...
    def on_scaler_update(self) -> None: ...
    def about_to_wait(self) -> None: ...  # said before each fetch: the writer may work while it waits

    clock: Callable[[], float]
    thread: int  # the training thread: fetches on other threads are not data wait


_observers: list[weakref.ref[LoopObserver]] = []  # weak: a model dropped without close() is not kept
# Fetches inside :func:`suppressed` are timed by the caller. A plain counter, not a thread-local: only
# the training thread's fetches count at all, and a thread-local costs a lookup on every fetch.
_suppressed = 0
_originals: dict[str, Any] = {}
#: A fetch that blocked this long is a wait worth telling the listener of before the next fetch (its
#: writer thread may work while the loader's workers are waited for); a loader whose batches are
#: ready (in memory, or prefetched in time) does not wake the writer for nothing.
BLOCKED_S = 0.0005
_blocked = True  # the last fetch on the training thread blocked for at least BLOCKED_S
_next: Callable[[Any], Any] = _dl._BaseDataLoaderIter.__next__


def register(observer: LoopObserver) -> None:
    """Start telling ``observer`` about fetches and scaler updates (installs the wrappers on first use)."""
    if not _observers:
        _install()
    _observers.append(weakref.ref(observer))


def unregister(observer: LoopObserver) -> None:
    """Stop telling ``observer``; the last one out restores torch's own methods."""
    _observers[:] = [ref for ref in _observers if ref() not in (None, observer)]
    if not _observers:
        _uninstall()


@contextlib.contextmanager
def suppressed() -> Iterator[None]:
    """Fetches inside are not reported (the caller times them itself)."""
    global _suppressed
    _suppressed += 1
    try:
        yield
    finally:
        _suppressed -= 1


def _live() -> list[LoopObserver]:
    return [o for ref in _observers if (o := ref()) is not None]


def _listening() -> list[LoopObserver]:
    if _suppressed:
        return []
    # a fetch counts on the observer's training thread with autograd on (not a validation loader)
    return [o for o in _live() if is_grad_enabled() and get_ident() == o.thread]


def _evaluating() -> None:
    """A fetch with autograd off began: tell the observers of this thread that look for evaluation."""
    thread = get_ident()
    for observer in _live():
        if observer.thread == thread:
            on_eval = getattr(observer, "on_eval_fetch", None)
            if on_eval is not None:
                on_eval(observer.clock())


def _timed_next(self: Any) -> Any:
    if len(_observers) == 1 and not _suppressed:  # the common case, kept short: one listened model
        observer = _observers[0]()
        if observer is None or not (is_grad_enabled() and get_ident() == observer.thread):  # as _listening
            if observer is not None and not is_grad_enabled():
                _evaluating()
            return _next(self)
        global _blocked
        clock = observer.clock
        if _blocked:
            observer.about_to_wait()
        started = clock()
        try:
            batch = _next(self)
        except StopIteration:
            observer.on_fetch(started, clock(), None)
            raise
        ended = clock()
        _blocked = ended - started >= BLOCKED_S
        observer.on_fetch(started, ended, batch)
        return batch
    observers = _listening()
    if not observers:
        if not _suppressed and not is_grad_enabled():
            _evaluating()
        return _next(self)
    for observer in observers:
        observer.about_to_wait()  # several listened models: rare enough to say it at every fetch
    starts = [observer.clock() for observer in observers]
    try:
        batch = _next(self)
    except StopIteration:  # the end of an epoch (workers shutting down) is data time too, with no batch
        _tell(observers, starts, None)
        raise
    _tell(observers, starts, batch)
    return batch


def _tell(observers: list[LoopObserver], starts: list[float], batch: Any) -> None:
    """Each observer gets the fetch timed by its own clock (tests give listeners fake ones)."""
    for observer, started in zip(observers, starts, strict=True):
        observer.on_fetch(started, observer.clock(), batch)


def _timed_iter(self: Any) -> Any:
    observers = _listening()
    if not observers:
        if not _suppressed and not is_grad_enabled():
            _evaluating()
        return _originals["iter"](self)
    starts = [observer.clock() for observer in observers]
    iterator = _originals["iter"](self)
    _tell(observers, starts, None)
    for observer in observers:
        observer.on_loader(self, iterator)
    return iterator


def _update(self: Any, *args: Any, **kwargs: Any) -> Any:
    for observer in _live():
        observer.on_scaler_update()
    return _originals["update"](self, *args, **kwargs)


def _install() -> None:
    global _next
    _next = _originals["next"] = _dl._BaseDataLoaderIter.__next__
    _originals["iter"] = _dl.DataLoader.__iter__
    _originals["update"] = torch.amp.GradScaler.update
    _dl._BaseDataLoaderIter.__next__ = _timed_next  # type: ignore[method-assign]
    _dl.DataLoader.__iter__ = _timed_iter  # type: ignore[method-assign]
    torch.amp.GradScaler.update = _update  # type: ignore[method-assign]


def _uninstall() -> None:
    if not _originals:
        return
    _dl._BaseDataLoaderIter.__next__ = _originals.pop("next")  # type: ignore[method-assign]
    _dl.DataLoader.__iter__ = _originals.pop("iter")  # type: ignore[method-assign]
    torch.amp.GradScaler.update = _originals.pop("update")  # type: ignore[method-assign]
