"""A profiler trace as a capture writes it: the rank where Holistic Trace Analysis finds it, what
triggered the capture, kept under a size cap, compressed, whole or not at all; and, when it cannot be
written, why, in words, with nothing of it left behind."""

from __future__ import annotations

import errno
import glob
import gzip
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base import atomic_write
from ..sinks.shared import describe

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


class TraceNotWritten(Exception):
    """A capture's trace could not be written; the message says why, in words."""


#: What an error number means for a folder traces go to.
_CAUSES = {
    errno.ENOSPC: "no space left on the device of folder {}",
    errno.EDQUOT: "the disk quota of folder {} is used up (no space left)",
    errno.EACCES: "permission denied: folder {} cannot be written",
    errno.EPERM: "permission denied: folder {} cannot be written",
    errno.EROFS: "folder {} is on a read-only file system",
}
#: Bytes written into the folder to find why the profiler wrote no trace (it says why only on stderr).
PROBE_BYTES = 64 * 1024


def probe_folder(folder: Path, size: int = 0, *, sync: bool = False) -> None:
    """Make ``folder`` (with its parents) and write ``size`` bytes into a new file there, then remove
    it: raises the :class:`OSError` a trace's write would meet there (no space, no permission, a
    read-only file system)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".trainperf-probe-{secrets.token_hex(6)}.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        if size:
            os.write(fd, bytes(size))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(path)


def cause(exc: BaseException, folder: Path) -> str | None:
    """``exc`` in words, when it says why nothing can be written in ``folder``."""
    if isinstance(exc, OSError) and exc.errno in _CAUSES:
        return _CAUSES[exc.errno].format(repr(str(folder)))
    return None


def why_not_written(exc: BaseException, folder: Path) -> TraceNotWritten:
    """Why a trace for ``folder`` was not written, from what writing it raised (``exc``). The profiler
    says why its own write failed only on stderr, leaving no trace or a cut one: the folder is then
    tried (call this before what the failed write left is removed: a full disk is still full)."""
    said = cause(exc, folder)
    if said is not None:
        return TraceNotWritten(f"{said} ({describe(exc)})")
    try:
        probe_folder(folder, PROBE_BYTES, sync=True)
    except OSError as probe:
        said = cause(probe, folder)
        return TraceNotWritten(f"{said or f'folder {str(folder)!r}: {describe(probe)}'} (the profiler wrote no "
                               "whole trace)")
    return TraceNotWritten(f"the profiler wrote no readable trace in folder {str(folder)!r}: {describe(exc)}")


def remove_raw(raw: Path) -> None:
    """Remove the profiler's raw trace ``raw`` and what the profiler's own write left beside it (Kineto
    writes ``<raw>.tmp`` and renames it once whole); what cannot be removed is left, silently."""
    try:
        leftovers = [raw, *raw.parent.glob(glob.escape(raw.name) + "?*")]
    except OSError:
        leftovers = [raw]
    for path in leftovers:
        try:
            path.unlink()
        except OSError:
            pass
