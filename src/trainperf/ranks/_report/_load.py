"""Read a run directory back: every rank's meta, windows, timeline, clock estimates and events.

Readers never raise on what the files hold: a cut last line, a line that is not a JSON object,
or a field of the wrong type is skipped (and counted), so a crashed or hostile run still reports.
"""

from __future__ import annotations

import json
import math
import os
import re
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
                 "gc_total_ms",
                 "gap", "warmup")
#: Window fields an adapter keeps in ``extra`` (the timed parts of a distributed run's step).
EXTRA_FIELDS = frozenset({"forward_ms", "backward_ms", "step_ms", "comm_ms", "wait_ms", "wait_p50_ms"})
_NAN = float("nan")


def num(value: Any) -> float | None:
    """``value`` as a finite float, else ``None`` (bools, strings, NaN and infinities included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _text(value: Any, limit: int = 200) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def read_objects(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file, and how many lines were skipped (cut, invalid, not objects)."""
    objects: list[dict[str, Any]] = []
    skipped = 0
    for line in _lines(path):
        try:
            obj = json.loads(line)
        except ValueError:
            skipped += 1
            continue
        if isinstance(obj, dict):
            objects.append(obj)
        else:
            skipped += 1
    return objects, skipped


def _lines(path: Path) -> Iterator[bytes]:
    try:
        with open(path, "rb") as f:
            for line in f:
                line = line.strip()
                if line:
                    yield line
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return


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
        events: rank 0's cluster events.
        skipped: lines skipped per file.
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

    @property
    def host(self) -> str:
        return str(self.meta.get("host") or "")

    @property
    def n_windows(self) -> int:
        return len(self.windows["iteration"])

    def spans_between(self, first: int, last: int) -> range:
        """Indices of the spans of iterations ``first`` to ``last`` (the timeline is written in order)."""
        return range(bisect_left(self.span_iter, first), bisect_right(self.span_iter, last))


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError):
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
        meta[key] = num(raw.get(key))
    meta["timeline_capped"] = raw.get("timeline_capped") is True
    return meta


def _read_windows(path: Path) -> tuple[dict[str, array[float]], int]:
    columns = {name: array("d") for name in WINDOW_FIELDS}
    objects, skipped = read_objects(path)
    last = -math.inf
    for obj in objects:
        iteration, n = obj.get("iteration"), obj.get("window_iterations")
        if (isinstance(iteration, bool) or not isinstance(iteration, int) or isinstance(n, bool)
                or not isinstance(n, int) or n < 1 or iteration <= last):
            skipped += 1
            continue
        last = iteration
        extra = obj.get("extra")
        for name in WINDOW_FIELDS:
            if name in EXTRA_FIELDS:
                value = num(extra.get(name)) if isinstance(extra, dict) else None
            elif name == "warmup":
                value = 1.0 if obj.get("warmup") is True else 0.0
            elif name == "gap":
                value = 1.0 if obj.get("etl_source") == "gap" else 0.0
            else:
                value = num(obj.get(name))
            columns[name].append(_NAN if value is None else value)
    return columns, skipped


def _read_spans(path: Path) -> tuple[array[int], array[int], array[float], array[float], int]:
    phases = {name: k for k, name in enumerate(SPAN_PHASES)}
    iters, kinds, ts, ds = array("q"), array("b"), array("d"), array("d")
    skipped = 0
    last = -1
    for line in _lines(path):
        try:
            obj = json.loads(line)
            i, ph, t, d = obj["i"], phases[obj["ph"]], obj["t"], obj["d"]
        except (ValueError, KeyError, TypeError):
            skipped += 1
            continue
        if (isinstance(i, bool) or not isinstance(i, int) or i < last or num(t) is None or num(d) is None
                or d < 0 or i > 2**62):
            skipped += 1
            continue
        last = i
        iters.append(i)
        kinds.append(ph)
        ts.append(float(t))
        ds.append(float(d))
    return iters, kinds, ts, ds, skipped


def _read_clock(path: Path) -> tuple[Clock, int]:
    objects, skipped = read_objects(path)
    points: list[tuple[float, float, float]] = []
    reference = False
    for obj in objects:
        t, offset, status = num(obj.get("t")), num(obj.get("offset_s")), obj.get("status")
        if t is None or status not in ("reference", "aligned", "unknown"):
            skipped += 1
            continue
        if status == "reference":
            reference = True
            points.append((t, 0.0 if offset is None else offset, num(obj.get("uncertainty_s")) or 0.0))
        elif status == "aligned" and offset is not None:
            u = num(obj.get("uncertainty_s"))
            points.append((t, offset, _NAN if u is None else u))
    points.sort()
    clock = Clock([p[0] for p in points], [p[1] for p in points], [p[2] for p in points])
    clock.status = "reference" if reference else "aligned" if points else "unknown"
    return clock, skipped


def read_rank(path: Path, rank: int) -> Rank:
    """One rank's folder."""
    windows, skipped_windows = _read_windows(path / WINDOWS)
    iters, kinds, ts, ds, skipped_timeline = _read_spans(path / SPANS)
    clock, skipped_clock = _read_clock(path / CLOCK)
    events, skipped_events = read_objects(path / EVENTS)
    skipped = {"windows": skipped_windows, "timeline": skipped_timeline, "clock": skipped_clock,
               "events": skipped_events}
    return Rank(rank, _read_meta(path / META), windows, iters, kinds, ts, ds, clock, events, skipped)


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
    found: list[tuple[int, Path]] = []
    for entry in root.iterdir():
        match = _RANK_DIR.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    if not found:
        raise ValueError(f"run_dir {str(run_dir)!r} holds no rank-<r> folder: not a trainperf run directory")
    ranks = [read_rank(path, r) for r, path in sorted(found)]
    for rank in ranks:
        _align(rank)
    return ranks
