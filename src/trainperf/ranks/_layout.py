"""The run directory's format in one place: its version, the files of a rank's folder, the phases
of a span and what a clock estimate can say. Every writer and reader of a run directory takes its
names from here (``docs/distributed.md`` describes each file)."""

from __future__ import annotations

__all__ = ["RUN_DIR_SCHEMA", "SPAN_PHASES", "CLOCK_STATUSES", "META", "WINDOWS", "SPANS", "CLOCK", "EVENTS",
           "GOODPUT", "RANK_FILES"]

#: Version of the run directory layout, written in each rank's ``meta.json``.
RUN_DIR_SCHEMA = 1
#: A rank's files: what it is (meta data), its windows, its iterations' spans (the file keeps its
#: first name), its clock estimates and its events (rank 0's: a rank gone silent, a gather's
#: stragglers; any rank's: the profiler captures it wrote).
META = "meta.json"
WINDOWS = "windows.jsonl"
SPANS = "timeline.jsonl"
CLOCK = "clock.jsonl"
EVENTS = "events.jsonl"
#: Each attempt's time account (one per process that wrote into the folder), rewritten whole and kept
#: current as windows are written, with the bytes of ``windows.jsonl`` it holds.
GOODPUT = "goodput.json"
#: The files a rank hands to rank 0 when their disks are not shared. Its events are among them: a
#: rank other than 0 writes none but its profiler captures (written before it hands them over), and
#: rank 0 writes a peer's files only into the peer's folder, never over a file already there.
RANK_FILES = (META, WINDOWS, SPANS, CLOCK, EVENTS, GOODPUT)
#: Phases a span can have, in the order an iteration's row lists them after the start.
SPAN_PHASES = ("data", "forward", "backward", "step", "compute", "other", "report")
#: What a clock estimate can say about a rank's offset to rank 0.
CLOCK_STATUSES = ("reference", "aligned", "unknown")
