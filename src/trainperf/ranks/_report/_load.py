"""Read a run directory back: every rank's meta, windows, timeline, clock estimates and events.

Readers never raise on what the files hold: a cut last line, a line that is not a JSON object,
or a field of the wrong type is skipped (and counted), so a crashed or hostile run still reports.
"""

from __future__ import annotations

import math
import os
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._layout import CLOCK, EVENTS, META, SPAN_PHASES, SPANS, WINDOWS
from ._events import MAX_CAPTURES, MAX_SILENT, read_events
from ._folders import RankFolders, rank_folders
from ._read import MAX_LINE_BYTES, Unreadable, lines, num, objects, parse, readable, text, wall

__all__: list[str] = []

#: Window fields the report reads, kept as columns (one float array each; NaN for missing).
WINDOW_FIELDS = ("iteration", "window_iterations", "window_s", "timestamp", "etl_ms", "etl_max_ms", "compute_ms",
                 "other_ms", "iteration_ms", "iteration_p50_ms", "iteration_p95_ms", "iteration_max_ms",
                 "samples_per_sec", "forward_ms", "backward_ms", "step_ms", "comm_ms", "wait_ms", "wait_p50_ms",
                 "gc_total_ms", "tokens_per_sec", "tflops_per_sec", "mfu", "report_ms",
                 "gap", "warmup")
#: Window fields an adapter keeps in ``extra`` (the timed parts of a distributed run's step, and the time in
#: Ray Train's report, a barrier that the straggler analysis leaves out).
EXTRA_FIELDS = frozenset({"forward_ms", "backward_ms", "step_ms", "comm_ms", "wait_ms", "wait_p50_ms", "report_ms"})
_NAN = float("nan")
#: A clock offset between two ranks larger than this (317 years) is not an estimate.
MAX_OFFSET_S = 1e10
#: A span longer than this (116 days) is not an iteration's phase.
MAX_SPAN_S = 1e7
#: Clock estimates kept per rank; the rest are counted as skipped (a run writes a few hundred).
MAX_OBJECTS = 10_000
#: Windows and spans the report holds for a whole run (about 40 MB and 50 MB of columns, and as much
#: again for the analysis of the windows), shared by its ranks, each rank getting at least the minimum:
#: past its share a rank's windows are sampled (every other one dropped, again as needed) and its
#: later spans are left out, both said. Memory stays bounded for any file sizes, and grows with the
#: number of rank folders only.
RUN_WINDOWS = 200_000
RUN_SPANS = 2_000_000
MIN_WINDOWS_PER_RANK = 10
MIN_SPANS_PER_RANK = 100
MAX_WINDOWS = RUN_WINDOWS
MAX_SPANS = RUN_SPANS


@dataclass
class Clock:
    """A rank's clock estimates: aligned time = local time + offset.

    Attributes:
        times: local wall times of the estimates, ascending.
        offsets: the offset of each, in seconds.
        uncertainties: half the best round trip of each, seconds (NaN when unknown).
        status: ``reference``, ``aligned`` or ``unknown`` (no usable estimate).
    """

    times: list[float] = field(default_factory=list)
    offsets: list[float] = field(default_factory=list)
    uncertainties: list[float] = field(default_factory=list)
    status: str = "unknown"

    def offset_at(self, t: float) -> float:
        """The offset at local time ``t``: the nearest estimate outside their span, linear in between."""
        times = self.times
        if not times:
            return 0.0
        k = bisect_left(times, t)
        if k == 0:
            return self.offsets[0]
        if k >= len(times):
            return self.offsets[-1]
        t0, t1 = times[k - 1], times[k]
        o0, o1 = self.offsets[k - 1], self.offsets[k]
        return o0 if t1 <= t0 else o0 + (o1 - o0) * (t - t0) / (t1 - t0)


@dataclass
class Rank:
    """Everything one rank's folder holds, times on the rank's own wall clock until :func:`load_run` aligns them.

    Attributes:
        rank: the rank (from the folder name).
        meta: the fields of ``meta.json`` that could be read.
        windows: one float array per :data:`WINDOW_FIELDS` name, one value per window.
        span_iter, span_phase, span_t, span_d: the timeline spans as columns, in file order.
        clock: the clock estimates.
        events: the ranks its ``silent`` events name (rank 0 writes them) and its profiler captures
            (see :mod:`~trainperf.ranks._report._events`), each checked and kept small.
        skipped: lines skipped per file.
        unreadable: files of the folder that could not be read, and why.
        attempts: ``(first iteration, last iteration, windows)`` of each run that wrote windows into
            this folder, oldest first (more than one when a rank was restarted into it); the windows
            read are the last attempt's.
        folder: the folder's name; ``duplicates``: other folders that name the same rank (not read).
        window_stride: 1, or every how many windows one was kept (a run longer than the report holds).
        spans_not_read: spans beyond the report's limit, left out.
        captures_total: the valid captures its events hold (the first are kept, see :func:`load_run`).
    """

    rank: int
    meta: dict[str, Any]
    windows: dict[str, array[float]]
    span_iter: array[int]
    span_phase: array[int]
    span_t: array[float]
    span_d: array[float]
    clock: Clock
    events: list[dict[str, Any]]
    skipped: dict[str, int]
    unreadable: dict[str, str] = field(default_factory=dict)
    attempts: list[tuple[int, int, int]] = field(default_factory=list)
    folder: str = ""
    duplicates: list[str] = field(default_factory=list)
    window_stride: int = 1
    spans_not_read: int = 0
    captures_total: int = 0

    @property
    def host(self) -> str:
        return str(self.meta.get("host") or "")

    @property
    def captures(self) -> list[dict[str, Any]]:
        """The rank's profiler captures (its ``capture`` events), in file order."""
        return [e for e in self.events if e.get("kind") == "capture"]

    @property
    def n_windows(self) -> int:
        return len(self.windows["iteration"])

    def spans_between(self, first: int, last: int) -> range:
        """Indices of the spans of iterations ``first`` to ``last`` (the timeline is written in order)."""
        return range(bisect_left(self.span_iter, first), bisect_right(self.span_iter, last))


def _read_meta(path: Path, unreadable: Unreadable) -> dict[str, Any]:
    if not readable(path, unreadable):
        return {}
    try:
        if os.path.getsize(path) > MAX_LINE_BYTES:
            unreadable.files[path.name] = "larger than any meta data, not read"
            return {}
        raw = parse(path.read_bytes())
    except OSError as exc:
        unreadable.files[path.name] = exc.strerror or type(exc).__name__
        return {}
    except ValueError:
        unreadable.files[path.name] = "not JSON"
        return {}
    if not isinstance(raw, dict):
        return {}
    meta: dict[str, Any] = {}
    for key in ("host", "run_name"):
        meta[key] = text(raw.get(key))
    for key in ("pid", "local_rank", "world_size", "timeline_windows"):
        value = raw.get(key)
        meta[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
    for key in ("started", "ended"):
        meta[key] = wall(raw.get(key))
    meta["timeline_capped"] = raw.get("timeline_capped") is True
    untimed = text(raw.get("collectives_untimed"))
    if untimed:  # written only by a rank whose collectives are not timed (FSDP)
        meta["collectives_untimed"] = untimed
    return meta


#: The window fields read as plain figures, at the top of a window's line and in its ``extra``; the
#: others (its iterations, time stamp, warm-up and data wait's source) are read apart.
_PLAIN_FIELDS = tuple(name for name in WINDOW_FIELDS if name not in EXTRA_FIELDS
                      and name not in ("iteration", "window_iterations", "timestamp", "warmup", "gap"))
_EXTRA_FIELDS = tuple(name for name in WINDOW_FIELDS if name in EXTRA_FIELDS)
_EMPTY: dict[str, Any] = {}


def _appenders(columns: dict[str, array[float]]) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """Each plain figure's name and the ``append`` of its column, at the top level and in ``extra``."""
    return ([(name, columns[name].append) for name in _PLAIN_FIELDS],
            [(name, columns[name].append) for name in _EXTRA_FIELDS])


def _read_windows(
    path: Path, unreadable: Unreadable, limit: int = MAX_WINDOWS,
) -> tuple[dict[str, array[float]], int, list[tuple[int, int, int]], int, set[int]]:
    """The windows of the last run that wrote into the file, the lines skipped, every run's ``(first,
    last, windows)`` (a rank restarted into its folder starts again at a lower iteration: from 1, or
    from its checkpoint's with another process id), the stride the windows were kept at (past ``limit``
    windows, every other one is dropped and the stride doubles, so memory stays bounded and the whole
    run is still covered), and the first iteration of each run (where its spans start again)."""
    columns = {name: array("d") for name in WINDOW_FIELDS}
    plain, extras = _appenders(columns)
    skipped = 0
    attempts: list[tuple[int, int, int]] = []
    starts: set[int] = set()
    last = -math.inf
    first = count = 0
    stride = 1
    pid: object = None  # the process of the last window read
    for line in lines(path, unreadable):
        try:
            obj = parse(line) if line is not None else None
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            skipped += 1
            continue
        iteration, n = obj.get("iteration"), obj.get("window_iterations")
        if (isinstance(iteration, bool) or not isinstance(iteration, int) or isinstance(n, bool)
                or not isinstance(n, int) or n < 1 or iteration > 2**62 or n > 2**62):
            skipped += 1
            continue
        # a new process counts from 1 again, or (resumed from a checkpoint) from its checkpoint's iteration
        process = obj.get("pid")
        another = isinstance(process, int) and isinstance(pid, int) and process != pid
        restarted = iteration < last and (iteration - n + 1 == 1 or another)
        if iteration <= last and not restarted:  # a line out of order: not a run's
            skipped += 1
            continue
        pid = process
        if restarted:  # a new run in the same folder: the windows read are the newest run's
            attempts.append((first, int(last), count))
            columns = {name: array("d") for name in WINDOW_FIELDS}
            plain, extras = _appenders(columns)
            count, stride = 0, 1
        if not count:
            first = iteration
            starts.add(iteration - n + 1)
        last = iteration
        count += 1
        if (count - 1) % stride:
            continue
        extra = obj.get("extra")
        get, extra_get = obj.get, (extra if isinstance(extra, dict) else _EMPTY).get
        for name, append in plain:
            value = num(get(name))
            append(_NAN if value is None else value)
        for name, append in extras:
            value = num(extra_get(name))
            append(_NAN if value is None else value)
        stamp = wall(get("timestamp"))
        columns["timestamp"].append(_NAN if stamp is None else stamp)
        columns["iteration"].append(float(iteration))  # whole numbers, checked above
        columns["window_iterations"].append(float(n))
        columns["warmup"].append(1.0 if get("warmup") is True else 0.0)
        columns["gap"].append(1.0 if get("etl_source") == "gap" else 0.0)
        if len(columns["iteration"]) >= limit:
            columns = {name: values[::2] for name, values in columns.items()}
            plain, extras = _appenders(columns)
            stride *= 2
    if count:
        attempts.append((first, int(last), count))
    return columns, skipped, attempts, stride, starts


def _read_spans(
    path: Path, unreadable: Unreadable, limit: int = MAX_SPANS, starts: frozenset[int] | set[int] = frozenset({1}),
) -> tuple[array[int], array[int], array[float], array[float], int, int]:
    """The spans of the last run that wrote into the file (see :func:`_read_windows`), at most ``limit``
    of them (the first), the lines skipped, and how many spans beyond the limit were not read. A run
    starts again at one of ``starts`` (1, or where a resumed run's windows began)."""
    phases = {name: k for k, name in enumerate(SPAN_PHASES)}
    iters, kinds, ts, ds = array("q"), array("b"), array("d"), array("d")
    skipped = not_read = 0
    last = -1
    for line in lines(path, unreadable):
        if len(iters) >= limit:
            not_read += 1
            continue
        try:
            if line is None:
                raise ValueError("too long")
            obj = parse(line)
            i, ph, t, d = obj["i"], phases[obj["ph"]], obj["t"], obj["d"]
        except (ValueError, KeyError, TypeError):
            skipped += 1
            continue
        duration = num(d)
        if (isinstance(i, bool) or not isinstance(i, int) or i < 0 or wall(t) is None or duration is None
                or not 0.0 <= duration < MAX_SPAN_S or i > 2**62 or (i < last and i != 1 and i not in starts)):
            skipped += 1
            continue
        if i < last:  # back to where a run starts: a new run in the same folder
            iters, kinds, ts, ds = array("q"), array("b"), array("d"), array("d")
            not_read = 0
        last = i
        iters.append(i)
        kinds.append(ph)
        ts.append(float(t))
        ds.append(float(d))
    return iters, kinds, ts, ds, skipped, not_read


def _read_clock(path: Path, unreadable: Unreadable, limit: int = MAX_OBJECTS) -> tuple[Clock, int]:
    """The rank's clock estimates (at most ``limit``, the rest skipped), and the lines skipped."""
    points: list[tuple[float, float, float]] = []
    reference = False
    skipped = 0
    for obj in objects(path, unreadable):
        if obj is None or len(points) >= limit:
            skipped += 1
            continue
        t, raw, status = wall(obj.get("t")), obj.get("offset_s"), obj.get("status")
        offset = num(raw)
        if offset is not None and not -MAX_OFFSET_S < offset < MAX_OFFSET_S:
            offset = None
        if t is None or status not in ("reference", "aligned", "unknown") or (raw is not None and offset is None):
            skipped += 1  # no time, no known status, or an offset that is no estimate
            continue
        if status == "reference":
            reference = True
            points.append((t, 0.0 if offset is None else offset, num(obj.get("uncertainty_s")) or 0.0))
        elif status == "aligned" and offset is not None:
            u = num(obj.get("uncertainty_s"))
            u = u if u is not None and 0.0 <= u < MAX_OFFSET_S else None
            points.append((t, offset, _NAN if u is None else u))
    points.sort()
    clock = Clock([p[0] for p in points], [p[1] for p in points], [p[2] for p in points])
    clock.status = "reference" if reference else "aligned" if points else "unknown"
    return clock, skipped


def read_rank(path: Path, rank: int, *, max_windows: int = MAX_WINDOWS, max_spans: int = MAX_SPANS,
              max_captures: int = MAX_CAPTURES, max_silent: int = MAX_SILENT) -> Rank:
    """One rank's folder, with at most ``max_windows`` windows (a sample of a longer run, see
    :func:`_read_windows`), ``max_spans`` spans, ``max_captures`` profiler captures and the silent
    events of ``max_silent`` ranks."""
    unreadable = Unreadable()
    windows, skipped_windows, attempts, stride, starts = _read_windows(path / WINDOWS, unreadable, max_windows)
    iters, kinds, ts, ds, skipped_timeline, spans_not_read = _read_spans(path / SPANS, unreadable, max_spans,
                                                                         starts | {1})
    clock, skipped_clock = _read_clock(path / CLOCK, unreadable)
    events, skipped_events, captures_total = read_events(path / EVENTS, unreadable, max_captures, max_silent)
    skipped = {"windows": skipped_windows, "timeline": skipped_timeline, "clock": skipped_clock,
               "events": skipped_events}
    return Rank(rank, _read_meta(path / META, unreadable), windows, iters, kinds, ts, ds, clock, events, skipped,
                unreadable.files, attempts, path.name, window_stride=stride, spans_not_read=spans_not_read,
                captures_total=captures_total)


def _align(rank: Rank) -> None:
    """Shift the rank's wall times onto rank 0's clock."""
    clock = rank.clock
    if not clock.times:
        return
    constant = len(set(clock.offsets)) == 1
    for column in (rank.windows["timestamp"], rank.span_t):
        for k, t in enumerate(column):
            column[k] = t + (clock.offsets[0] if constant else clock.offset_at(t))
    for key in ("started", "ended"):
        if rank.meta.get(key) is not None:
            rank.meta[key] += clock.offset_at(rank.meta[key])
    for event in rank.events:
        for key in ("t", "last_seen"):
            value = num(event.get(key))
            if value is not None:
                event[key] = value + clock.offset_at(value)


@dataclass
class Run:
    """A run directory read back: its ranks, ordered by rank, and the folders named like a rank that
    were left out (see :class:`~trainperf.ranks._report._folders.RankFolders`)."""

    ranks: list[Rank]
    ignored: list[tuple[str, str]]
    ignored_total: int


def load_run(run_dir: str | os.PathLike[str], folders: RankFolders | None = None) -> Run:
    """Every ``rank-<r>`` folder of ``run_dir``, ordered by rank, with times aligned to rank 0.

    Args:
        run_dir: the run directory.
        folders: its rank folders, when already listed.

    Raises:
        FileNotFoundError: ``run_dir`` does not exist or is not a folder.
        ValueError: it holds no rank folder.
    """
    found = (folders if folders is not None else rank_folders(run_dir))
    ranks = []
    # the run's budget, shared by its ranks: bounded memory for any number of ranks and any file sizes
    max_windows = max(MIN_WINDOWS_PER_RANK, RUN_WINDOWS // len(found.found))
    max_spans = max(MIN_SPANS_PER_RANK, RUN_SPANS // len(found.found))
    # the report lists the first captures by rank: the later ranks' are counted; silent ranks likewise
    captures_left, silent_left = MAX_CAPTURES, MAX_SILENT
    for r, paths in sorted(found.found.items()):
        # ``rank-1`` and ``rank-01`` name one rank: the one trainperf writes is read, the others named
        paths.sort(key=lambda p: (p.name != f"rank-{r}", p.name))
        rank = read_rank(paths[0], r, max_windows=max_windows, max_spans=max_spans, max_captures=captures_left,
                         max_silent=silent_left)
        captures_left -= len(rank.captures)
        silent_left -= len(rank.events) - len(rank.captures)
        rank.duplicates = [p.name for p in paths[1:]]
        ranks.append(rank)
    for rank in ranks:
        _align(rank)
    return Run(ranks, list(found.ignored), found.ignored_total)
