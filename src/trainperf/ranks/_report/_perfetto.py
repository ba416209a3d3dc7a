"""The run as Chrome trace event JSON (what ui.perfetto.dev, chrome://tracing and Holistic Trace
Analysis read): one process per rank, one thread for its report windows and one for its steps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .._layout import SPAN_PHASES
from ._load import Rank

__all__ = ["trace_events", "perfetto_trace", "perfetto_traces"]

#: Thread ids within each rank's process.
WINDOWS_TID = 1
STEPS_TID = 2


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def trace_events(rank: Rank, start: float, silent_since: float | None = None) -> list[dict[str, Any]]:
    """One rank's events: metadata naming the process and threads, a complete (``X``) event per
    report window and per timeline span, ``ts``/``dur`` in microseconds since ``start`` on aligned time.

    Args:
        rank: a loaded, aligned rank.
        start: aligned wall time that becomes ``ts`` 0.
        silent_since: when the rank went silent, marked with an instant event.
    """
    pid = rank.rank
    label = f"rank {rank.rank} ({rank.host})" if rank.host else f"rank {rank.rank}"
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": label}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": rank.rank}},
        {"ph": "M", "pid": pid, "tid": WINDOWS_TID, "name": "thread_name", "args": {"name": "report windows"}},
        {"ph": "M", "pid": pid, "tid": STEPS_TID, "name": "thread_name", "args": {"name": "steps"}},
    ]
    w = rank.windows
    for k in range(rank.n_windows):
        t1, ws = w["timestamp"][k], w["window_s"][k]
        if not (math.isfinite(t1) and math.isfinite(ws)):
            continue
        args = {key: w[key][k] for key in ("iteration_ms", "etl_ms", "compute_ms", "other_ms", "samples_per_sec")
                if math.isfinite(w[key][k])}
        first = int(w["iteration"][k] - w["window_iterations"][k] + 1)
        events.append({"ph": "X", "pid": pid, "tid": WINDOWS_TID, "cat": "window",
                       "name": f"iterations {first}-{int(w['iteration'][k])}", "ts": _us(t1 - ws - start),
                       "dur": _us(ws), "args": args})
    for j in range(len(rank.span_t)):
        events.append({"ph": "X", "pid": pid, "tid": STEPS_TID, "cat": "step",
                       "name": SPAN_PHASES[rank.span_phase[j]], "ts": _us(rank.span_t[j] - start),
                       "dur": _us(rank.span_d[j]), "args": {"iteration": rank.span_iter[j]}})
    if silent_since is not None:
        events.append({"ph": "i", "s": "p", "pid": pid, "tid": WINDOWS_TID, "name": "silent",
                       "ts": _us(silent_since - start)})
    return events


def perfetto_trace(ranks: Sequence[Rank], start: float, silent: dict[int, float] | None = None) -> dict[str, Any]:
    """Every rank in one trace: one process per rank (``pid`` = rank).

    Args:
        ranks: loaded, aligned ranks.
        start: aligned wall time of ``ts`` 0.
        silent: ranks that went silent, and when.
    """
    silent = silent or {}
    events = [e for r in ranks for e in trace_events(r, start, silent.get(r.rank))]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "distributedInfo": {"backend": "unknown", "rank": 0, "world_size": len(ranks)},
            "otherData": {"producer": "trainperf", "start_unix_s": start}}


def perfetto_traces(ranks: Sequence[Rank], start: float,
                    silent: dict[int, float] | None = None) -> dict[int, dict[str, Any]]:
    """One trace per rank, each with its own ``distributedInfo.rank``: the layout Holistic Trace
    Analysis reads (one file per rank in a folder).

    Args:
        ranks: loaded, aligned ranks.
        start: aligned wall time of ``ts`` 0, shared by every file.
        silent: ranks that went silent, and when.
    """
    silent = silent or {}
    return {r.rank: {"traceEvents": trace_events(r, start, silent.get(r.rank)), "displayTimeUnit": "ms",
                     "distributedInfo": {"backend": "unknown", "rank": r.rank, "world_size": len(ranks)},
                     "otherData": {"producer": "trainperf", "start_unix_s": start}}
            for r in ranks}
