"""The hand-over from one thread recording without a lock to every thread taking it.

A listener lets the first thread that records call it without a lock. When a second thread uses it,
from then on every call takes the lock; but the first thread may be inside the unlocked part of a
call at that moment (it read the owner before it changed). It has left that part once it calls again
(a call then takes the lock) or reports (a report takes the lock), and says so here; until then the
second thread waits, at most :data:`HANDOVER_TIMEOUT_S`: a first thread that records no more cannot
be inside a call for long. It knows nothing of the listener."""

from __future__ import annotations

import threading
import warnings

from ..base import user_stacklevel

__all__: list[str] = []

#: The listener's owner once a second thread has used it: every call then takes the lock.
SHARED = -1
#: The listener's owner once it is closed: every call takes the slow path, which refuses it.
CLOSED = -2
#: The longest a second thread waits for the first to leave the unlocked part of a call, once.
HANDOVER_TIMEOUT_S = 0.5

_get_ident = threading.get_ident


class Handover:
    """Whether the listener is shared, and the wait for the first thread while it becomes so."""

    __slots__ = ("shared", "_left", "_from", "_queued")

    def __init__(self) -> None:
        self.shared = False
        self._left: threading.Event | None = None  # set when the first thread has left its call
        self._from = 0
        # Threads that said they left and have not taken the lock yet: while another holds it, they
        # wait for it, outside the unlocked part, and cannot go back to it before the owner changes.
        self._queued: set[int] = set()

    def expect(self, first: int | None) -> None:
        """Get ready to hear ``first`` say it left, before the listener's owner says it is shared: a
        first thread that sees the change at once and says so then is heard, not missed (the second
        thread would otherwise wait the whole bound while the first waits for the lock)."""
        if first is not None and first >= 0 and first != _get_ident() and self._left is None:
            self._from = first
            self._left = threading.Event()

    def wait_for(self, first: int | None) -> None:
        """The listener is shared from now on (its owner already says so); ``first``, the thread that
        recorded alone until now, is waited for unless it is this one or it waits for the lock. Call
        it with the lock held, after :meth:`expect`."""
        self.shared = True
        if first is not None and first >= 0 and first != _get_ident():
            self.expect(first)
            left = self._left
            if left is not None and first not in self._queued:
                left.wait(HANDOVER_TIMEOUT_S)
            self._left = None

    def left_unlocked(self) -> None:
        """The calling thread is out of the unlocked part of its calls and about to take the lock (it
        says so on each locked call and each report); call :meth:`holding` once it holds the lock."""
        me = _get_ident()
        self._queued.add(me)
        left = self._left
        if left is not None and me == self._from:
            left.set()

    def holding(self) -> None:
        """The calling thread, which said :meth:`left_unlocked`, holds the lock now."""
        self._queued.discard(_get_ident())

    def share(self, first: int | None) -> None:
        """A second thread uses the listener: wait for ``first`` (see :meth:`wait_for`) and say once
        that every call takes the lock from now on. Call it with the lock held, after :meth:`expect`."""
        self.wait_for(first)
        warnings.warn(
            "trainperf: this PerformanceListener is used from more than one thread; from now on each "
            "record_iteration takes a lock. Iterations of all threads count in the same windows, in "
            "the order they end.",
            RuntimeWarning,
            stacklevel=user_stacklevel(),
        )
