"""A rank's ``goodput.json``: the time account of every attempt that wrote into its folder, kept
current as its windows are written, so that a reader never has to read every window again.

Each attempt's entry is :meth:`~trainperf.records.AttemptAccount.to_dict` with the bytes of
``windows.jsonl`` it covers: ``windows_from`` (the file's size when the attempt opened it) and
``windows_to`` (the end of the last window the entry counts). The file is rewritten whole
(atomically) at most once a second while windows come, and at close; a killed attempt's last windows
are the lines between its ``windows_to`` and the next attempt's ``windows_from`` (or the file's end),
which a reader adds (:func:`read_ledger`).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..base import atomic_write, process_age, remove_leftovers
from ..records import AttemptAccount, strict
from ._layout import GOODPUT, WINDOWS
from ._values import num, parse

__all__ = ["GoodputLedger", "read_ledger", "read_attempts", "LEDGER_EVERY_S", "MAX_LEDGER_BYTES"]

#: The ledger is rewritten at most this often while windows come (and always at close).
LEDGER_EVERY_S = 1.0
#: A ledger larger than this is not one trainperf wrote (an entry is a few kB): it is not read.
MAX_LEDGER_BYTES = 64 * 2**20


class GoodputLedger:
    """This attempt's account in its rank folder's ``goodput.json``, beside the earlier attempts'.

    Args:
        folder: the rank's folder.
        wall_clock: seconds since the epoch.
        pid: this process.
    """

    def __init__(self, folder: Path, wall_clock: Callable[[], float], pid: int) -> None:
        self._wall_clock = wall_clock
        now = float(wall_clock())
        age, self.start_known = process_age()
        self.attempt = AttemptAccount(now - age, pid=pid)
        self.attempt.last_seen = now  # constructed: a first sign of life
        self._lock = threading.Lock()
        self._written_at = -math.inf
        self.written = False
        self.windows_from: int | None = None
        self.windows_to: int | None = None
        self.folder = folder
        self.prior: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.read_prior()

    def read_prior(self) -> None:
        """Read the earlier attempts' entries of the folder (again after the folder moved)."""
        self.prior, self.notes = read_entries(self.folder / GOODPUT)

    def prior_accounts(self) -> list[AttemptAccount]:
        """The earlier attempts, as accounts, each with the windows its entry did not hold yet (an
        attempt killed before it wrote its ledger again); entries that do not read as one are left out."""
        return read_attempts(self.folder, from_windows=False)[0]

    # -- what the listener and the sink say ------------------------------------------------------
    def started(self, wall: float, iteration: int, startup: dict[str, float]) -> None:
        """Training started at ``wall`` from ``iteration``, after the spans in ``startup``."""
        with self._lock:
            attempt = self.attempt
            attempt.started = wall
            attempt.start_iteration = iteration
            attempt.add_startup(startup)
            if wall > (attempt.last_seen or -math.inf):
                attempt.last_seen = wall

    def windows(self, records: Sequence[Any], start: int, end: int) -> None:
        """``records`` were written to ``windows.jsonl`` from byte ``start`` to ``end``."""
        with self._lock:
            if self.windows_from is None:
                self.windows_from = start
            for record in records:
                self.attempt.add_record(record)
            self.windows_to = end
            now = float(self._wall_clock())
            if not self.written or now - self._written_at >= LEDGER_EVERY_S:
                self._write(now)

    def close(self, tail: dict[str, float] | None = None, *, windows_end: int | None = None) -> None:
        """The attempt ended now, cleanly; ``tail``: the spans after its last iteration."""
        with self._lock:
            now = float(self._wall_clock())
            if tail:
                self.attempt.add_tail(tail)
            self.attempt.close(now)
            if self.windows_from is None and windows_end is not None:
                self.windows_from = self.windows_to = windows_end
            self._write(now)

    def _write(self, now: float) -> None:
        entry = self.attempt.to_dict()
        entry["windows_from"] = self.windows_from
        entry["windows_to"] = self.windows_to
        entry["process_start_known"] = self.start_known
        text = json.dumps(strict({"schema": 1, "attempts": [*self.prior, entry]}), allow_nan=False) + "\n"
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.written:  # a killed attempt's half-written ledger
            remove_leftovers(self.folder / GOODPUT)
        atomic_write(self.folder / GOODPUT, lambda f: f.write(text))
        self.written = True
        self._written_at = now


def read_entries(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The attempts' entries of a ``goodput.json`` (none when it is missing), and notes on what of it
    could not be read."""
    try:
        if os.path.getsize(path) > MAX_LEDGER_BYTES:
            return [], [f"{path.name}: larger than any ledger, not read"]
        raw = parse(path.read_bytes())
    except FileNotFoundError:
        return [], []
    except (OSError, ValueError) as exc:
        return [], [f"{path.name}: not read ({type(exc).__name__})"]
    attempts = raw.get("attempts") if isinstance(raw, dict) else None
    if not isinstance(attempts, list):
        return [], [f"{path.name}: holds no list of attempts"]
    entries = [a for a in attempts if isinstance(a, dict)]
    left_out = len(attempts) - len(entries)
    notes = [f"{path.name}: {left_out} entries are not objects"] if left_out else []
    return entries, notes


def read_ledger(folder: Path) -> tuple[list[tuple[AttemptAccount, int | None, int | None]], list[str]]:
    """The attempts of a rank folder's ledger with the bytes of ``windows.jsonl`` each covers, oldest
    first, and notes on entries left out."""
    entries, notes = read_entries(folder / GOODPUT)
    out: list[tuple[AttemptAccount, int | None, int | None]] = []
    for k, entry in enumerate(entries):
        try:
            account = AttemptAccount.from_dict(entry)
            start, end = _offset(entry, "windows_from"), _offset(entry, "windows_to")
        except ValueError as exc:
            notes.append(f"{GOODPUT}: attempt {k + 1} left out ({exc})")
            continue
        out.append((account, start, end))
    out.sort(key=lambda item: item[0].process_start)
    return out, notes


def _offset(entry: dict[str, Any], key: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ValueError(f"{key}: not a byte offset ({value!r})")
    return value


#: Bytes read at once from a windows file's uncovered part; lines longer than this are no window's.
_CHUNK = 1 << 20


def read_attempts(folder: Path, *, from_windows: bool = True) -> tuple[list[AttemptAccount], list[str]]:
    """A rank folder's attempts, oldest first, each with the windows its ledger entry did not hold
    added from ``windows.jsonl`` (an attempt's last windows before it was killed); and notes on what
    could not be read. ``from_windows``: a folder without a ledger (an older trainperf's) is read from
    its windows alone, which cannot say its start-up or its restart gaps."""
    ledger, notes = read_ledger(folder)
    path = folder / WINDOWS
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    if not ledger:
        attempts = _from_windows(path, size) if from_windows else []
        if attempts:
            notes.append("no goodput.json (an older trainperf's run directory): start-up and restart gaps "
                         "before each attempt's first window are not known")
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
            added += sum(_add(account, obj) for obj in _objects(path, start, stop))
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
            if len(rest) > _CHUNK:
                rest = b""
            for line in lines:
                if line.strip() and len(line) <= _CHUNK:
                    try:
                        yield parse(line)
                    except ValueError:  # not JSON, not UTF-8, or nested deeper than it reads
                        continue


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**62 else None


def _add(account: AttemptAccount, obj: Any) -> bool:
    """Count a window's line in ``account``; ``False`` when it is not a window's."""
    if not isinstance(obj, dict):
        return False
    iteration, n, window_s = _whole(obj.get("iteration")), _whole(obj.get("window_iterations")), num(
        obj.get("window_s"))
    if iteration is None or n is None or n < 1 or window_s is None or window_s < 0.0:
        return False
    extra = obj.get("extra")
    account.add_window(iteration, n, window_s, obj.get("warmup") is True, num(obj.get("timestamp")),
                       etl_total_ms=obj.get("etl_total_ms"), gc_total_ms=obj.get("gc_total_ms"),
                       compute_ms=obj.get("compute_ms"), other_ms=obj.get("other_ms"),
                       overhead_ms=obj.get("overhead_ms"), extra=extra if isinstance(extra, dict) else None)
    return True


def _from_windows(path: Path, size: int) -> list[AttemptAccount]:
    """Attempts made of windows alone: a new one where the process changes or the iterations start
    again lower; each starts where its first window started."""
    attempts: list[AttemptAccount] = []
    current: AttemptAccount | None = None
    for obj in _objects(path, 0, size):
        if not isinstance(obj, dict):
            continue
        iteration, n, stamp = _whole(obj.get("iteration")), _whole(obj.get("window_iterations")), num(
            obj.get("timestamp"))
        if iteration is None or n is None or n < 1 or stamp is None:
            continue
        pid = _whole(obj.get("pid")) or 0
        last = current.last_iteration if current is not None else None
        if current is None or pid != current.pid or (last is not None and iteration <= last):
            begun = stamp - (num(obj.get("window_s")) or 0.0) - (num(obj.get("overhead_ms")) or 0.0) / 1e3
            current = AttemptAccount(begun, started=begun, start_iteration=max(0, iteration - n), pid=pid)
            attempts.append(current)
        _add(current, obj)
    return attempts
