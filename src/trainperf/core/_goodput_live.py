"""The job's time account as a listener sees it while it trains: this attempt's windows, and the
earlier attempts its run directory holds. Each record gets the job's goodput so far; the summary
gets the rows (see :mod:`trainperf.records._goodput_rows`)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..base import process_age
from ..records import AttemptAccount, GoodputAccount, PerformanceRecord, StepHistogram, account_rank, live_goodput

if TYPE_CHECKING:
    from ..ranks import RunDirSink

__all__: list[str] = []

_SET_GOODPUT = PerformanceRecord.__dict__["goodput"].__set__
#: Records waiting to be counted, past which the training thread counts them itself (a writer thread
#: that keeps up counts each batch before its sinks write it).
CATCH_UP_AT = 16


class LiveGoodput:
    """This attempt's account, the earlier attempts', and the steady windows' step times of all of them.

    Args:
        wall_clock: the listener's wall clock.
        pid: this process.
        rank: the listener's rank now (said in the summary).
        sink: the run directory's sink, whose ledger holds the earlier attempts and this process's start.
    """

    __slots__ = ("attempt", "prior", "steps", "_rank", "_sink", "_wall_clock", "start_known", "_first", "_read",
                 "_pending", "_lock")

    def __init__(self, wall_clock: Callable[[], float], pid: int, rank: Callable[[], int | None],
                 sink: RunDirSink | None) -> None:
        now = float(wall_clock())
        if sink is not None:
            process_start, self.start_known = sink.ledger.attempt.process_start, sink.ledger.start_known
        else:
            age, self.start_known = process_age()
            process_start = now - age
        self.attempt = AttemptAccount(process_start, started=now, pid=pid)
        self.attempt.last_seen = now
        self.prior: list[AttemptAccount] = []
        self.steps = self.attempt.steady
        self._first = self.attempt  # the job's first attempt
        self._rank = rank
        self._sink = sink
        self._wall_clock = wall_clock
        self._read = False
        self._pending: deque[PerformanceRecord] = deque()  # records not counted yet
        self._lock = threading.Lock()  # one thread counts at a time, in the records' order

    def _read_prior(self) -> None:
        """The earlier attempts of the run directory's folder, read once training starts (or at the
        first window): by then an adapter that found the process group has moved it to its rank's."""
        self._read = True
        if self._sink is None:
            return
        self.prior = self._sink.ledger.prior_accounts()
        if self.prior:  # the steady steps of every attempt (with none earlier, this attempt's own)
            self.steps = StepHistogram()
            for attempt in [*self.prior, self.attempt]:
                self.steps.merge(attempt.steady)
        self._first = min([*self.prior, self.attempt], key=lambda a: a.process_start)

    def started(self, wall: float, iteration: int, startup: dict[str, float]) -> None:
        """Training started at ``wall`` from ``iteration``, after the spans in ``startup``."""
        if not self._read:
            self._read_prior()
        attempt = self.attempt
        attempt.started = wall
        attempt.start_iteration = iteration
        attempt.add_startup(startup)
        if self._sink is not None:
            self._sink.attempt_started(wall, iteration, startup)

    def add(self, record: PerformanceRecord) -> None:
        """A window's record, to be counted (and its ``goodput`` set) before any sink sees it: by the
        writer thread as it takes the record, or here once a few are waiting. Counted a few at a time,
        the account costs the training thread a fraction of what one record at a time would."""
        pending = self._pending
        pending.append(record)
        if len(pending) >= CATCH_UP_AT and self._lock.acquire(blocking=False):  # else the writer counts them
            try:
                self._count()
            finally:
                self._lock.release()

    def catch_up(self) -> None:
        """Count every record not counted yet (the writer thread, before it hands records to the sinks;
        the summary; the close)."""
        if self._pending:
            with self._lock:
                self._count()

    def _count(self) -> None:
        if not self._read:
            self._read_prior()
        pending, attempt, first = self._pending, self.attempt, self._first
        while pending:
            record = pending.popleft()
            steady = attempt.steady.total
            attempt.add_record(record)
            if self.steps is not attempt.steady and attempt.steady.total > steady:  # a steady window's step
                self.steps.add(attempt.last_step)
            _SET_GOODPUT(record, live_goodput(self.steps, first.process_start, first.start_iteration,
                                              record.iteration, record.timestamp))

    def close(self, tail: dict[str, float]) -> None:
        """The attempt ends now; ``tail`` holds the spans after its last iteration."""
        self.catch_up()
        self.attempt.add_tail(tail)
        self.attempt.close(float(self._wall_clock()))
        if self._sink is not None:
            self._sink.attempt_tail(tail)

    def account(self) -> GoodputAccount:
        """The rows of this rank's attempts so far (the earlier ones as the run directory holds them)."""
        self.catch_up()
        if not self._read:
            self._read_prior()
        with self._lock:
            attempt = self.attempt.copy()
        if attempt.ended is None:
            attempt.last_seen = max(attempt.last_seen_or_start(), float(self._wall_clock()))
        notes = () if self.start_known else ("the operating system did not say when this process started: "
                                             "start-up is counted from when trainperf was imported",)
        return account_rank([*self.prior, attempt], rank=self._rank(), notes=notes)
