"""A data-parallel run simulated on fake clocks, written through the public API (listeners with
``rank=`` and ``run_dir=``), for the run directory and report tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainperf import PerformanceListener, RunDirSink

BASE = 1_700_000_000.0


class _RankClock:
    """One rank's clocks: a monotonic clock with its own origin, and a wall clock shifted by ``shift``."""

    def __init__(self, rank: int, shift: float) -> None:
        self.t = 0.0
        self.rank = rank
        self.shift = shift

    def mono(self) -> float:
        return self.t + 1000.0 * self.rank

    def wall(self) -> float:
        return BASE + self.t + self.shift


def run_dir_sink(listener: PerformanceListener) -> RunDirSink:
    """The listener's run directory sink, found among its public sinks."""
    return next(s for s in listener.sinks if isinstance(s, RunDirSink))


def simulate(
    run_dir: Path,
    *,
    ranks: int = 4,
    iterations: int = 200,
    frequency: int = 10,
    etl_ms: Callable[[int, int], float] = lambda rank, i: 2.0,
    forward_ms: Callable[[int, int], float] = lambda rank, i: 10.0,
    other_ms: Callable[[int, int], float] = lambda rank, i: 0.0,
    post_ms: float = 20.0,
    timed: bool = True,
    sync: bool = True,
    killed: dict[int, int] | None = None,
    shifts: dict[int, float] | None = None,
    clock_estimates: bool = False,
) -> list[PerformanceListener]:
    """Train ``iterations`` steps on ``ranks`` ranks; return the listeners (killed ones left open).

    Args:
        etl_ms, forward_ms: each rank's data wait and forward pass at iteration ``i``.
        other_ms: each rank's host time after the previous step.
        post_ms: backward and optimizer step after the all-reduce.
        timed: record what the torch adapter times in a distributed run: the forward pass, the wait
            in the collective and the step after it.
        sync: every rank waits for the slowest in the all-reduce (DDP), else each runs on its own.
        killed: rank -> the iteration after which it stops without closing.
        shifts: rank -> seconds its wall clock is ahead of rank 0's.
        clock_estimates: record each rank's exact offset in ``clock.jsonl``.
    """
    killed = killed or {}
    shifts = shifts or {}
    clocks = [_RankClock(r, shifts.get(r, 0.0)) for r in range(ranks)]
    # sinks inline: a killed rank's files hold what it reported (on the writer thread, a crash also
    # loses what was still queued)
    listeners = [PerformanceListener(frequency, sinks=[], verdict=False, clock=c.mono, wall_clock=c.wall, rank=r,
                                     run_dir=run_dir, sink_thread=False) for r, c in enumerate(clocks)]
    if clock_estimates:
        for r, (c, listener) in enumerate(zip(clocks, listeners, strict=True)):
            run_dir_sink(listener).clock(c.wall(), -c.shift, 0.0005, "reference" if r == 0 else "aligned")
    for listener in listeners:
        listener.start()
    for i in range(1, iterations + 1):
        alive = [r for r in range(ranks) if killed.get(r, iterations + 1) >= i]
        arrivals = {r: clocks[r].t + (etl_ms(r, i) + other_ms(r, i) + forward_ms(r, i)) / 1000.0 for r in alive}
        latest = max(arrivals.values())
        for r in alive:
            if timed:
                listeners[r].add_time("forward", forward_ms(r, i) / 1000.0)
                listeners[r].add_time("wait", (latest if sync else arrivals[r]) - arrivals[r] + 0.001)
                listeners[r].add_time("step", post_ms / 1000.0 - 0.001)
            clocks[r].t = (latest if sync else arrivals[r]) + post_ms / 1000.0
            listeners[r].record_iteration(samples=32, etl=etl_ms(r, i) / 1000.0, other=other_ms(r, i) / 1000.0)
    for r, listener in enumerate(listeners):
        if r not in killed:
            listener.close()
    return listeners
