"""Read a run directory back: every rank's meta, windows, timeline, clock estimates and events.

Readers never raise on what the files hold: a cut last line, a line that is not a JSON object,
or a field of the wrong type is skipped (and counted), so a crashed or hostile run still reports.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._layout import CLOCK, EVENTS, META, SPAN_PHASES, SPANS, WINDOWS

__all__: list[str] = []

_RANK_DIR = re.compile(r"rank-(\d{1,7})")
#: Window fields the report reads, kept as columns (one float array each; NaN for missing).
WINDOW_FIELDS = ("iteration", "window_iterations", "window_s", "timestamp", "etl_ms", "etl_max_ms", "compute_ms",
                 "other_ms", "iteration_ms", "iteration_p50_ms", "iteration_p95_ms", "iteration_max_ms",
                 "samples_per_sec", "forward_ms", "backward_ms", "step_ms", "comm_ms", "wait_ms", "wait_p50_ms",
                 "gc_total_ms", "tokens_per_sec", "tflops_per_sec", "mfu",
                 "gap", "warmup")
#: Window fields an adapter keeps in ``extra`` (the timed parts of a distributed run's step).
EXTRA_FIELDS = frozenset({"forward_ms", "backward_ms", "step_ms", "comm_ms", "wait_ms", "wait_p50_ms"})
_NAN = float("nan")
#: Figures at or beyond this size are not a run's (a millisecond figure of 30,000 years): read as
#: missing, so that no sum, mean or product of the report can overflow.
MAX_FIGURE = 1e15
#: Wall times are seconds since 1970 below this (the year 5138): anything later is not a real time.
MAX_WALL_S = 1e11
#: A clock offset between two ranks larger than this (317 years) is not an estimate.
MAX_OFFSET_S = 1e10
#: A span longer than this (116 days) is not an iteration's phase.
MAX_SPAN_S = 1e7


def num(value: Any) -> float | None:
    """``value`` as a finite float below :data:`MAX_FIGURE` in size, else ``None`` (bools, strings,
    NaN, infinities and integers too large for a float included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return f if -MAX_FIGURE < f < MAX_FIGURE else None


def rounded(value: float | None, digits: int = 3) -> float | None:
    """A figure for the report: rounded to ``digits``, ``None`` when missing or not finite (never -0.0)."""
    return None if value is None or not math.isfinite(value) else round(value, digits) + 0.0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def wall(value: Any) -> float | None:
    """``value`` as a wall time (seconds since 1970, not negative, before :data:`MAX_WALL_S`), else ``None``."""
    f = num(value)
    return f if f is not None and 0.0 <= f < MAX_WALL_S else None


def _json(line: bytes | str) -> Any:
    """The JSON value of ``line``; ``ValueError`` for what is not JSON or is nested deeper than the
    interpreter can read (a hostile line)."""
    try:
        return json.loads(line)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _text(value: Any, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) else None


#: Lines longer than this are not a run's (a window's line is about a kilobyte): skipped, and never
#: read whole into memory.
MAX_LINE_BYTES = 1 << 20
#: Events and clock estimates kept per rank; the rest are counted as skipped (a run writes a few
#: hundred).
MAX_OBJECTS = 100_000
#: Windows and spans the report holds for a whole run (about 170 MB and 100 MB of columns), shared
#: by its ranks, each rank getting at least the minimum: past its share a rank's windows are sampled
#: (every other one dropped, again as needed) and its later spans are left out, both said.
RUN_WINDOWS = 1_000_000
RUN_SPANS = 4_000_000
MIN_WINDOWS_PER_RANK = 10_000
MIN_SPANS_PER_RANK = 50_000
MAX_WINDOWS = RUN_WINDOWS
MAX_SPANS = RUN_SPANS


class Unreadable:
    """The files of one rank's folder that could not be read, with the reason (said in the report)."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}


def readable(path: Path, unreadable: Unreadable) -> bool:
    """Whether ``path`` is a regular file to read; a FIFO or a device file named like a run file (which
    would block the report or never end) and a file that cannot be opened are noted, not read."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        unreadable.files[path.name] = exc.strerror or type(exc).__name__
        return False
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        unreadable.files[path.name] = f"{kind}, not read"
        return False
    return True


def read_objects(path: Path, unreadable: Unreadable | None = None,
                 limit: int = MAX_OBJECTS) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file (at most ``limit``), and how many lines were skipped
    (cut, invalid, not objects, beyond the limit)."""
    objects: list[dict[str, Any]] = []
    skipped = 0
    for line in _lines(path, unreadable):
        if line is None:
            skipped += 1
            continue
        try:
            obj = _json(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(obj, dict) and len(objects) < limit:
            objects.append(obj)
        else:
            skipped += 1
    return objects, skipped


def _lines(path: Path, unreadable: Unreadable | None = None) -> Iterator[bytes | None]:
    """The non-empty lines of ``path``, one at a time (``None`` for a line too long to be a run's)."""
    if not readable(path, unreadable if unreadable is not None else Unreadable()):
        return
    try:
        with open(path, "rb") as f:
            while True:
                line = f.readline(MAX_LINE_BYTES)
                if not line:
                    return
                if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # the rest of it, never held whole
                        line = f.readline(MAX_LINE_BYTES)
                    yield None
                    continue
                line = line.strip()
                if line:
                    yield line
    except OSError as exc:
        if unreadable is not None:
            unreadable.files[path.name] = exc.strerror or type(exc).__name__


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
        events: rank 0's cluster events (a rank gone silent, a gather's stragglers) and every rank's
            profiler captures (kind ``capture``, fields checked by :func:`capture_event`).
        skipped: lines skipped per file.
        unreadable: files of the folder that could not be read, and why.
        attempts: ``(first iteration, last iteration, windows)`` of each run that wrote windows into
            this folder, oldest first (more than one when a rank was restarted into it); the windows
            read are the last attempt's.
        folder: the folder's name; ``duplicates``: other folders that name the same rank (not read).
        window_stride: 1, or every how many windows one was kept (a run longer than the report holds).
        spans_not_read: spans beyond the report's limit, left out.
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
        raw = _json(path.read_bytes())
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
        meta[key] = _text(raw.get(key))
    for key in ("pid", "local_rank", "world_size", "timeline_windows"):
        value = raw.get(key)
        meta[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
    for key in ("started", "ended"):
        meta[key] = wall(raw.get(key))
    meta["timeline_capped"] = raw.get("timeline_capped") is True
    untimed = _text(raw.get("collectives_untimed"))
    if untimed:  # written only by a rank whose collectives are not timed (FSDP)
        meta["collectives_untimed"] = untimed
    return meta


def _read_windows(
    path: Path, unreadable: Unreadable, limit: int = MAX_WINDOWS,
) -> tuple[dict[str, array[float]], int, list[tuple[int, int, int]], int]:
    """The windows of the last run that wrote into the file, the lines skipped, every run's ``(first,
    last, windows)`` (a rank restarted into its folder starts again at a lower iteration), and the
    stride the windows were kept at: past ``limit`` windows, every other one is dropped and the
    stride doubles, so memory stays bounded and the whole run is still covered."""
    columns = {name: array("d") for name in WINDOW_FIELDS}
    skipped = 0
    attempts: list[tuple[int, int, int]] = []
    last = -math.inf
    first = count = 0
    stride = 1
    for line in _lines(path, unreadable):
        try:
            obj = _json(line) if line is not None else None
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
        restarted = iteration < last and iteration - n + 1 == 1  # a new process counts from 1 again
        if iteration <= last and not restarted:  # a line out of order: not a run's
            skipped += 1
            continue
        if restarted:  # a new run in the same folder: the windows read are the newest run's
            attempts.append((first, int(last), count))
            columns = {name: array("d") for name in WINDOW_FIELDS}
            count, stride = 0, 1
        if not count:
            first = iteration
        last = iteration
        count += 1
        if (count - 1) % stride:
            continue
        extra = obj.get("extra")
        for name in WINDOW_FIELDS:
            if name in EXTRA_FIELDS:
                value = num(extra.get(name)) if isinstance(extra, dict) else None
            elif name == "warmup":
                value = 1.0 if obj.get("warmup") is True else 0.0
            elif name == "gap":
                value = 1.0 if obj.get("etl_source") == "gap" else 0.0
            elif name == "timestamp":
                value = wall(obj.get(name))
            elif name in ("iteration", "window_iterations"):
                value = float(obj[name])  # whole numbers, checked above
            else:
                value = num(obj.get(name))
            columns[name].append(_NAN if value is None else value)
        if len(columns["iteration"]) >= limit:
            columns = {name: values[::2] for name, values in columns.items()}
            stride *= 2
    if count:
        attempts.append((first, int(last), count))
    return columns, skipped, attempts, stride


def _read_spans(
    path: Path, unreadable: Unreadable, limit: int = MAX_SPANS,
) -> tuple[array[int], array[int], array[float], array[float], int, int]:
    """The spans of the last run that wrote into the file (see :func:`_read_windows`), at most ``limit``
    of them (the first), the lines skipped, and how many spans beyond the limit were not read."""
    phases = {name: k for k, name in enumerate(SPAN_PHASES)}
    iters, kinds, ts, ds = array("q"), array("b"), array("d"), array("d")
    skipped = not_read = 0
    last = -1
    for line in _lines(path, unreadable):
        if len(iters) >= limit:
            not_read += 1
            continue
        try:
            if line is None:
                raise ValueError("too long")
            obj = _json(line)
            i, ph, t, d = obj["i"], phases[obj["ph"]], obj["t"], obj["d"]
        except (ValueError, KeyError, TypeError):
            skipped += 1
            continue
        duration = num(d)
        if (isinstance(i, bool) or not isinstance(i, int) or i < 0 or wall(t) is None or duration is None
                or not 0.0 <= duration < MAX_SPAN_S or i > 2**62 or (i < last and i != 1)):
            skipped += 1
            continue
        if i < last:  # back to iteration 1: a new run in the same folder (a new process counts from 1)
            iters, kinds, ts, ds = array("q"), array("b"), array("d"), array("d")
            not_read = 0
        last = i
        iters.append(i)
        kinds.append(ph)
        ts.append(float(t))
        ds.append(float(d))
    return iters, kinds, ts, ds, skipped, not_read


def _read_clock(path: Path, unreadable: Unreadable) -> tuple[Clock, int]:
    objects, skipped = read_objects(path, unreadable)
    points: list[tuple[float, float, float]] = []
    reference = False
    for obj in objects:
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


#: A capture event's reason is cut at this length; a path longer than this is no run's (the event is skipped).
MAX_REASON = 500
MAX_PATH = 4096
#: A capture event's fields (see ``RunDirSink.event`` and ``trainperf.profile``): iterations (required),
#: counts and milliseconds (each ``null`` or absent when unknown).
CAPTURE_ITERATIONS = ("trigger_first_iteration", "trigger_last_iteration", "first_iteration", "last_iteration")
CAPTURE_COUNTS = ("iterations", "bytes", "trimmed_events")
CAPTURE_MS = ("traced_iteration_ms", "trigger_median_ms", "cost_ms", "export_ms")


def _whole(value: Any) -> int | None:
    """``value`` as a whole number from 0 to 2**62, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**62:
        return None
    return value


def _writable(text: str) -> str:
    """``text`` without lone surrogates (JSON holds them, UTF-8 cannot write them): each becomes ``?``."""
    return text.encode("utf-8", "replace").decode("utf-8")


def capture_event(event: dict[str, Any]) -> dict[str, Any] | None:
    """A ``capture`` event of ``events.jsonl`` (a profiler trace a listener with ``profile_dir=`` wrote),
    its fields checked: the path (text), the reason (text, cut at :data:`MAX_REASON`), the triggering
    window's and the traced iterations (whole numbers, first <= last); ``t``, ``rank``, the counts and
    the milliseconds may be ``null`` or absent, anything else of theirs must be of their type.
    ``None`` when a field is missing or of the wrong type (the line is skipped and counted).

    Example:
        >>> capture_event({"kind": "capture", "path": "/t/rank1-iter92-94.pt.trace.json.gz", "reason": "slow",
        ...                "trigger_first_iteration": 81, "trigger_last_iteration": 90, "first_iteration": 92,
        ...                "last_iteration": 94, "bytes": 12345})["bytes"]
        12345
        >>> capture_event({"kind": "capture", "path": 3, "reason": "slow"}) is None
        True
    """
    path, reason = event.get("path"), event.get("reason")
    if not isinstance(path, str) or not path or len(path) > MAX_PATH or not isinstance(reason, str):
        return None
    out: dict[str, Any] = {"kind": "capture", "path": _writable(path), "reason": _writable(reason[:MAX_REASON])}
    t, rank = event.get("t"), event.get("rank")
    out["t"] = None if t is None else wall(t)
    out["rank"] = None if rank is None else _whole(rank)
    if (t is not None and out["t"] is None) or (rank is not None and out["rank"] is None):
        return None
    for key in CAPTURE_ITERATIONS:
        out[key] = _whole(event.get(key))
        if out[key] is None:
            return None
    if out["trigger_first_iteration"] > out["trigger_last_iteration"] or out["first_iteration"] > out["last_iteration"]:
        return None
    for key in CAPTURE_COUNTS + CAPTURE_MS:
        value = event.get(key)
        if value is None:
            out[key] = None
            continue
        checked = _whole(value) if key in CAPTURE_COUNTS else num(value)
        if checked is None or checked < 0:
            return None
        out[key] = checked if key in CAPTURE_COUNTS else float(checked)
    return out


def _read_events(path: Path, unreadable: Unreadable) -> tuple[list[dict[str, Any]], int]:
    """The events of a rank's ``events.jsonl`` and the lines skipped: a capture event with a field
    missing or of the wrong type (see :func:`capture_event`), and any event whose time is none."""
    events, skipped = read_objects(path, unreadable)
    kept: list[dict[str, Any]] = []
    for event in events:
        if event.get("kind") == "capture":
            checked = capture_event(event)
            if checked is not None:
                kept.append(checked)
        elif all(wall(event[k]) is not None for k in ("t", "last_seen") if _is_number(event.get(k))):
            kept.append(event)
    return kept, skipped + len(events) - len(kept)


def read_rank(path: Path, rank: int, *, max_windows: int = MAX_WINDOWS, max_spans: int = MAX_SPANS) -> Rank:
    """One rank's folder, with at most ``max_windows`` windows (a sample of a longer run, see
    :func:`_read_windows`) and ``max_spans`` spans."""
    unreadable = Unreadable()
    windows, skipped_windows, attempts, stride = _read_windows(path / WINDOWS, unreadable, max_windows)
    iters, kinds, ts, ds, skipped_timeline, spans_not_read = _read_spans(path / SPANS, unreadable, max_spans)
    clock, skipped_clock = _read_clock(path / CLOCK, unreadable)
    events, skipped_events = _read_events(path / EVENTS, unreadable)
    skipped = {"windows": skipped_windows, "timeline": skipped_timeline, "clock": skipped_clock,
               "events": skipped_events}
    return Rank(rank, _read_meta(path / META, unreadable), windows, iters, kinds, ts, ds, clock, events, skipped,
                unreadable.files, attempts, path.name, window_stride=stride, spans_not_read=spans_not_read)


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


def load_run(run_dir: str | os.PathLike[str]) -> list[Rank]:
    """Every ``rank-<r>`` folder of ``run_dir``, ordered by rank, with times aligned to rank 0.

    Raises:
        FileNotFoundError: ``run_dir`` does not exist or is not a folder.
        ValueError: it holds no rank folder.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"run_dir {str(run_dir)!r} does not exist or is not a folder")
    found: dict[int, list[Path]] = {}
    for entry in root.iterdir():
        match = _RANK_DIR.fullmatch(entry.name)
        if match and entry.is_dir():
            found.setdefault(int(match.group(1)), []).append(entry)
    if not found:
        raise ValueError(f"run_dir {str(run_dir)!r} holds no rank-<r> folder: not a trainperf run directory")
    ranks = []
    # the run's budget, shared by its ranks: bounded memory for any number of ranks and any file sizes
    max_windows = max(MIN_WINDOWS_PER_RANK, RUN_WINDOWS // len(found))
    max_spans = max(MIN_SPANS_PER_RANK, RUN_SPANS // len(found))
    for r, paths in sorted(found.items()):
        # ``rank-1`` and ``rank-01`` name one rank: the one trainperf writes is read, the others named
        paths.sort(key=lambda p: (p.name != f"rank-{r}", p.name))
        rank = read_rank(paths[0], r, max_windows=max_windows, max_spans=max_spans)
        rank.duplicates = [p.name for p in paths[1:]]
        ranks.append(rank)
    for rank in ranks:
        _align(rank)
    return ranks
