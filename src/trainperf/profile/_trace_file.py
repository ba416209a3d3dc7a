"""A profiler trace as a capture writes it: the rank where Holistic Trace Analysis finds it, what
triggered the capture, kept under a size cap, compressed, whole or not at all."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from typing import Any

from ..base import atomic_write

__all__: list[str] = []

#: Device-side categories of a PyTorch profiler trace: a trimmed trace keeps them as long as it can.
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_runtime",
                               "cuda_driver"})
STEP_PREFIX = "ProfilerStep#"


@dataclass(frozen=True, slots=True)
class Written:
    """A trace as written: its size in bytes and how many events the size cap took out."""

    size: int
    trimmed: int


def _is_marker(event: Any) -> bool:
    return isinstance(event, dict) and str(event.get("name", "")).startswith(STEP_PREFIX)


def _marker_iteration(event: dict[str, Any]) -> int:
    tail = str(event["name"])[len(STEP_PREFIX):]
    return int(tail) if tail.isdigit() else -1


def _trim_order(events: list[Any]) -> list[int]:
    """Which events go first when a trace is too big: host events before device ones, the shortest
    first; step markers and metadata never."""
    def key(k: int) -> tuple[int, float]:
        e = events[k]
        dur = e.get("dur", 0.0)
        return (1 if e.get("cat") in DEVICE_CATEGORIES else 0, dur if isinstance(dur, (int, float)) else 0.0)
    return sorted((k for k, e in enumerate(events)
                   if isinstance(e, dict) and e.get("ph") != "M" and not _is_marker(e)), key=key)


def encode_trace(data: dict[str, Any]) -> bytes:
    """``data`` as gzip-compressed JSON; keys keep ``json``'s default ``": "`` spacing, which Holistic
    Trace Analysis needs to find ``"rank": N``."""
    return gzip.compress(json.dumps(data, allow_nan=False).encode("utf-8"), compresslevel=6)


def fit_trace(data: dict[str, Any], max_bytes: int) -> tuple[bytes, int]:
    """``data`` encoded, with as few events left out as keep it within ``max_bytes``; the bytes and
    how many events went (recorded in the trace's ``trainperf.trimmed_events``).

    Raises:
        ValueError: not even the step markers and metadata fit.
    """
    blob = encode_trace(data)
    if len(blob) <= max_bytes:
        return blob, 0
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError(f"the trace is {len(blob):,} bytes, over the cap of {max_bytes:,}, and has no events to trim")
    order = _trim_order(events)

    def without(n: int) -> bytes:
        gone = set(order[:n])
        trimmed = dict(data, traceEvents=[e for k, e in enumerate(events) if k not in gone])
        trimmed["trainperf"] = dict(data.get("trainperf", {}), trimmed_events=n)
        return encode_trace(trimmed)

    low, high = 0, len(order)  # without(high) is the smallest trace there is
    smallest = without(high)
    if len(smallest) > max_bytes:
        raise ValueError(f"the trace is {len(blob):,} bytes, over the cap of {max_bytes:,} even with only its "
                         "step markers")
    best = (smallest, high)
    while low < high - 1:  # the fewest events out that fit: without(high) fits, without(low) does not
        mid = (low + high) // 2
        candidate = without(mid)
        if len(candidate) <= max_bytes:
            high, best = mid, (candidate, mid)
        else:
            low = mid
    return best


def finish_trace(raw: str | os.PathLike[str], out: str | os.PathLike[str], *, rank: int | None,
                 world_size: int | None, meta: dict[str, Any], max_bytes: int) -> Written:
    """Read the profiler's raw trace ``raw``, add the rank and ``meta`` (under ``trainperf``), and write
    it to ``out`` gzip-compressed and within ``max_bytes``, atomically.

    Args:
        raw: the profiler's Chrome trace JSON.
        out: the file to write (``.json.gz``).
        rank: the process's rank for ``distributedInfo`` (kept when the profiler wrote one).
        world_size: the run's world size, when known.
        meta: what triggered the capture and what it cost; markers of iterations after its
            ``last_iteration`` (one opened for an iteration that never ran) are left out.
        max_bytes: the cap on the written file.
    """
    with open(raw, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"the profiler's trace {os.fspath(raw)!r} is not a JSON object")
    info = data.pop("distributedInfo", None)
    info = dict(info) if isinstance(info, dict) else {"backend": "none"}
    if rank is not None:
        info.setdefault("rank", rank)
    info.setdefault("rank", 0)
    if world_size is not None:
        info.setdefault("world_size", world_size)
    last = meta.get("last_iteration")
    events = data.get("traceEvents")
    if isinstance(last, int) and isinstance(events, list):  # training ended with a marker open for no iteration
        data["traceEvents"] = [e for e in events if not _is_marker(e) or _marker_iteration(e) <= last]
    # First in the file: a reader that looks for the first "rank" finds this one, not an event's.
    data = {"distributedInfo": info, **data, "trainperf": meta}
    blob, trimmed = fit_trace(data, max_bytes)
    atomic_write(out, lambda f: f.write(blob), binary=True)
    return Written(len(blob), trimmed)
