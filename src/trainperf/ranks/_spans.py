"""The listener's link to a run directory: its sink, and each window's span rows on wall time."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Sequence

from ..base import env_int, ray_train_run_folder
from ..records import WindowEntry
from ..sinks.shared import SinkError, describe
from ._sink import RunDirSink

__all__: list[str] = []

#: ``(iteration, start_wall_s, etl_s, compute_s, other_s)``: what :meth:`trainperf.RunDirSink.timeline` takes.
SpanRow = tuple[int, float, float, float, float]


def span_rows(
    start: float, entries: Sequence[WindowEntry], last_iteration: int, wall_offset: float
) -> list[SpanRow]:
    """One row per iteration of a window.

    Args:
        start: the listener's clock time at which the window started.
        entries: the window's iterations, oldest first (see :data:`trainperf.records._window.WindowEntry`).
        last_iteration: the (1-based) number of the window's last iteration.
        wall_offset: seconds to add to the listener's clock to get wall time.
    """
    rows: list[SpanRow] = []
    prev = start
    first = last_iteration - len(entries) + 1
    for k, (end, etl, started, _samples, _batches, other, _steps, _skipped) in enumerate(entries):
        wait = etl if started is None else max(0.0, started - prev)
        compute = max(0.0, end - prev - wait - other)
        rows.append((first + k, prev + wall_offset, wait, compute, other))
        prev = end
    return rows


class RunDirLink:
    """A listener's run directory: its :class:`RunDirSink` and the seconds to add to the listener's
    raw clock to get wall time (taken once, when it opens).

    Args:
        sink: the rank's run directory sink.
        wall_offset: wall time less the listener's raw clock.
    """

    __slots__ = ("sink", "wall_offset")

    def __init__(self, sink: RunDirSink, wall_offset: float) -> None:
        self.sink, self.wall_offset = sink, wall_offset

    @classmethod
    def open(
        cls, run_dir: str | os.PathLike[str] | None, rank: int | None, clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> RunDirLink | None:
        """The link for ``run_dir`` (rank 0 when no rank is known; local rank and world size from
        torchrun's ``LOCAL_RANK`` / ``WORLD_SIZE``), or ``None`` without one.

        Args:
            run_dir: the run's folder, or ``None`` for no run directory.
            rank: the listener's rank.
            clock: the listener's raw monotonic clock.
            wall_clock: the listener's wall clock.
        """
        if run_dir is None:
            return None
        if isinstance(run_dir, (str, os.PathLike)) and not os.path.isabs(run_dir):
            # in a Ray Train worker a relative folder is the run's, on its storage, not the worker's own
            # working directory (a per-node session folder)
            storage = ray_train_run_folder()
            if storage is not None:
                run_dir = os.path.join(storage, run_dir)
        rank = 0 if rank is None else rank
        local_rank, world_size = env_int("LOCAL_RANK"), env_int("WORLD_SIZE")
        sink = RunDirSink(run_dir, rank=rank, local_rank=local_rank, wall_clock=wall_clock,
                          world_size=world_size if world_size is not None and world_size > rank else None)
        return cls(sink, wall_clock() - clock())

    def set_rank(self, rank: int) -> None:
        """The process's rank became known: a directory that has received nothing yet moves to its
        folder; one that has is left where it is, with a warning."""
        sink = self.sink
        if sink.rank != rank and not sink.closed:
            try:
                sink.set_rank(rank)
            except ValueError as exc:
                warnings.warn(f"trainperf: {exc}", SinkError, stacklevel=3)

    def spans_task(
        self, start: float, window: Sequence[WindowEntry], last_iteration: int, shift: float
    ) -> Callable[[], None]:
        """What writes a reported window's iterations to the run directory's bounded span file, run
        where the sinks run (after the window's record); a failure warns and training goes on.

        Args:
            start: the listener's clock time at which the window started.
            window: the window's entries (the list is the task's from now on).
            last_iteration: the number of the window's last iteration.
            shift: seconds the listener's raw clock is ahead of the clock its window was measured
                with (trainperf's own time and the time left out so far).
        """
        return functools.partial(self._write_spans, start, window, last_iteration, self.wall_offset + shift)

    def _write_spans(self, start: float, window: Sequence[WindowEntry], last_iteration: int,
                     wall_offset: float) -> None:
        sink = self.sink
        if sink.closed:
            return
        try:
            sink.spans(span_rows(start, window, last_iteration, wall_offset))
        except Exception as exc:  # noqa: BLE001 - the span file must never stop training
            warnings.warn(f"trainperf could not write the spans of {describe(sink)}: {describe(exc)}", SinkError,
                          stacklevel=3)
