"""When a comm hook that was registered before the timing started launches its collectives.

DDP takes one comm hook only, so a hook registered before :func:`~trainperf.torch.attach` (the usual
order: wrap in DDP, register PowerSGD or fp16 compression, then attach) cannot be wrapped in one that
times it. Python comm hooks launch their collectives through ``torch.distributed``'s functions
(``all_reduce``, ``all_gather``, ...), whose calls :mod:`trainperf.torch._dist_calls` shows: while a
listened DDP model's backward pass is past its last gradient, the time of each call is noted, and
the time from the last gradient to the last launch is the hook's own (``comm``), not waiting.
Outside that stretch nothing is noted. A hook in C++ (``register_builtin_comm_hook``) launches in
C++: its short time stays in the wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import _dist_calls

__all__ = ["LaunchWatch"]


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
        _dist_calls.observe(self)

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

    def enter(self) -> None:
        if self.armed and self._thread == threading.get_ident():
            self.last = self.clock()

    def leave(self, result: object) -> None:
        pass

    def close(self) -> None:
        """Stop watching; the last observer gives ``torch.distributed`` its functions back."""
        self.armed = False
        _dist_calls.forget(self)
