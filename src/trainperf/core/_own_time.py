"""trainperf's own time, kept out of the user's: the clock listeners measure with stands still
while trainperf works.

Every listener reads a *user clock*: its monotonic clock less the seconds trainperf itself spent so
far on the thread that trains (reports, sinks, cross-rank gathers, polls of a device), and less the
seconds the user asked it to leave out (:meth:`~trainperf.PerformanceListener.exclude`). Every
listener that measures with the same clock on the same thread shares one ledger of trainperf's time,
so one listener's report (two listeners on one model, two models with a listener each) is kept out
of the others' windows too; a report on another thread, which does not stop this one, is not. Every
adapter reads the listener's clock for its own timestamps (loader fetches, the step's start and
end), so it agrees with the listener without doing anything of its own.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable

__all__: list[str] = []

LedgerKey = tuple[int, int]  # (id of the raw clock, thread ident)


class Ledger:
    """Seconds added up, read on every clock read; ``busy`` counts the reports in progress (a
    garbage collection that starts then is trainperf's own time, not the user's); ``marks`` keeps
    the latest additions as ``(raw time, total before)``, to place an earlier raw reading."""

    __slots__ = ("total", "busy", "marks")

    def __init__(self) -> None:
        self.total = 0.0
        self.busy = 0
        self.marks: deque[tuple[float, float]] = deque(maxlen=64)

    def add(self, seconds: float, at: float) -> None:
        """``seconds`` of trainperf's time ended at ``at`` on the raw clock."""
        self.marks.append((at, self.total))
        self.total += seconds

    def total_at(self, raw: float) -> float:
        """The total as it was at raw time ``raw`` (what was added after it left out)."""
        total = self.total
        for at, before in reversed(self.marks):
            if at <= raw:
                break
            total = before
        return total


# Keyed by the clock's id, not the clock: any callable is a clock (unhashable ones too), and the
# entry goes when its last listener does, while the listener still holds the clock (so no id is reused).
_ledgers: dict[LedgerKey, tuple[Ledger, int]] = {}
_lock = threading.Lock()
# Releases not yet counted. A listener's finalizer releases its ledger, and a garbage collection can
# run it anywhere, inside acquire() on the same thread too, while _lock is held: a release never
# waits for the lock, it leaves its key here for whoever holds the lock next.
_released: deque[LedgerKey] = deque()


def acquire(clock: Callable[[], float], thread: int) -> tuple[LedgerKey, Ledger]:
    """The ledger of trainperf's own time on ``thread`` for listeners measuring with ``clock``;
    each :func:`acquire` is matched by one :func:`release`."""
    key = (id(clock), thread)
    with _lock:
        _count_releases()
        ledger, users = _ledgers.get(key, (None, 0))
        if ledger is None:
            ledger = Ledger()
        _ledgers[key] = (ledger, users + 1)
        _count_releases()  # any made by a collection while the ledger was built
        return key, ledger


def release(key: LedgerKey) -> None:
    """Give back one :func:`acquire` of ``key``; never blocks (it may run in a finalizer)."""
    _released.append(key)
    if _lock.acquire(blocking=False):
        try:
            _count_releases()
        finally:
            _lock.release()


def _count_releases() -> None:
    while _released:
        key = _released.popleft()
        ledger, users = _ledgers.get(key, (None, 0))
        if ledger is None:
            continue
        if users <= 1:
            del _ledgers[key]
        else:
            _ledgers[key] = (ledger, users - 1)


def ledgers_in_use() -> int:
    """How many ledgers exist (for tests: none is left behind by closed listeners)."""
    with _lock:
        _count_releases()
        return len(_ledgers)


class UserClock:
    """A listener's clock: ``raw() - own.total - offset.total``, moved to another thread's ledger with
    :meth:`move` without a jump.

    Args:
        raw: the monotonic clock the listener was given.
        own: the ledger of trainperf's own time on the thread that trains.
        offset: the time left out by the user (and what keeps the clock continuous across a move).
    """

    __slots__ = ("raw", "own", "offset", "read")

    def __init__(self, raw: Callable[[], float], own: Ledger, offset: Ledger) -> None:
        self.raw, self.own, self.offset = raw, own, offset
        state = self

        def read() -> float:  # a closure: about one Python call per read
            return raw() - state.own.total - offset.total

        self.read: Callable[[], float] = read

    def move(self, own: Ledger) -> None:
        """Count trainperf's time on another ledger (the thread that trains is not the one that built
        the listener). The clock reads on where it was: the difference goes into ``offset``."""
        self.offset.total += self.own.total - own.total
        self.own = own

    @property
    def shift(self) -> float:
        """Seconds the raw clock is ahead of this one now."""
        return self.own.total + self.offset.total

    def at(self, raw: float) -> float:
        """This clock's reading for ``raw``, a reading of the raw clock taken a little earlier: the
        own time added since it is not taken off."""
        return raw - self.own.total_at(raw) - self.offset.total


class OwnTime:
    """One listener's side of trainperf's own time: its :class:`UserClock`, the ledger of the thread
    that trains (acquired here, moved when another thread records, released on :meth:`close` or
    when this object is dropped), the time the user left out, and the own time of the window now open.

    Args:
        raw: the monotonic clock the listener was given.
    """

    __slots__ = ("raw", "clock", "thread", "overhead_s", "_last_end", "_key", "_release", "__weakref__")

    def __init__(self, raw: Callable[[], float]) -> None:
        self.raw = raw
        self.thread = threading.get_ident()
        key, own = acquire(raw, self.thread)
        self._key: list[LedgerKey | None] = [key]
        self._release = weakref.finalize(self, _release_once, self._key)
        self.clock = UserClock(raw, own, Ledger())
        #: trainperf's own seconds since the open window began.
        self.overhead_s = 0.0
        self._last_end: tuple[float, int] | None = None  # where the latest work ended (raw), on which thread

    def move_to_this_thread(self) -> None:
        """The thread that records is not the one that built the listener: trainperf's own time is
        counted on its ledger from now on."""
        thread = threading.get_ident()
        if thread == self.thread:
            return
        key, own = acquire(self.raw, thread)
        self.clock.move(own)
        old = self._key[0]
        self._key[0] = key
        self.thread = thread
        if old is not None:
            release(old)

    def begin(self, at: float | None = None) -> float:
        """trainperf's own work (a report, a poll of the device) begins: the raw clock's reading, for
        :meth:`end` (in a ``finally``). A collection that starts before that end is not the user's.

        Args:
            at: when it began on the raw clock, when earlier than now (the reading that ended the
                user's iteration, at the top of the call that reports it); ``None``: now.
        """
        self.clock.own.busy += 1
        return self.raw() if at is None else at

    def end(self, began: float, *, new_window: bool = False) -> float:
        """The work begun at ``began`` ended: every listener on this clock and thread leaves it out,
        and it is counted as overhead (of the window that starts now, when ``new_window``). Returns
        its seconds."""
        self.clock.own.busy -= 1
        if new_window:
            self.overhead_s = 0.0
        ended = self.raw()  # one reading: the ledger's mark and the seconds agree
        seconds = ended - began
        self.clock.own.add(seconds, ended)
        self.overhead_s += seconds
        self._last_end = (ended, threading.get_ident())
        return seconds

    @property
    def stood_at(self) -> float:
        """Where the clock stood still during the latest work (its reading when that work ended):
        the next window starts there, not at a later reading that a preempted thread could delay."""
        ended = self._last_end
        return self.clock.read() if ended is None else ended[0] - self.clock.shift

    def finish(self, began: float) -> None:
        """The call that reported, begun at raw time ``began``, returns to the user: its time since its
        latest work ended (leaving the lock and the frames: microseconds, unless the system runs another
        process just then) is trainperf's too. Without work in that call, nothing is added."""
        ended, self._last_end = self._last_end, None
        if ended is None or ended[0] < began or ended[1] != threading.get_ident():
            return
        now = self.raw()
        seconds = now - ended[0]
        if seconds > 0.0:
            self.clock.own.add(seconds, now)
            self.overhead_s += seconds

    def leave_out(self, seconds: float) -> None:
        """``seconds`` the user asked to leave out (they just passed)."""
        self.clock.offset.total += seconds

    def close(self) -> None:
        """Give the ledger back (idempotent)."""
        self._release()


def _release_once(key: list[LedgerKey | None]) -> None:
    if key[0] is not None:
        release(key[0])
        key[0] = None
