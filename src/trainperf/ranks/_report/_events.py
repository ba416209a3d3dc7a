"""A rank's ``events.jsonl`` read back: the profiler captures it wrote and rank 0's word that a rank
went silent, each checked field by field and kept small; other kinds (rank 0's cluster lines) are
not the report's. Memory stays bounded for a file of any size: silent events are kept per rank they
name, captures up to the report's listing."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._read import Unreadable, num, objects, wall, whole, writable

__all__: list[str] = []

#: A capture event's reason is cut at this length; a path longer than this is no run's (the event is skipped).
MAX_REASON = 500
MAX_PATH = 4096
#: A capture event's fields (see ``RunDirSink.event`` and ``trainperf.profile``): iterations (required),
#: counts and milliseconds (each ``null`` or absent when unknown).
CAPTURE_ITERATIONS = ("trigger_first_iteration", "trigger_last_iteration", "first_iteration", "last_iteration")
CAPTURE_COUNTS = ("iterations", "bytes", "trimmed_events")
CAPTURE_MS = ("traced_iteration_ms", "trigger_median_ms", "cost_ms", "export_ms")
#: Captures listed in the report, at most (a run takes a few; a hostile file can hold any number).
MAX_CAPTURES = 1000
#: Ranks the silent events of a run may name, at most (a run has as many ranks; a hostile file, any number).
MAX_SILENT = 100_000


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
    out: dict[str, Any] = {"kind": "capture", "path": writable(path), "reason": writable(reason[:MAX_REASON])}
    t, rank = event.get("t"), event.get("rank")
    out["t"] = None if t is None else wall(t)
    out["rank"] = None if rank is None else whole(rank)
    if (t is not None and out["t"] is None) or (rank is not None and out["rank"] is None):
        return None
    for key in CAPTURE_ITERATIONS:
        out[key] = whole(event.get(key))
        if out[key] is None:
            return None
    if out["trigger_first_iteration"] > out["trigger_last_iteration"] or out["first_iteration"] > out["last_iteration"]:
        return None
    for key in CAPTURE_COUNTS + CAPTURE_MS:
        value = event.get(key)
        if value is None:
            out[key] = None
            continue
        checked = whole(value) if key in CAPTURE_COUNTS else num(value)
        if checked is None or checked < 0:
            return None
        out[key] = checked if key in CAPTURE_COUNTS else float(checked)
    return out


def silent_event(event: dict[str, Any]) -> dict[str, Any] | None:
    """A ``silent`` event (rank 0's word that a rank stopped answering) as the report reads it: the
    rank (a whole number), ``t`` and ``last_seen`` (wall times, each optional); ``None`` when a field
    is of the wrong type."""
    rank = whole(event.get("rank"))
    out: dict[str, Any] = {"kind": "silent", "rank": rank}
    for key in ("t", "last_seen"):
        value = event.get(key)
        out[key] = None if value is None else wall(value)
        if value is not None and out[key] is None:
            return None
    return out if rank is not None else None


def _capture_order(capture: dict[str, Any]) -> tuple[int, int, str]:
    """The order the report lists a rank's captures in."""
    return capture["trigger_last_iteration"], capture["first_iteration"], capture["path"]


def read_events(path: Path, unreadable: Unreadable, max_captures: int = MAX_CAPTURES, max_silent: int = MAX_SILENT
                ) -> tuple[list[dict[str, Any]], int, int]:
    """A rank's events as the report reads them: its first ``silent`` event per rank named (at most
    ``max_silent`` ranks), then its first ``max_captures`` captures in the report's order; how many
    lines were skipped (not an object, a silent or capture event with a field of the wrong type), and
    how many valid captures the file holds."""
    silent: dict[int, dict[str, Any]] = {}
    skipped = captures_total = 0

    def captures() -> Iterator[dict[str, Any]]:
        nonlocal skipped, captures_total
        for event in objects(path, unreadable):
            kind = event.get("kind") if event is not None else None
            checked = (None if event is None else capture_event(event) if kind == "capture"
                       else silent_event(event) if kind == "silent" else event)
            if checked is None:
                skipped += 1
            elif kind == "capture":
                captures_total += 1
                yield checked
            elif kind == "silent" and (checked["rank"] in silent or len(silent) < max_silent):
                silent.setdefault(checked["rank"], checked)

    found = captures()
    kept = heapq.nsmallest(max_captures, found, key=_capture_order) if max_captures > 0 else []
    for _ in found:  # with no room left (nsmallest reads nothing then), the rest is still counted
        pass
    return [*silent.values(), *kept], skipped, captures_total
