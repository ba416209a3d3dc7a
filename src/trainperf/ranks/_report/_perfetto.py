"""The run as Chrome trace event JSON (what ui.perfetto.dev, chrome://tracing and Holistic Trace
Analysis read): one process per rank, one thread for its report windows and one for its steps."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from .._layout import SPAN_PHASES
from ._load import Rank

__all__ = ["trace_events", "perfetto_trace", "perfetto_traces", "write_trace"]

#: Thread ids within each rank's process.
WINDOWS_TID = 1
STEPS_TID = 2


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


#: Spans of one rank written to a trace; the rest are left out, said in the trace's ``otherData`` and
#: by an instant event where they start (about 55 MB of trace per rank).
MAX_SPANS_PER_RANK = 500_000


def spans_left_out(rank: Rank) -> int:
    """How many of ``rank``'s spans a trace leaves out (beyond :data:`MAX_SPANS_PER_RANK`)."""
    return max(0, len(rank.span_t) - MAX_SPANS_PER_RANK)


def trace_events(rank: Rank, start: float, silent_since: float | None = None) -> Iterator[dict[str, Any]]:
    """One rank's events, one at a time: metadata naming the process and threads, a complete (``X``)
    event per report window and per timeline span (at most :data:`MAX_SPANS_PER_RANK`), each
    iteration's spans under a ``ProfilerStep#<iteration>`` event (how Holistic Trace Analysis finds
    iterations), ``ts``/``dur`` in microseconds since ``start`` on aligned time.

    Args:
        rank: a loaded, aligned rank.
        start: aligned wall time that becomes ``ts`` 0.
        silent_since: when the rank went silent, marked with an instant event.
    """
    pid = rank.rank
    label = f"rank {rank.rank} ({rank.host})" if rank.host else f"rank {rank.rank}"
    yield {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": label}}
    yield {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": rank.rank}}
    yield {"ph": "M", "pid": pid, "tid": WINDOWS_TID, "name": "thread_name", "args": {"name": "report windows"}}
    yield {"ph": "M", "pid": pid, "tid": STEPS_TID, "name": "thread_name", "args": {"name": "steps"}}
    w = rank.windows
    for k in range(rank.n_windows):
        t1, ws = w["timestamp"][k], w["window_s"][k]
        if not (math.isfinite(t1) and math.isfinite(ws)):
            continue
        args = {key: w[key][k] for key in ("iteration_ms", "etl_ms", "compute_ms", "other_ms", "samples_per_sec")
                if math.isfinite(w[key][k])}
        first = int(w["iteration"][k] - w["window_iterations"][k] + 1)
        yield {"ph": "X", "pid": pid, "tid": WINDOWS_TID, "cat": "window",
               "name": f"iterations {first}-{int(w['iteration'][k])}", "ts": _us(t1 - ws - start),
               "dur": _us(ws), "args": args}
    kept = min(len(rank.span_t), MAX_SPANS_PER_RANK)
    j = 0
    while j < kept:
        iteration, k = rank.span_iter[j], j
        while k < kept and rank.span_iter[k] == iteration:  # the timeline is written in iteration order
            k += 1
        steps = [{"ph": "X", "pid": pid, "tid": STEPS_TID, "cat": "step", "name": SPAN_PHASES[rank.span_phase[n]],
                  "ts": _us(rank.span_t[n] - start), "dur": _us(rank.span_d[n]), "args": {"iteration": iteration}}
                 for n in range(j, k)]
        yield _profiler_step(pid, iteration, steps)
        yield from steps
        j = k
    if kept < len(rank.span_t):
        yield {"ph": "i", "s": "t", "pid": pid, "tid": STEPS_TID, "name": "spans left out",
               "ts": _us(rank.span_t[kept] - start),
               "args": {"left_out": len(rank.span_t) - kept, "kept": kept,
                        "from_iteration": rank.span_iter[kept]}}
    if silent_since is not None:
        yield {"ph": "i", "s": "p", "pid": pid, "tid": WINDOWS_TID, "name": "silent",
               "ts": _us(silent_since - start)}


def _profiler_step(pid: int, iteration: int, steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The iteration as PyTorch's profiler marks it: Holistic Trace Analysis gives each event the
    iteration of the ``ProfilerStep#<n>`` that holds its ``ts``, so it spans all of ``steps``."""
    ts = min(e["ts"] for e in steps)
    end = max(e["ts"] + e["dur"] for e in steps)
    return {"ph": "X", "pid": pid, "tid": STEPS_TID, "cat": "user_annotation", "name": f"ProfilerStep#{iteration}",
            "ts": ts, "dur": round(end - ts, 3), "args": {"iteration": iteration}}


@dataclass
class Trace:
    """A trace to write: its events (produced as they are written) and its other keys."""

    events: Iterable[dict[str, Any]]
    other: dict[str, Any]


def perfetto_trace(ranks: Sequence[Rank], start: float, silent: dict[int, float] | None = None) -> Trace:
    """Every rank in one trace: one process per rank (``pid`` = rank).

    Args:
        ranks: loaded, aligned ranks.
        start: aligned wall time of ``ts`` 0.
        silent: ranks that went silent, and when.
    """
    silent = silent or {}
    events = itertools.chain.from_iterable(trace_events(r, start, silent.get(r.rank)) for r in ranks)
    return Trace(events, _other(ranks, 0, len(ranks), start))


def perfetto_traces(ranks: Sequence[Rank], start: float,
                    silent: dict[int, float] | None = None) -> dict[int, Trace]:
    """One trace per rank, each with its own ``distributedInfo.rank``: the layout Holistic Trace
    Analysis reads (one file per rank in a folder).

    Args:
        ranks: loaded, aligned ranks.
        start: aligned wall time of ``ts`` 0, shared by every file.
        silent: ranks that went silent, and when.
    """
    silent = silent or {}
    return {r.rank: Trace(trace_events(r, start, silent.get(r.rank)), _other([r], r.rank, len(ranks), start))
            for r in ranks}


def _other(ranks: Sequence[Rank], rank: int, world_size: int, start: float) -> dict[str, Any]:
    other: dict[str, Any] = {"producer": "trainperf", "start_unix_s": start}
    left_out = {str(r.rank): n for r in ranks if (n := spans_left_out(r))}
    if left_out:
        other["spans_left_out"] = left_out
        other["spans_kept_per_rank"] = MAX_SPANS_PER_RANK
    return {"distributedInfo": {"backend": "unknown", "rank": rank, "world_size": world_size},
            "displayTimeUnit": "ms", "otherData": other}


def write_trace(trace: Trace, file: IO[str]) -> None:
    """``trace`` as Chrome trace JSON, written event by event (never whole in memory). Its other keys
    come first, on a line of their own, spaced as PyTorch writes them: Holistic Trace Analysis finds
    a file's rank with the pattern ``"rank":\\s+(\\d+)`` on its first matching line. Events are compact
    (no ``"rank": n`` among them)."""
    encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
    spaced = json.JSONEncoder(separators=(", ", ": "), allow_nan=False).encode
    file.write("{" + "".join(f"{spaced(key)}: {spaced(value)}, " for key, value in trace.other.items()))
    file.write('\n"traceEvents":[')
    batch: list[str] = []
    first = True
    for event in trace.events:
        batch.append(encode(event))
        if len(batch) >= 10_000:
            file.write(("" if first else ",") + ",".join(batch))
            first, batch = False, []
    if batch:
        file.write(("" if first else ",") + ",".join(batch))
    file.write("]}\n")
