"""The report's analysis: per-rank figures, stragglers, clocks, throughput over time, the slowest
windows with their spans and the profiler captures beside their triggering windows, as plain
JSON-ready values."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ...records import percentile
from .._layout import SPAN_PHASES
from .._stragglers import RankFigures, Straggler, cluster_line
from ._captures import captures_beside_windows
from ._folders import MAX_RANK, rank_folders
from ._goodput import report_goodput
from ._load import Rank, Run, load_run
from ._named import named_stragglers
from ._named import steady as _steady
from ._notes import read_notes
from ._over_time import over_time
from ._read import rounded as _r
from ._read import significant

__all__ = ["build_report", "analyse"]

#: Report schema version (``report["schema"]``): 2 gives missing ranks as ranges, and ``notes``. Keys
#: added since (``goodput``, ``goodput_missing``) keep it: a reader of 2 finds every key it knew.
REPORT_SCHEMA = 2
#: Slowest windows shown with their spans, and the most spans they may carry together.
SLOWEST_WINDOWS = 5
MAX_SLOWEST_SPANS = 80_000
#: A rank is silent when it stopped this many report windows (and at least a second) before the others.
SILENT_WINDOWS = 3.0


def build_report(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The analysis of a run directory as JSON-ready values (what ``trainperf report --format json`` writes).

    Keys: ``ranks`` (per-rank figures, ``silent_since``), ``stragglers`` (rank, cause, excess, evidence,
    windows), ``clocks`` (offset and uncertainty per rank, ``unknown`` flagged), ``windows`` (the
    cluster's throughput and iteration time over time, at most a few hundred points), ``rank_windows``
    (each rank's figures over time at the same resolution), ``slowest`` (the slowest windows with
    every rank's spans), ``captures`` (each profiler capture beside the window that triggered it, by
    rank and iteration, with ``captures_total``), ``cluster`` (the one-line summary), ``phases``,
    ``start`` and ``run_name``; ``goodput``, the job's time account
    (:meth:`~trainperf.records.GoodputAccount.to_dict`: rows with seconds and shares, per-rank
    goodput, attempts), ``None`` when it could not be read, and ``goodput_missing`` saying why.

    Args:
        run_dir: a folder of ``rank-<r>`` folders (see ``docs/distributed.md``).

    Raises:
        FileNotFoundError: ``run_dir`` is missing.
        ValueError: it holds no rank folder.

    Example:
        >>> report = build_report("runs/today")  # doctest: +SKIP
        >>> [(s["rank"], s["cause"]) for s in report["stragglers"]]  # doctest: +SKIP
        [(3, 'data')]
    """
    if not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run_dir must be the path of a run directory (str or os.PathLike), got {run_dir!r}")
    folders = rank_folders(run_dir)
    return analyse(load_run(run_dir, folders), report_goodput(run_dir, folders))



def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float | None:
    total = weight = 0.0
    for v, w in zip(values, weights, strict=True):
        if math.isfinite(v) and math.isfinite(w):
            total += v * w
            weight += w
    return total / weight if weight > 0 else None


def _stats(rank: Rank, steady: list[int], mean_key: str, p50_key: str, p95_key: str, max_key: str
           ) -> dict[str, float | None]:
    w = rank.windows

    def pick(key: str) -> list[float]:
        return _finite([w[key][k] for k in steady])

    p50s, p95s, maxes = sorted(pick(p50_key)), sorted(pick(p95_key)), pick(max_key)
    return {
        "p50": _r(percentile(p50s, 50)) if p50s else None,
        "p95": _r(percentile(p95s, 95)) if p95s else None,
        "max": _r(max(maxes)) if maxes else None,
        "mean": _r(_weighted_mean([w[mean_key][k] for k in steady], [w["window_iterations"][k] for k in steady])),
    }


def _last_seen(rank: Rank) -> float | None:
    seen = _finite(rank.windows["timestamp"])
    last = max(seen) if seen else None
    if len(rank.span_t):
        end = rank.span_t[-1] + rank.span_d[-1]
        last = end if last is None else max(last, end)
    return last


def _start(rank: Rank) -> float | None:
    w = rank.windows
    candidates = [t - s for t, s in zip(w["timestamp"], w["window_s"], strict=True) if math.isfinite(t - s)][:1]
    if len(rank.span_t):
        candidates.append(rank.span_t[0])
    return min(candidates) if candidates else rank.meta.get("started")


def _silent(ranks: Sequence[Rank]) -> dict[int, float]:
    """Ranks that stopped reporting before the others without closing, with their last sign of life."""
    seen = {r.rank: _last_seen(r) for r in ranks}
    ends = [t for t in seen.values() if t is not None]
    window_s = [s for r in ranks for s in _finite(r.windows["window_s"])]
    silent: dict[int, float] = {}
    if ends:
        gap = max(SILENT_WINDOWS * (statistics.median(window_s) if window_s else 0.0), 1.0)
        end = max(ends)
        for r in ranks:
            last = seen[r.rank]
            if r.meta.get("ended") is None and (last is None or last < end - gap):
                silent[r.rank] = last if last is not None else (r.meta.get("started") or end)
    for r in ranks:
        for event in r.events:  # checked when read: a whole rank, wall times or None
            if event["kind"] == "silent":
                when = event["last_seen"] if event["last_seen"] is not None else event["t"]
                if when is not None:
                    silent.setdefault(event["rank"], float(when))
    return silent


def _rank_entry(rank: Rank, silent_since: float | None) -> dict[str, Any]:
    w = rank.windows
    steady = _steady(rank)
    n = [w["window_iterations"][k] for k in steady]

    def mean(key: str) -> float | None:
        return _r(_weighted_mean([w[key][k] for k in steady], n))

    gc_total = sum(v for v in (w["gc_total_ms"][k] for k in steady) if math.isfinite(v))

    iterations = _finite(w["iteration"])
    return {
        "rank": rank.rank,
        "host": rank.host,
        "pid": rank.meta.get("pid"),
        "local_rank": rank.meta.get("local_rank"),
        "iterations": int(max(iterations)) if iterations else 0,
        "windows": rank.n_windows,
        "iteration_ms": _stats(rank, steady, "iteration_ms", "iteration_p50_ms", "iteration_p95_ms",
                               "iteration_max_ms"),
        "etl_ms": _stats(rank, steady, "etl_ms", "etl_ms", "etl_ms", "etl_max_ms"),
        "compute_ms": mean("compute_ms"),
        "forward_ms": mean("forward_ms"),
        "backward_ms": mean("backward_ms"),
        "step_ms": mean("step_ms"),
        "comm_ms": mean("comm_ms"),
        "wait_ms": mean("wait_ms"),
        "other_ms": mean("other_ms"),
        "gc_ms": _r(gc_total / sum(n)) if sum(n) > 0 else None,
        "etl_source": "gap" if steady and all(w["gap"][k] for k in steady) else "loader",
        "samples_per_sec": mean("samples_per_sec"),
        "tokens_per_sec": mean("tokens_per_sec"),
        "tflops_per_sec": significant(_weighted_mean([w["tflops_per_sec"][k] for k in steady], n)),
        "mfu": significant(_weighted_mean([w["mfu"][k] for k in steady], n)),
        "silent_since": silent_since,
        "started": rank.meta.get("started"),
        "ended": rank.meta.get("ended"),
        "timeline_windows": rank.meta.get("timeline_windows"),
        "timeline_capped": rank.meta.get("timeline_capped", False),
        "collectives_untimed": rank.meta.get("collectives_untimed"),
        "skipped_lines": sum(rank.skipped.values()),
        "skipped": dict(rank.skipped),
        "unreadable": dict(rank.unreadable),
        "attempts": [{"first": a, "last": b, "windows": n} for a, b, n in rank.attempts[-MAX_ATTEMPTS:]],
        "attempts_total": len(rank.attempts),
        "folder": rank.folder,
        "duplicates": list(rank.duplicates),
        "window_stride": rank.window_stride,
        "spans_not_read": rank.spans_not_read,
    }


#: Runs per rank folder listed in the report (a hostile file can hold any number).
MAX_ATTEMPTS = 20
#: Ranges of missing ranks listed in the report; the rest are counted.
MAX_RANGES = 20


def missing_ranks(ranks: Sequence[Rank]) -> tuple[list[list[int]], int]:
    """The ranks below the run's world size (the largest a rank's meta data gives, up to the most ranks
    ``torch.distributed`` numbers, else the highest rank plus one) that have no folder, as
    :func:`absent_ranges` gives them."""
    present = sorted({r.rank for r in ranks})
    sizes = [r.meta["world_size"] for r in ranks if isinstance(r.meta.get("world_size"), int)]
    return absent_ranges(present, max([present[-1] + 1, *(s for s in sizes if 0 < s <= MAX_RANK + 1)]))


def absent_ranges(present: Sequence[int], world: int) -> tuple[list[list[int]], int]:
    """The ranks below ``world`` not in ``present`` (ascending, distinct): the first :data:`MAX_RANGES`
    ranges ``[first, last]`` and how many ranks in all, computed from the ranks there are, so that a
    far rank (``rank-9999999``) costs nothing per absent one.

    Example:
        >>> absent_ranges([0, 1, 5, 9], 12)
        ([[2, 4], [6, 8], [10, 11]], 8)
    """
    ranges: list[list[int]] = []
    total = 0
    for before, after in zip([-1, *present], [*present, world], strict=True):
        if after - before > 1:
            total += after - before - 1
            if len(ranges) < MAX_RANGES:
                ranges.append([before + 1, after - 1])
    return ranges, total


def _untimed(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks whose collectives were not timed, grouped by why (how FSDP shards the model)."""
    by_why: dict[str, list[int]] = {}
    for e in entries:
        if e["collectives_untimed"] is not None:
            by_why.setdefault(e["collectives_untimed"], []).append(e["rank"])
    return [{"why": why, "ranks": ranks} for why, ranks in sorted(by_why.items(), key=lambda kv: kv[1])]


def _clocks(ranks: Sequence[Rank]) -> list[dict[str, Any]]:
    out = []
    for rank in ranks:
        c = rank.clock
        unc = _finite(c.uncertainties)
        out.append({
            "rank": rank.rank,
            "status": c.status,
            "offset_ms": _r(1000.0 * statistics.median(c.offsets)) if c.offsets else 0.0,
            "uncertainty_ms": _r(1000.0 * max(unc)) if unc else None,
            "drift_ms": _r(1000.0 * (c.offsets[-1] - c.offsets[0])) if c.offsets else None,
            "estimates": len(c.times),
        })
    return out


def _world(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The whole run's throughput: every rank's rates added up (each over its windows past warm-up),
    and the world's MFU: the FLOP/s of every rank that has a peak over the sum of their peaks."""

    def total(key: str) -> float | None:
        values = [e[key] for e in entries if e.get(key) is not None]
        return _r(sum(values), 1) if values else None

    tflops = [e["tflops_per_sec"] for e in entries if e["tflops_per_sec"] is not None]
    rated = [(e["tflops_per_sec"], e["tflops_per_sec"] / e["mfu"]) for e in entries
             if e.get("tflops_per_sec") is not None and e.get("mfu")]
    peak = sum(p for _, p in rated)
    return {
        "samples_per_sec": total("samples_per_sec"),
        "tokens_per_sec": total("tokens_per_sec"),
        "tflops_per_sec": significant(sum(tflops)) if tflops else None,
        "mfu": significant(sum(t for t, _ in rated) / peak) if rated and peak > 0 else None,
        "mfu_ranks": len(rated),
    }


def _slowest(ranks: Sequence[Rank], start: float) -> list[dict[str, Any]]:
    """The slowest windows (longest mean iteration on any rank) that have spans, with every rank's spans.
    A warm-up window (a run's first, which the listener marks: its start-up costs, such as compiling,
    are no slowdown of the run) comes after all the others, marked ``warmup``."""
    windows: dict[int, tuple[float, int, int]] = {}  # last iteration -> (slowest mean ms, its rank, iterations)
    warm: set[int] = set()  # the last iterations of windows that some rank marks as its warm-up
    for rank in ranks:
        if not len(rank.span_iter):
            continue
        w = rank.windows
        for k in range(rank.n_windows):
            ms, last, m = w["iteration_ms"][k], int(w["iteration"][k]), int(w["window_iterations"][k])
            if not math.isfinite(ms) or not len(rank.spans_between(last - m + 1, last)):
                continue
            if w["warmup"][k]:
                warm.add(last)
            if last not in windows or ms > windows[last][0]:
                windows[last] = (ms, rank.rank, m)
    out: list[dict[str, Any]] = []
    budget = MAX_SLOWEST_SPANS
    for last, (ms, slow_rank, m) in sorted(windows.items(), key=lambda kv: (kv[0] in warm, -kv[1][0])):
        if len(out) >= SLOWEST_WINDOWS:
            break
        first = last - m + 1
        spans: list[list[Any]] = []
        for rank in ranks:
            for j in rank.spans_between(first, last):
                spans.append([rank.rank, int(rank.span_phase[j]), _r(rank.span_t[j] - start, 6),
                              _r(rank.span_d[j], 6), int(rank.span_iter[j])])
        if len(spans) > budget:
            continue
        budget -= len(spans)
        t0 = min((s[2] for s in spans), default=0.0)
        t1 = max((s[2] + s[3] for s in spans), default=0.0)
        out.append({"iteration_first": first, "iteration_last": last, "iteration_ms": _r(ms), "rank": slow_rank,
                    "warmup": last in warm, "t0": t0, "t1": _r(t1, 6), "spans": spans})
    return out


def _phases_seen(slowest: Sequence[dict[str, Any]], rank_windows: Sequence[dict[str, Any]]) -> list[str]:
    """The phases that occur on the page: in the slowest windows' spans, and the data wait, step and
    other shares of the cells over time; in the timeline's order."""
    seen = {SPAN_PHASES[s[1]] for w in slowest for s in w["spans"] if 0 <= s[1] < len(SPAN_PHASES)}
    for cells in rank_windows:
        for row in cells["rows"]:
            for name, value in zip(("data", "compute", "other"), row[3:6], strict=True):
                if value:
                    seen.add(name)
    return [p for p in SPAN_PHASES if p in seen]


def _in_words(straggler: dict[str, Any], analysed: int) -> str:
    """A listed straggler's evidence with how often it held the others back."""
    pattern = straggler.get("pattern")
    when = f"in {straggler['windows']} of {analysed} windows"
    if pattern:  # work every n-th iteration: the pattern says when; otherwise both
        when = pattern if pattern.startswith("every ") else f"{when}; {pattern}"
    return f"{straggler['evidence']} ({when})"


def analyse(run: Run, goodput: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report of a run directory read back (see :func:`build_report`).

    Args:
        run: what :func:`trainperf.ranks._report._load.load_run` returned.
        goodput: what :func:`~trainperf.ranks._report._goodput.report_goodput` returned for the same
            run directory; without it the report says the account was not read.
    """
    ranks = run.ranks
    starts = [s for s in (_start(r) for r in ranks) if s is not None]
    start = min(starts) if starts else 0.0
    silent = _silent(ranks)
    entries = [_rank_entry(r, silent.get(r.rank)) for r in ranks]
    stragglers, analysed = named_stragglers(ranks)
    windows, rank_windows = over_time(ranks, start)
    slowest = _slowest(ranks, start)
    whole = [RankFigures(e["rank"], e["iterations"], e["etl_ms"]["mean"], e["forward_ms"], e["compute_ms"],
                         e["other_ms"] or 0.0, e["iteration_ms"]["mean"])
             for e in entries if None not in (e["etl_ms"]["mean"], e["compute_ms"], e["iteration_ms"]["mean"])]
    # the headline names what the window-by-window analysis found, over the same windows
    named = [Straggler(s["rank"], s["cause"], s["excess_ms"] or 0.0,
                       _in_words(s, analysed)) for s in stragglers]
    names = sorted({str(r.meta["run_name"]) for r in ranks if r.meta.get("run_name") is not None})
    missing, missing_total = missing_ranks(ranks)
    captures, captures_total = captures_beside_windows(ranks, start)
    report = {
        "schema": REPORT_SCHEMA,
        "run_name": names[0] if names else None,
        "start": start,
        "world_size": len(ranks),
        "missing_ranks": missing,
        "missing_ranks_total": missing_total,
        "ignored_folders": [{"name": name, "why": why} for name, why in run.ignored],
        "ignored_folders_total": run.ignored_total,
        "phases": list(SPAN_PHASES),
        "phases_seen": _phases_seen(slowest, rank_windows),
        "cluster": cluster_line(whole, named) if whole else None,
        "analysed_windows": analysed,
        "world": _world(entries),
        "ranks": entries,
        "stragglers": stragglers,
        "collectives_untimed": _untimed(entries),
        "clocks": _clocks(ranks),
        "silent": [{"rank": r, "since": t} for r, t in sorted(silent.items())],
        "windows": windows,
        "rank_windows": rank_windows,
        "slowest": slowest,
        "captures": captures,
        "captures_total": captures_total,
        **(goodput if goodput is not None else {"goodput": None, "goodput_missing": "not read"}),
    }
    report["notes"] = read_notes(report)
    return report
