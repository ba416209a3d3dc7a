"""The job's goodput read back from a run directory: each rank's ``goodput.json`` (every attempt's
account, kept current as it trained), and only the windows its ledger did not hold yet (a killed
attempt's last ones). A folder without a ledger (written by an older trainperf) is read from its
windows alone, which cannot say its start-up or restart gaps: that is noted."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...records import AttemptAccount, GoodputAccount, account_job
from .._layout import WINDOWS
from .._ledger import read_ledger
from ._folders import RankFolders, rank_folders
from ._read import MAX_LINE_BYTES, num, parse, wall, whole

__all__ = ["read_goodput", "rank_attempts", "report_goodput"]

#: Bytes read at once from a windows file's uncovered part.
_CHUNK = 1 << 20


def read_goodput(run_dir: str | os.PathLike[str], folders: RankFolders | None = None) -> GoodputAccount:
    """The job's account from ``run_dir`` (see :func:`~trainperf.records.account_job`).

    Raises:
        FileNotFoundError: ``run_dir`` does not exist or is not a folder.
        ValueError: it holds no rank folder, or no rank wrote anything an account can be made of.
    """
    found = folders if folders is not None else rank_folders(run_dir)
    ranks: dict[int, list[AttemptAccount]] = {}
    notes: list[str] = []
    for rank, paths in sorted(found.found.items()):
        paths.sort(key=lambda p: (p.name != f"rank-{rank}", p.name))
        attempts, rank_notes = rank_attempts(paths[0])
        notes += [f"rank {rank}: {note}" for note in rank_notes[:5]]
        if attempts:
            ranks[rank] = attempts
    if not ranks:
        raise ValueError(f"run_dir {str(run_dir)!r}: no rank wrote a window or a goodput.json")
    return account_job(ranks, notes=notes[:50])


def report_goodput(run_dir: str | os.PathLike[str], folders: RankFolders) -> dict[str, Any]:
    """The report's ``goodput`` (the job's :meth:`~trainperf.records.GoodputAccount.to_dict`, ``None``
    when there is none) and ``goodput_missing`` (why there is none, else ``None``). Never raises for
    what the run directory holds: a report is still made without its goodput."""
    try:
        account = read_goodput(run_dir, folders).to_dict()
    except ValueError as exc:
        return {"goodput": None, "goodput_missing": str(exc)}
    except OSError as exc:
        return {"goodput": None, "goodput_missing": f"could not read the run directory: {exc.strerror or exc}"}
    if not _finite(account):  # wall times far apart enough to overflow: a ledger no clock wrote
        return {"goodput": None, "goodput_missing": "the goodput.json files hold wall times no clock gives "
                                                    "(their differences are not finite)"}
    return {"goodput": account, "goodput_missing": None}


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def rank_attempts(folder: Path) -> tuple[list[AttemptAccount], list[str]]:
    """A rank folder's attempts, oldest first, each with the windows its ledger entry did not hold
    added from ``windows.jsonl``; and notes on what could not be read."""
    ledger, notes = read_ledger(folder)
    path = folder / WINDOWS
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if not ledger:
        attempts = _from_windows(path, 0, size)
        if attempts:
            notes.append("no goodput.json (written by trainperf 0.x before it, or never closed a window): "
                         "start-up and restart gaps before each attempt's first window are not known")
        return attempts, notes
    out: list[AttemptAccount] = []
    added = 0
    for k, (account, begin, end) in enumerate(ledger):
        start = end if end is not None else begin
        stop = size
        for later in ledger[k + 1:]:
            if later[1] is not None:
                stop = min(size, later[1])
                break
        if start is not None and start < stop:
            for obj in _objects(path, start, stop):
                if _add(account, obj):
                    added += 1
        out.append(account)
    if added:
        notes.append(f"{added} windows read from windows.jsonl past what goodput.json held (an attempt's last "
                     "windows before it ended without closing)")
    return out, notes


def _objects(path: Path, start: int, stop: int) -> Iterator[Any]:
    """The JSON values of the lines of ``path`` between bytes ``start`` and ``stop`` (a cut last line
    and lines longer than any window's are skipped)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return
    with f:
        f.seek(start)
        left, rest = stop - start, b""
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            if len(rest) > MAX_LINE_BYTES:
                rest = b""
            for line in lines:
                if line.strip() and len(line) <= MAX_LINE_BYTES:
                    try:
                        yield parse(line)
                    except ValueError:
                        continue


def _add(account: AttemptAccount, obj: Any) -> bool:
    """Count a window's line in ``account``; ``False`` when it is not a window's."""
    if not isinstance(obj, dict):
        return False
    iteration, n, window_s = whole(obj.get("iteration")), whole(obj.get("window_iterations")), num(obj.get("window_s"))
    if iteration is None or n is None or n < 1 or window_s is None or window_s < 0.0:
        return False
    extra = obj.get("extra")
    account.add_window(iteration, n, window_s, obj.get("warmup") is True, wall(obj.get("timestamp")),
                       etl_total_ms=num(obj.get("etl_total_ms")), gc_total_ms=num(obj.get("gc_total_ms")),
                       compute_ms=num(obj.get("compute_ms")), other_ms=num(obj.get("other_ms")),
                       overhead_ms=num(obj.get("overhead_ms")),
                       extra={k: num(v) for k, v in extra.items()} if isinstance(extra, dict) else None)
    return True


def _from_windows(path: Path, start: int, stop: int) -> list[AttemptAccount]:
    """Attempts made of windows alone (no ledger): a new one where the iterations start again lower
    or the process changes; each starts where its first window started."""
    attempts: list[AttemptAccount] = []
    current: AttemptAccount | None = None
    for obj in _objects(path, start, stop):
        if not isinstance(obj, dict):
            continue
        iteration, n = whole(obj.get("iteration")), whole(obj.get("window_iterations"))
        stamp = wall(obj.get("timestamp"))
        window_s = num(obj.get("window_s")) or 0.0
        if iteration is None or n is None or n < 1 or stamp is None:
            continue
        pid = whole(obj.get("pid")) or 0
        if current is None or pid != current.pid or (current.last_iteration is not None
                                                      and iteration <= current.last_iteration):
            begun = stamp - window_s - (num(obj.get("overhead_ms")) or 0.0) / 1000.0
            current = AttemptAccount(begun, started=begun, start_iteration=max(0, iteration - n), pid=pid)
            attempts.append(current)
        _add(current, obj)
    return attempts
