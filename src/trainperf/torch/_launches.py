"""When a comm hook that was registered before the timing started launches its collectives.

DDP takes one comm hook only, so a hook registered before :func:`~trainperf.torch.attach` (the usual
order: wrap in DDP, register PowerSGD or fp16 compression, then attach) cannot be wrapped in one that
times it. Python comm hooks launch their collectives through ``torch.distributed``'s functions
(``all_reduce``, ``all_gather``, ...): while a listened DDP model's backward pass is past its last
gradient, those functions note the time they are called, and the time from the last gradient to the
last launch is the hook's own (``comm``), not waiting. Outside that stretch the functions only pass
the call on. A hook in C++ (``register_builtin_comm_hook``) launches in C++: its short time stays in
the wait.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d

__all__ = ["LaunchWatch"]

#: The collectives a comm hook launches its work with.
_NAMES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
          "broadcast", "reduce")
_MODULES = (dist, distributed_c10d)

_lock = threading.Lock()
_watching: list[LaunchWatch] = []
_originals: dict[tuple[int, str], Callable[..., Any]] = {}


class LaunchWatch:
    """Notes, while :attr:`armed`, the clock time of the latest collective launched on the calling
    thread (see the module's docstring).

    Args:
        clock: the clock to note launches on.
    """

    __slots__ = ("clock", "armed", "last", "_thread")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.armed = False
        self.last: float | None = None
        self._thread = threading.get_ident()
        with _lock:
            if not _watching:
                _patch()
            _watching.append(self)

    def arm(self) -> None:
        """Note launches from now on, on this thread (the backward pass's)."""
        self.last = None
        self._thread = threading.get_ident()
        self.armed = True

    def disarm(self) -> float | None:
        """Stop noting; the latest launch's time since :meth:`arm`, else ``None``."""
        self.armed = False
        last, self.last = self.last, None
        return last

    def seen(self) -> None:
        if self._thread == threading.get_ident():
            self.last = self.clock()

    def close(self) -> None:
        """Stop watching; the last watch gives ``torch.distributed`` its functions back."""
        self.armed = False
        with _lock:
            if self in _watching:
                _watching.remove(self)
                if not _watching:
                    _unpatch()


def _noting(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def launch(*args: Any, **kwargs: Any) -> Any:
        for watch in _watching:
            if watch.armed:
                watch.seen()
        return original(*args, **kwargs)

    launch.__trainperf_original__ = original  # type: ignore[attr-defined]
    return launch


def _patch() -> None:
    for module in _MODULES:
        for name in _NAMES:
            original = getattr(module, name, None)
            if original is None:
                continue
            _originals[(id(module), name)] = original
            setattr(module, name, _noting(original))


def _unpatch() -> None:
    for module in _MODULES:
        for name in _NAMES:
            original = _originals.pop((id(module), name), None)
            current = getattr(module, name, None)
            # given back only when still ours: something patched on top keeps its own
            if original is not None and getattr(current, "__trainperf_original__", None) is original:
                setattr(module, name, original)
