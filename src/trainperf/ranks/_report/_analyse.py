"""The report's analysis: per-rank figures, stragglers, clocks, throughput over time, the slowest
windows with their spans and the profiler captures beside their triggering windows, as plain
JSON-ready values."""

from __future__ import annotations

import math
import os
import statistics
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

from ...records import percentile
from .._layout import SPAN_PHASES
from .._stragglers import RankFigures, Straggler, cluster_line
from ._load import Rank, load_run
from ._load import rounded as _r
from ._named import named_stragglers
from ._named import steady as _steady

__all__ = ["build_report", "analyse"]

#: Report schema version (``report["schema"]``).
REPORT_SCHEMA = 1
#: Throughput-over-time points, and per-rank timeline cells, at most.
MAX_POINTS = 300
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
    ``start`` and ``run_name``.

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
    return analyse(load_run(run_dir))



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
        for event in r.events:
            if event.get("kind") == "silent" and isinstance(event.get("rank"), int):
                when = event.get("last_seen", event.get("t"))
                if isinstance(when, (int, float)) and not isinstance(when, bool) and math.isfinite(when):
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
        "tflops_per_sec": mean("tflops_per_sec"),
        "mfu": _r(_weighted_mean([w["mfu"][k] for k in steady], n), 4),
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
#: Missing ranks named in the report; the rest are counted.
MAX_NAMED = 50


def missing_ranks(ranks: Sequence[Rank]) -> list[int]:
    """The ranks below the run's world size (the largest a rank's meta data gives, else the highest rank
    plus one) that have no folder."""
    present = {r.rank for r in ranks}
    sizes = [r.meta["world_size"] for r in ranks if isinstance(r.meta.get("world_size"), int)]
    world = max([max(present) + 1, *(s for s in sizes if 0 < s <= 1 << 20)])
    return [r for r in range(world) if r not in present]


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


def _buckets(ranks: Sequence[Rank], start: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Throughput over time for the cluster and each rank's figures, at most :data:`MAX_POINTS` buckets."""
    top = max((max(_finite(r.windows["iteration"]), default=0.0) for r in ranks), default=0.0)
    distinct = max((r.n_windows for r in ranks), default=0)
    n = max(1, min(MAX_POINTS, distinct))
    width = top / n if top > 0 else 1.0
    per_rank: list[dict[str, Any]] = []
    cells: list[dict[int, list[float]]] = []
    for rank in ranks:
        w = rank.windows
        acc: dict[int, list[float]] = {}  # bucket -> [t0, t1, iters, it*n, etl*n, compute*n, other*n, sps*n, n_sps]
        for k in range(rank.n_windows):
            b = min(n - 1, max(0, int((w["iteration"][k] - 1) // width)))
            t1, ws, m = w["timestamp"][k], w["window_s"][k], w["window_iterations"][k]
            if not (math.isfinite(t1) and math.isfinite(ws)):
                continue
            cell = acc.get(b)
            if cell is None:
                cell = acc[b] = [t1 - ws, t1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
            cell[0], cell[1] = min(cell[0], t1 - ws), max(cell[1], t1)
            cell[2] += m
            for slot, key in ((3, "iteration_ms"), (4, "etl_ms"), (5, "compute_ms"), (6, "other_ms")):
                v = w[key][k]
                cell[slot] += (v if math.isfinite(v) else 0.0) * m
            sps = w["samples_per_sec"][k]
            if math.isfinite(sps):
                cell[7] += sps * ws
                cell[8] += ws
        cells.append(acc)
        rows = []
        for b in sorted(acc):
            c = acc[b]
            rows.append([_r(c[0] - start, 4), _r(c[1] - start, 4), _r(c[3] / c[2]), _r(c[4] / c[2]),
                         _r(c[5] / c[2]), _r(c[6] / c[2])])
        per_rank.append({"rank": rank.rank, "rows": rows})
    cluster: list[dict[str, Any]] = []
    for b in range(n):
        here = [acc[b] for acc in cells if b in acc]
        if not here:
            continue
        its = [c[3] / c[2] for c in here]
        etls = [c[4] / c[2] for c in here]
        rates = [c[7] / c[8] for c in here if c[8] > 0]
        cluster.append({
            "iteration": int(min(top, (b + 1) * width)),
            "t": _r(max(c[1] for c in here) - start, 4),
            "ranks": len(here),
            "samples_per_sec": _r(sum(rates), 1) if rates else None,
            "iteration_ms": {"median": _r(statistics.median(its)), "max": _r(max(its))},
            "etl_ms": {"median": _r(statistics.median(etls)), "max": _r(max(etls))},
        })
    return cluster, per_rank


def _world(entries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The whole run's throughput: every rank's rates added up (each over its windows past warm-up),
    and the world's MFU: the FLOP/s of every rank that has a peak over the sum of their peaks."""

    def total(key: str, digits: int = 1) -> float | None:
        values = [e[key] for e in entries if e.get(key) is not None]
        return _r(sum(values), digits) if values else None

    rated = [(e["tflops_per_sec"], e["tflops_per_sec"] / e["mfu"]) for e in entries
             if e.get("tflops_per_sec") is not None and e.get("mfu")]
    peak = sum(p for _, p in rated)
    return {
        "samples_per_sec": total("samples_per_sec"),
        "tokens_per_sec": total("tokens_per_sec"),
        "tflops_per_sec": total("tflops_per_sec", 3),
        "mfu": _r(sum(t for t, _ in rated) / peak, 4) if rated and peak > 0 else None,
        "mfu_ranks": len(rated),
    }


def _slowest(ranks: Sequence[Rank], start: float) -> list[dict[str, Any]]:
    """The slowest windows (longest mean iteration on any rank) that have spans, with every rank's spans."""
    windows: dict[int, tuple[float, int, int]] = {}  # last iteration -> (slowest mean ms, its rank, iterations)
    for rank in ranks:
        if not len(rank.span_iter):
            continue
        w = rank.windows
        for k in range(rank.n_windows):
            ms, last, m = w["iteration_ms"][k], int(w["iteration"][k]), int(w["window_iterations"][k])
            if not math.isfinite(ms) or not len(rank.spans_between(last - m + 1, last)):
                continue
            if last not in windows or ms > windows[last][0]:
                windows[last] = (ms, rank.rank, m)
    out: list[dict[str, Any]] = []
    budget = MAX_SLOWEST_SPANS
    for last, (ms, slow_rank, m) in sorted(windows.items(), key=lambda kv: -kv[1][0]):
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
                    "t0": t0, "t1": _r(t1, 6), "spans": spans})
    return out


#: Captures listed in the report, at most (a run takes a few; a hostile file can hold any number).
MAX_CAPTURES = 1000
#: The triggering window's figures a capture lists (``None`` where the window has none).
TRIGGER_FIGURES = ("iteration_ms", "iteration_p50_ms", "iteration_p95_ms", "iteration_max_ms", "etl_ms")


def _window_of(rank: Rank, first: int, last: int) -> int | None:
    """The index of the rank's window of iterations ``first`` to ``last``, when it was read."""
    w = rank.windows
    iterations = w["iteration"]
    k = bisect_left(iterations, float(last))  # ascending: the windows of the rank's last run
    if k < len(iterations) and iterations[k] == last and iterations[k] - w["window_iterations"][k] + 1 == first:
        return k
    return None


def _trigger_window(rank: Rank, k: int, start: float) -> dict[str, Any]:
    w = rank.windows
    t1, ws = w["timestamp"][k], w["window_s"][k]
    out: dict[str, Any] = {key: _r(w[key][k]) for key in TRIGGER_FIGURES}
    out["warmup"] = bool(w["warmup"][k])
    out["t0"] = _r(t1 - ws - start, 4)
    out["t1"] = _r(t1 - start, 4)
    return out


def _captures(ranks: Sequence[Rank], start: float) -> tuple[list[dict[str, Any]], int]:
    """Every rank's profiler captures beside the window that triggered each (its figures, when the
    rank's windows hold it), by rank and iteration; at most :data:`MAX_CAPTURES`, and how many there are."""
    out: list[dict[str, Any]] = []
    for rank in ranks:
        for event in rank.captures:
            first, last = event["trigger_first_iteration"], event["trigger_last_iteration"]
            k = _window_of(rank, first, last)
            t = event.get("t")
            out.append({
                "rank": rank.rank,
                "trigger_first_iteration": first,
                "trigger_last_iteration": last,
                "trigger_window": None if k is None else _trigger_window(rank, k, start),
                "reason": event["reason"],
                "first_iteration": event["first_iteration"],
                "last_iteration": event["last_iteration"],
                "iterations": event["iterations"],
                "path": event["path"],
                "bytes": event["bytes"],
                "trimmed_events": event["trimmed_events"],
                "traced_iteration_ms": _r(event["traced_iteration_ms"]),
                "trigger_median_ms": _r(event["trigger_median_ms"]),
                "cost_ms": _r(event["cost_ms"]),
                "export_ms": _r(event["export_ms"]),
                "t": None if t is None else _r(t - start, 4),
            })
    out.sort(key=lambda c: (c["rank"], c["trigger_last_iteration"], c["first_iteration"], c["path"]))
    return out[:MAX_CAPTURES], len(out)


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


def analyse(ranks: Sequence[Rank]) -> dict[str, Any]:
    """The report of loaded, aligned ranks (see :func:`build_report`).

    Args:
        ranks: what :func:`trainperf.ranks._report._load.load_run` returned.
    """
    starts = [s for s in (_start(r) for r in ranks) if s is not None]
    start = min(starts) if starts else 0.0
    silent = _silent(ranks)
    entries = [_rank_entry(r, silent.get(r.rank)) for r in ranks]
    stragglers, analysed = named_stragglers(ranks)
    windows, rank_windows = _buckets(ranks, start)
    slowest = _slowest(ranks, start)
    whole = [RankFigures(e["rank"], e["iterations"], e["etl_ms"]["mean"], e["forward_ms"], e["compute_ms"],
                         e["other_ms"] or 0.0, e["iteration_ms"]["mean"])
             for e in entries if None not in (e["etl_ms"]["mean"], e["compute_ms"], e["iteration_ms"]["mean"])]
    # the headline names what the window-by-window analysis found, over the same windows
    named = [Straggler(s["rank"], s["cause"], s["excess_ms"] or 0.0,
                       _in_words(s, analysed)) for s in stragglers]
    names = sorted({str(r.meta["run_name"]) for r in ranks if r.meta.get("run_name") is not None})
    missing = missing_ranks(ranks)
    captures, captures_total = _captures(ranks, start)
    return {
        "schema": REPORT_SCHEMA,
        "run_name": names[0] if names else None,
        "start": start,
        "world_size": len(ranks),
        "missing_ranks": missing[:MAX_NAMED],
        "missing_ranks_total": len(missing),
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
    }
