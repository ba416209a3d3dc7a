"""One rank's files under a run directory: meta, windows, a bounded timeline, clock estimates, events.

The layout is documented in ``docs/distributed.md``; :func:`trainperf.build_report` reads it back.
"""

from __future__ import annotations

import heapq
import json
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from ..base import atomic_write, open_to_append, remove_leftovers
from ..records import PerformanceRecord, json_of, strict
from ..records import json_line as _line
from ._layout import CLOCK, CLOCK_STATUSES, EVENTS, META, RUN_DIR_SCHEMA, SPAN_PHASES, SPANS, WINDOWS
from ._ledger import GoodputLedger
from ._span_rows import checked_span_row as _span_row

__all__ = ["RunDirSink", "RUN_DIR_SCHEMA", "SPAN_PHASES", "CLOCK_STATUSES", "rank_dir"]

#: The row phases :meth:`RunDirSink.timeline` reads positionally after ``(iteration, start)``.
_ROW_PHASES = ("data", "compute", "other")
#: Order in which an iteration's phases follow each other on the timeline: the loop's own work
#: (logging, evaluation) comes after the previous step, then the data wait, then the step.
_ORDER = ("other", "data", "forward", "backward", "step", "compute", "report")


def rank_dir(run_dir: str | os.PathLike[str], rank: int) -> Path:
    """The folder of ``rank`` under ``run_dir``: ``RUN_DIR/rank-<rank>``."""
    return Path(run_dir) / f"rank-{rank}"


def _check_rank(name: str, value: object, *, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        kind = "a non-negative int or None" if optional else "a non-negative int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


#: How many times :meth:`RunDirSink.close` tries to write ``meta.json`` with ``ended``.
_META_ATTEMPTS = 3

class RunDirSink:
    """Writes one rank's files under ``run_dir/rank-<rank>/`` (see ``docs/distributed.md``).

    As a sink it appends each record to ``windows.jsonl``. :meth:`timeline` takes a window's
    per-iteration rows and keeps full spans for a bounded number of windows: the first
    ``slowest_kept`` windows, then any window slower (mean iteration time) than the
    ``slowest_kept``-th slowest seen so far, so the slowest windows of the run always have their
    detail, and never more than ``max_timeline_windows`` windows in all. :meth:`clock` and
    :meth:`event` append clock estimates and cluster events. Every line is written with one
    ``write`` and flushed, so after a crash the files read back up to their last complete line.
    ``meta.json`` is rewritten whole at start and at :meth:`close` (with ``ended``).

    Args:
        run_dir: the run's folder; created when missing (with its parents).
        rank: this process's rank.
        local_rank: its rank on its host, when known.
        world_size: the number of ranks, when known.
        run_name: a name for the run, shown in the report.
        max_timeline_windows: at most this many windows get full spans.
        slowest_kept: how many of the slowest windows are always kept with detail.
        wall_clock: seconds since the epoch, for ``started`` / ``ended`` and event times.

    Example:
        >>> sink = RunDirSink("runs/today", rank=0, world_size=4)  # doctest: +SKIP
        >>> listener = PerformanceListener(100, sinks=[sink])  # doctest: +SKIP
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        rank: int,
        local_rank: int | None = None,
        world_size: int | None = None,
        run_name: str | None = None,
        max_timeline_windows: int = 64,
        slowest_kept: int = 8,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(run_dir, (str, os.PathLike)):
            raise TypeError(f"run_dir must be a str or os.PathLike, got {run_dir!r}")
        self.rank: int = _check_rank("rank", rank, optional=False)  # type: ignore[assignment]
        self.local_rank = _check_rank("local_rank", local_rank, optional=True)
        self.world_size = _check_rank("world_size", world_size, optional=True)
        if self.world_size is not None and self.world_size <= self.rank:
            raise ValueError(f"world_size must be greater than rank {rank}, got {world_size!r}")
        if run_name is not None and not isinstance(run_name, str):
            raise TypeError(f"run_name must be a str or None, got {run_name!r}")
        self.max_timeline_windows = _check_positive("max_timeline_windows", max_timeline_windows)
        self.slowest_kept = _check_positive("slowest_kept", slowest_kept)
        if not callable(wall_clock):
            raise TypeError(f"wall_clock must be callable, got {wall_clock!r}")
        self.run_name = run_name
        self._wall_clock = wall_clock
        self.path = rank_dir(run_dir, self.rank)
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(f"run_dir {str(run_dir)!r}: {str(self.path)!r} is not a folder")
        self.path.mkdir(parents=True, exist_ok=True)
        remove_leftovers(self.path / META)  # a killed process's half-written meta data
        self._slowest: list[float] = []  # min-heap of the slowest window means seen so far
        self.timeline_windows = 0
        self.timeline_capped = False
        self._meta: dict[str, Any] = {
            "schema": RUN_DIR_SCHEMA, "rank": self.rank, "local_rank": self.local_rank,
            "world_size": self.world_size, "host": socket.gethostname(), "pid": os.getpid(),
            "run_name": run_name, "started": float(wall_clock()), "ended": None,
        }
        self._write_meta()
        self._files: dict[str, IO[str]] = {}
        self._windows_end = 0  # bytes of windows.jsonl, once this sink has opened it
        #: this attempt's time account, kept current in ``goodput.json`` as windows are written
        self.ledger = GoodputLedger(self.path, wall_clock, os.getpid())
        self._closed = False
        self._end_reason: str | None = None  # written at close (set on another thread before it)

    # ------------------------------------------------------------------ files
    def _write_meta(self) -> None:
        text = json.dumps(strict(self._meta), indent=1, allow_nan=False) + "\n"
        try:
            atomic_write(self.path / META, lambda f: f.write(text))
        except FileNotFoundError:
            # another process that took this folder before it knew its rank removed it as it moved
            # on (see set_rank): the folder is this rank's, put it back
            self.path.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path / META, lambda f: f.write(text))

    def _append(self, name: str, text: str) -> None:
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        f = self._files.get(name)
        if f is None:
            # another process that took this folder for its own before it knew its rank may have
            # removed it (see set_rank): put it back, with the meta data
            if not (self.path / META).exists():
                self.path.mkdir(parents=True, exist_ok=True)
                self._write_meta()
            # appended to: a restarted rank keeps its earlier attempt's lines, and a line that attempt
            # left cut (killed mid-write) is ended before the first new one
            f = self._files[name] = open_to_append(self.path / name)
            if name == WINDOWS:
                self._windows_end = os.fstat(f.fileno()).st_size
        f.write(text)
        f.flush()

    # ------------------------------------------------------------------ sink
    def __call__(self, record: PerformanceRecord) -> None:
        self._write_windows((record,), json_of(record))

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        """Append ``records`` to ``windows.jsonl`` with one ``write`` (the writer thread's batch)."""
        if records:
            self._write_windows(records, "".join(map(json_of, records)))

    def _write_windows(self, records: Sequence[PerformanceRecord], text: str) -> None:
        self._append(WINDOWS, text)  # the first opens the file, its size then where this attempt begins
        start = self._windows_end
        self._windows_end = end = start + (len(text) if text.isascii() else len(text.encode("utf-8")))
        self.ledger.windows(records, start, end)

    def spans(self, rows: Iterable[Sequence[Any]]) -> bool:
        """Write the spans of one window's iterations, when the window is kept with detail.

        Args:
            rows: one per iteration, oldest first: ``(iteration, start_wall_s, etl_s, compute_s,
                other_s)``, optionally followed by a mapping of finer phases to seconds (say
                ``{"forward": 0.01, "backward": 0.02, "step": 0.005}``, replacing ``compute``)
                or ``{"report": s}`` for trainperf's own time. Phases of zero length are left out.

        Returns:
            Whether the window's spans were written.
        """
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
            raise TypeError(f"rows must be an iterable of span rows, got {type(rows).__name__}")
        rows = [_span_row(k, row) for k, row in enumerate(rows)]
        if not rows:
            return False
        mean_s = sum(r[2] + r[3] + r[4] for r in rows) / len(rows)
        if not self._keep(mean_s):
            return False
        out: list[str] = []
        for row in rows:
            iteration, start = row[0], row[1]
            phases: dict[str, float] = dict(zip(_ROW_PHASES, row[2:5], strict=True))
            if len(row) > 5:
                finer = row[5]
                if any(k in finer for k in ("forward", "backward", "step")):
                    phases.pop("compute", None)
                phases.update(finer)
            t = start
            for phase in _ORDER:
                d = phases.get(phase, 0.0)
                if d > 0.0:
                    out.append(_line({"i": iteration, "ph": phase, "t": t, "d": d}))
                    t += d
        self._append(SPANS, "".join(out))
        return True

    #: The earlier name of :meth:`spans` (the file is still ``timeline.jsonl``).
    timeline = spans

    def _keep(self, mean_s: float) -> bool:
        """Whether a window of this mean iteration time gets full spans (and remember it)."""
        heap = self._slowest
        among_slowest = len(heap) < self.slowest_kept or mean_s > heap[0]
        if len(heap) < self.slowest_kept:
            heapq.heappush(heap, mean_s)
        elif mean_s > heap[0]:
            heapq.heapreplace(heap, mean_s)
        if not among_slowest:
            return False
        if self.timeline_windows >= self.max_timeline_windows:
            self.timeline_capped = True
            return False
        self.timeline_windows += 1
        return True

    def clock(self, t: float, offset_s: float | None, uncertainty_s: float | None, status: str) -> None:
        """Record an estimate of this rank's clock offset to rank 0: aligned time = local + offset.

        Args:
            t: local wall time of the estimate, seconds since the epoch.
            offset_s: seconds to add to this rank's wall times; ``None`` when unknown.
            uncertainty_s: half the round trip of the best sample, ``None`` when unknown.
            status: ``reference`` (rank 0 itself), ``aligned`` or ``unknown``.
        """
        if status not in CLOCK_STATUSES:
            raise ValueError(f"status must be one of {', '.join(CLOCK_STATUSES)}, got {status!r}")
        for name, value in (("t", t), ("offset_s", offset_s), ("uncertainty_s", uncertainty_s)):
            if value is None and name != "t":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number{'' if name == 't' else ' or None'}, got {value!r}")
        self._append(CLOCK, _line({"t": float(t), "offset_s": offset_s, "uncertainty_s": uncertainty_s,
                                           "status": status}))

    def event(self, event: Mapping[str, Any]) -> None:
        """Append a cluster event to ``events.jsonl`` (rank 0 writes them), e.g.
        ``{"kind": "silent", "rank": 3, "last_seen": 1700000000.0}``; ``t`` is added when missing.

        Args:
            event: a mapping with a string ``kind``.
        """
        if not isinstance(event, Mapping) or not isinstance(event.get("kind"), str):
            raise ValueError(f"event must be a mapping with a str 'kind', got {event!r}")
        data = dict(event)
        data.setdefault("t", float(self._wall_clock()))
        self._append(EVENTS, _line(data))

    def set_rank(self, rank: int) -> None:
        """Move to ``rank``'s folder, when this sink has written nothing but its ``meta.json`` yet
        (a listener built before its process group knew the rank). The meta data this sink wrote
        under the old rank is removed, unless another process has replaced it since.

        Raises:
            ValueError: ``rank`` is not a non-negative int, or lines were already written.
        """
        rank = _check_rank("rank", rank, optional=False)  # type: ignore[assignment]
        if rank == self.rank:
            return
        if self._files or self._closed or self.ledger.written:
            raise ValueError(f"{self!r} has written lines already; it cannot move to rank {rank}")
        if self.world_size is not None and self.world_size <= rank:
            self.world_size = None
        old = self.path
        try:
            meta = json.loads((old / META).read_text(encoding="utf-8"))
            if meta.get("pid") == os.getpid() and meta.get("rank") == self.rank:
                (old / META).unlink()
                old.rmdir()  # only when empty: another rank may share the folder
        except (OSError, ValueError, AttributeError):
            pass
        self.rank = rank
        self.path = rank_dir(old.parent, rank)
        self.path.mkdir(parents=True, exist_ok=True)
        self._meta.update(rank=rank, world_size=self.world_size)
        self._write_meta()
        self.ledger.folder = self.path
        self.ledger.read_prior()

    def set_collectives_untimed(self, why: str) -> None:
        """Say in ``meta.json`` (now, and again at close) that this rank's collectives are not timed,
        and why (``"FSDP2: fully_shard"``, say): the report then says its stragglers are named from
        what precedes the collectives only.

        Raises:
            ValueError: ``why`` is not a non-empty str.
        """
        if not isinstance(why, str) or not why:
            raise ValueError(f"why must be a non-empty str, got {why!r}")
        if self._meta.get("collectives_untimed") != why:
            self._meta["collectives_untimed"] = why
            self._write_meta()

    def set_end_reason(self, reason: str) -> None:
        """Say in ``meta.json``, when it is closed, why the training ended when not normally (an adapter
        that saw it end with an exception gives its type and message: ``"RuntimeError: broken"``).

        Raises:
            ValueError: ``reason`` is not a non-empty str.
        """
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty str, got {reason!r}")
        self._end_reason = reason

    # ------------------------------------------------------------------ the attempt's account
    def attempt_started(self, wall: float, iteration: int, startup: dict[str, float]) -> None:
        """Training started at ``wall`` (seconds since the epoch) from ``iteration``, after the spans in
        ``startup`` (``{"checkpoint_load": seconds}``): kept in ``goodput.json``."""
        self.ledger.started(wall, iteration, startup)

    def attempt_tail(self, tail: dict[str, float]) -> None:
        """The attempt's training ended now, with the spans in ``tail`` after its last iteration (a final
        save): ``goodput.json`` is written at once (before the files are handed to rank 0 at close),
        and again with the end of the process's listening at :meth:`close`."""
        self.ledger.close(tail, windows_end=self._windows_end)

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Close the files and write ``ended`` (and ``timeline_capped``, and ``end_reason`` when one
        was set) to ``meta.json``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors: list[OSError] = []
        for f in self._files.values():
            try:
                f.close()
            except OSError as exc:  # a full disk: the buffered lines are lost; ``ended`` is still written
                errors.append(exc)
        self._files.clear()
        try:
            self.ledger.close(windows_end=self._windows_end)
        except OSError as exc:
            errors.append(exc)
        self._meta["ended"] = float(self._wall_clock())
        self._meta["timeline_windows"] = self.timeline_windows
        self._meta["timeline_capped"] = self.timeline_capped
        if self._end_reason is not None:
            self._meta["end_reason"] = self._end_reason
        for attempt in range(_META_ATTEMPTS):  # a write that fails once (a moment of a full disk) is tried again
            try:
                self.path.mkdir(parents=True, exist_ok=True)
                self._write_meta()
                break
            except OSError as exc:
                if attempt == _META_ATTEMPTS - 1:
                    errors.append(exc)
                else:
                    time.sleep(0.05 * (attempt + 1))
        if errors:
            raise errors[0]

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> RunDirSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunDirSink({str(self.path.parent)!r}, rank={self.rank})"
