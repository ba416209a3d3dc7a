"""The job's time account as a listener sees it while it trains: this attempt's windows, and the
earlier attempts its run directory holds. Each record gets the job's goodput so far; the summary
gets the rows (see :mod:`trainperf.records._goodput_rows`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..base import process_age
from ..records import AttemptAccount, GoodputAccount, PerformanceRecord, StepHistogram, account_rank, live_goodput

if TYPE_CHECKING:
    from ..ranks import RunDirSink

__all__: list[str] = []

_SET_GOODPUT = PerformanceRecord.__dict__["goodput"].__set__


class LiveGoodput:
    """This attempt's account, the earlier attempts', and the steady windows' step times of all of them.

    Args:
        wall_clock: the listener's wall clock.
        pid: this process.
        rank: the listener's rank (said in the summary).
        sink: the run directory's sink, whose ledger holds the earlier attempts and this process's start.
    """

    __slots__ = ("attempt", "prior", "steps", "rank", "_sink", "_wall_clock", "start_known")

    def __init__(self, wall_clock: Callable[[], float], pid: int, rank: int | None, sink: RunDirSink | None) -> None:
        now = float(wall_clock())
        if sink is not None:
            ledger = sink.ledger
            process_start, self.start_known = ledger.attempt.process_start, ledger.start_known
            self.prior = ledger.prior_accounts()
        else:
            age, self.start_known = process_age()
            process_start, self.prior = now - age, []
        self.attempt = AttemptAccount(process_start, started=now, pid=pid)
        self.attempt.last_seen = now
        self.steps = StepHistogram()
        for attempt in self.prior:
            self.steps.merge(attempt.steady)
        self.rank = rank
        self._sink = sink
        self._wall_clock = wall_clock

    def started(self, wall: float, iteration: int, startup: dict[str, float]) -> None:
        """Training started at ``wall`` from ``iteration``, after the spans in ``startup``."""
        attempt = self.attempt
        attempt.started = wall
        attempt.start_iteration = iteration
        attempt.add_startup(startup)
        if self._sink is not None:
            self._sink.attempt_started(wall, iteration, startup)

    def add(self, record: PerformanceRecord) -> None:
        """Count the record's window and set its ``goodput``: the job's so far."""
        attempt = self.attempt
        steady = attempt.steady.total
        attempt.add_record(record)
        if attempt.steady.total > steady:  # a steady window: its step is the steady histogram's newest
            self.steps.add(attempt.last_step)
        first = min([*self.prior, attempt], key=lambda a: a.process_start)
        _SET_GOODPUT(record, live_goodput(self.steps, first.process_start, first.start_iteration, record.iteration,
                                          record.timestamp))

    def close(self, tail: dict[str, float]) -> None:
        """The attempt ends now; ``tail`` holds the spans after its last iteration."""
        self.attempt.add_tail(tail)
        self.attempt.close(float(self._wall_clock()))
        if self._sink is not None:
            self._sink.attempt_tail(tail)

    def account(self) -> GoodputAccount:
        """The rows of this rank's attempts so far (the earlier ones as the run directory holds them)."""
        attempt = self.attempt.copy()
        if attempt.ended is None:
            attempt.last_seen = max(attempt.last_seen_or_start(), float(self._wall_clock()))
        notes = () if self.start_known else ("the operating system did not say when this process started: "
                                             "start-up is counted from when trainperf was imported",)
        return account_rank([*self.prior, attempt], rank=self.rank, notes=notes)
