"""Calls of ``torch.distributed``'s collectives from Python, seen by what needs to see them.

Two things watch those calls: the launches of a comm hook registered before the timing started
(:mod:`trainperf.torch._launches`), and :class:`BlockedCalls`, the time a training framework's own
collectives (the Hugging Face Trainer's gathers of the loss and of the token count, a broadcast of
its FLOPs) keep the training thread blocked. One wrapper around each collective serves every
observer; it is installed with the first observer and removed with the last (only when it is still
the module's function: something patched on top of it keeps its own).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

__all__ = ["BlockedCalls", "CallObserver", "forget", "observe"]

#: The collectives a comm hook launches its work with, and those a framework blocks in between steps.
_NAMES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
          "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "broadcast_object_list",
          "reduce", "gather", "gather_object", "scatter", "barrier", "monitored_barrier")
_MODULES = (dist, distributed_c10d)
#: What an asynchronous launch returns at once (``async_op=True``): nothing was waited for.
_HANDLES: tuple[type, ...] = tuple(t for t in (getattr(dist, "Work", None), torch.futures.Future) if t is not None)


class CallObserver(Protocol):
    """Told of each call of a wrapped collective, on the calling thread."""

    def enter(self) -> None: ...
    def leave(self, result: object) -> None: ...


_lock = threading.Lock()
_observers: tuple[CallObserver, ...] = ()
_originals: dict[tuple[int, str], Callable[..., Any]] = {}


def observe(observer: CallObserver) -> None:
    """Tell ``observer`` of every call from now on (the first observer wraps the collectives)."""
    global _observers
    with _lock:
        if not _observers:
            _patch()
        _observers = (*_observers, observer)


def forget(observer: CallObserver) -> None:
    """Stop telling ``observer`` (the last one out gives ``torch.distributed`` its functions back)."""
    global _observers
    with _lock:
        if observer not in _observers:
            return
        _observers = tuple(o for o in _observers if o is not observer)
        if not _observers:
            _unpatch()


def _watched(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        observers = _observers
        for observer in observers:
            observer.enter()
        result = None
        try:
            result = original(*args, **kwargs)
            return result
        finally:
            for observer in reversed(observers):
                observer.leave(result)

    collective.__trainperf_original__ = original  # type: ignore[attr-defined]
    return collective


def _patch() -> None:
    for module in _MODULES:
        for name in _NAMES:
            original = getattr(module, name, None)
            if original is None:
                continue
            _originals[(id(module), name)] = original
            setattr(module, name, _watched(original))


def _unpatch() -> None:
    for module in _MODULES:
        for name in _NAMES:
            original = _originals.pop((id(module), name), None)
            current = getattr(module, name, None)
            if original is not None and getattr(current, "__trainperf_original__", None) is original:
                setattr(module, name, original)


class BlockedCalls:
    """Times the collectives that block one thread (the training thread, the one that builds it): each
    outermost call (a framework's gather that calls ``all_gather`` counts once), never an asynchronous
    launch (a comm hook's, which returns a handle at once), and nothing inside a call wrapped with
    :meth:`aside`. Calls of ``torch.distributed``'s functions are seen from construction to
    :meth:`close`; a framework's own entry points are wrapped with :meth:`timed`.

    Args:
        clock: the listener's clock.
        on_wait: called with the seconds of each blocking call, on the thread, as it returns.
    """

    __slots__ = ("clock", "on_wait", "thread", "_depth", "_began", "_open")

    def __init__(self, clock: Callable[[], float], on_wait: Callable[[float], None]) -> None:
        self.clock = clock
        self.on_wait = on_wait
        self.thread = threading.get_ident()
        self._depth = 0
        self._began: float | None = None
        self._open = True
        observe(self)

    def enter(self, timing: bool = True) -> None:
        if threading.get_ident() != self.thread:
            return
        self._depth += 1
        if self._depth == 1 and timing and self._open:
            self._began = self.clock()

    def leave(self, result: object) -> None:
        if threading.get_ident() != self.thread or not self._depth:
            return
        self._depth -= 1
        if self._depth:
            return
        began, self._began = self._began, None
        if began is not None and self._open and not isinstance(result, _HANDLES):
            self.on_wait(self.clock() - began)

    def timed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` (a framework's collective, such as ``accelerator.gather``), timed as a blocking call."""
        return self._around(original, True)

    def aside(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """``original`` (evaluation, a checkpoint), whose collectives stay in its own time."""
        return self._around(original, False)

    def _around(self, original: Callable[..., Any], timing: bool) -> Callable[..., Any]:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.enter(timing)
            result = None
            try:
                result = original(*args, **kwargs)
                return result
            finally:
                self.leave(result)

        return call

    def close(self) -> None:
        """Stop timing (idempotent); wrappers made by :meth:`timed` only pass their calls on from now."""
        self._open = False
        forget(self)
