"""The listener's link to a run directory: its sink, and each window's timeline rows on wall time."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence

from .._window import WindowEntry
from ..sinks._base import SinkError
from ._sink import RunDirSink

__all__: list[str] = []

#: ``(iteration, start_wall_s, etl_s, compute_s, other_s)``: what :meth:`trainperf.RunDirSink.timeline` takes.
TimelineRow = tuple[int, float, float, float, float]
#: A listener's run directory sink and the seconds to add to its clock to get wall time.
RunDir = tuple[RunDirSink, float]


def span_rows(
    start: float, entries: Sequence[WindowEntry], last_iteration: int, wall_offset: float
) -> list[TimelineRow]:
    """One row per iteration of a window.

    Args:
        start: the listener's clock time at which the window started.
        entries: the window's iterations, oldest first (see :data:`trainperf._window.WindowEntry`).
        last_iteration: the (1-based) number of the window's last iteration.
        wall_offset: seconds to add to the listener's clock to get wall time.
    """
    rows: list[TimelineRow] = []
    prev = start
    first = last_iteration - len(entries) + 1
    for k, (end, etl, started, _samples, _batches, other, _steps, _skipped) in enumerate(entries):
        wait = etl if started is None else max(0.0, started - prev)
        compute = max(0.0, end - prev - wait - other)
        rows.append((first + k, prev + wall_offset, wait, compute, other))
        prev = end
    return rows


def open_run_dir(
    run_dir: str | os.PathLike[str] | None, rank: int | None, clock: Callable[[], float],
    wall_clock: Callable[[], float],
) -> RunDir | None:
    """A listener's :class:`RunDirSink` (rank 0 when no rank is known; local rank and world size from
    torchrun's ``LOCAL_RANK`` / ``WORLD_SIZE``) and its clock's offset to wall time, taken once.

    Args:
        run_dir: the run's folder, or ``None`` for no run directory.
        rank: the listener's rank.
        clock: the listener's monotonic clock.
        wall_clock: the listener's wall clock.
    """
    if run_dir is None:
        return None
    rank = 0 if rank is None else rank
    local_rank, world_size = _env_int("LOCAL_RANK"), _env_int("WORLD_SIZE")
    sink = RunDirSink(run_dir, rank=rank, local_rank=local_rank, wall_clock=wall_clock,
                      world_size=world_size if world_size is not None and world_size > rank else None)
    return sink, wall_clock() - clock()


def write_spans(
    run_dir: RunDir, start: float, window: Sequence[WindowEntry], last_iteration: int, shift: float = 0.0
) -> None:
    """Hand a reported window's iterations to the run directory's bounded timeline; a failure warns
    and training goes on.

    Args:
        run_dir: what :func:`open_run_dir` returned.
        start: the listener's clock time at which the window started.
        window: the window's entries.
        last_iteration: the number of the window's last iteration.
        shift: seconds the listener's raw clock is ahead of the clock its window was measured with
            (trainperf's own time and the time left out so far).
    """
    sink, wall_offset = run_dir
    if sink.closed:
        return
    try:
        sink.spans(span_rows(start, window, last_iteration, wall_offset + shift))
    except Exception as exc:  # noqa: BLE001 - the timeline must never stop training
        warnings.warn(f"trainperf could not write the timeline of {sink!r}: {exc!r}", SinkError, stacklevel=3)


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    try:
        value = None if raw is None else int(raw)
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None
