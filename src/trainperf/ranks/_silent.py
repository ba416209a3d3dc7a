"""A rank named silent from outside the ranks (a launcher that saw its worker fail): the event rank 0
writes when a rank stops answering, added to rank 0's events."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..base import open_to_append
from ..records import json_line
from ._layout import EVENTS, WINDOWS

__all__ = ["name_silent"]


def name_silent(run_dir: str | os.PathLike[str], rank: int, why: str, *, now: float | None = None) -> bool:
    """Add ``{"kind": "silent", "rank": rank, "why": why, "last_seen": ...}`` to ``run_dir/rank-0/events.jsonl``,
    which ``trainperf report`` reads as rank 0's word that ``rank`` stopped: its last sign of life is when
    its ``windows.jsonl`` was last written (``None`` without one). Whether it was written: not when
    ``run_dir`` has no ``rank-0`` folder (the ranks wrote elsewhere) or the disk refuses it.

    Args:
        run_dir: the run directory.
        rank: the rank that failed.
        why: what happened to it, in a few words.
        now: wall time of the event (default: now).
    """
    if type(rank) is not int or rank < 0:
        raise ValueError(f"rank must be a non-negative int, got {rank!r}")
    if not isinstance(why, str):
        raise TypeError(f"why must be a str, got {why!r}")
    folder = Path(run_dir) / "rank-0"
    if not folder.is_dir():
        return False
    try:
        last_seen: float | None = (Path(run_dir) / f"rank-{rank}" / WINDOWS).stat().st_mtime
    except OSError:
        last_seen = None
    event = {"kind": "silent", "rank": rank, "last_seen": last_seen, "why": why,
             "t": time.time() if now is None else float(now)}
    try:
        with open_to_append(folder / EVENTS) as f:
            f.write(json_line(event))
    except OSError:
        return False
    return True
