"""An out-of-memory error leaves its evidence: one folder per error, with the CUDA allocator's snapshot
(``snapshot.pickle``, for https://pytorch.org/memory_viz) and ``evidence.json`` (the exception, the last
record, the figures at the error, the largest live allocation sites), and one line that says where.

Two ways in. On CUDA the allocator calls an observer at the moment an allocation fails, before it
raises: the snapshot is taken and the folder written there, whoever catches the error afterwards.
An adapter that sees a ``MemoryError`` or ``torch.OutOfMemoryError`` go by hands it to
:meth:`OomWatch.saw`: it completes that folder with the exception itself, or writes one of its own
(on the CPU: the largest live tensors, tracemalloc's top lines, the process's memory). An error
nobody caught reaches a chained ``sys.excepthook``, which does the same. Writing never replaces the
error: a failure is said, and the error goes on unchanged. Nothing runs per iteration.
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
import sys
import threading
import time
import traceback
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch

from ..base import atomic_write
from ..core import PerformanceListener
from ..sinks.shared import LOGGER_NAME
from ._memory_history import HISTORY_ENTRIES, MemoryHistory
from ._oom_sites import cpu_tensor_groups, cuda_sites, process_memory, said_sites, tracemalloc_sites

__all__ = ["OOM_ERRORS", "OOM_FOLDER", "OomWatch", "saw_oom"]

#: The errors that leave evidence.
OOM_ERRORS: tuple[type[BaseException], ...] = (MemoryError, torch.OutOfMemoryError)

#: Where the evidence goes without a run directory: this folder of the working directory at set-up.
OOM_FOLDER = "trainperf-oom"

#: The attribute that marks an error whose evidence is written (each error leaves one folder).
_MARK = "_trainperf_oom_evidence"

_log = logging.getLogger(LOGGER_NAME)
_lock = threading.Lock()
_watches: list[OomWatch] = []  # the trainings being watched, newest last
_observing = False  # the allocator's observer is attached (once per process: torch cannot detach it)
_hooked: tuple[Any, Any] | None = None  # (the excepthook before ours, ours) while trainings are watched


def _attach_observer() -> None:
    global _observing
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is not None and not _observing:
        attach(_observer)
        _observing = True


def _observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    """The allocator's observer: the newest CUDA watch writes the evidence (a failure is said there)."""
    with _lock:
        watch = next((w for w in reversed(_watches) if w.cuda), None)
    if watch is not None:
        watch.on_cuda_oom(device, alloc, device_allocated, device_free)


def _excepthook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
    """The fallback for an error no adapter saw: its evidence, then the hook that was there before."""
    before = _hooked[0] if _hooked is not None else sys.__excepthook__
    try:
        if isinstance(error, OOM_ERRORS):
            with _lock:
                watch = _watches[-1] if _watches else None
            if watch is not None:
                watch.saw(error)
    finally:
        before(kind, error, tb)


def saw_oom(listeners: Collection[PerformanceListener], error: BaseException) -> None:
    """``error`` went by a loop of ``listeners`` (``timed``'s, ``fit``'s): the watch of the first of them
    that has one writes its evidence, if it is an out-of-memory error."""
    if not isinstance(error, OOM_ERRORS):
        return
    with _lock:
        watch = next((w for w in _watches if w.listener in listeners), None)
    if watch is not None:
        watch.saw(error)


class OomWatch:
    """One training's watch for out-of-memory errors, from :meth:`start` to :meth:`stop`.

    Args:
        listener: the training's listener: its run directory's rank folder holds the evidence (else
            :data:`OOM_FOLDER`), its iteration and last record go in.
        device: the model's device (``None``: unknown, watched as the CPU).
        history: the CUDA allocator's history for the training, on CUDA.
    """

    def __init__(self, listener: PerformanceListener, device: torch.device | None,
                 history: MemoryHistory | None = None) -> None:
        self.listener = listener
        self.device = device
        self.cuda = getattr(device, "type", None) == "cuda"
        self.history = history
        self._sink: Any = None
        if getattr(listener.options, "run_dir", None) is not None:
            from ..ranks import RunDirSink

            self._sink = next((s for s in listener.sinks if isinstance(s, RunDirSink)), None)
        self._root = Path(OOM_FOLDER).absolute()  # the working directory at set-up
        # the observer's folder and evidence (no folder: its write failed), until the error is seen
        self._pending: tuple[Path | None, dict[str, Any]] | None = None

    @property
    def root(self) -> Path:
        """The folder that holds this training's evidence folders."""
        return Path(self._sink.path) if self._sink is not None else self._root

    def start(self) -> None:
        """Watch from now on (the history started as asked, the observer attached on CUDA)."""
        global _hooked
        if self.history is not None:
            self.history.start()
        with _lock:
            if self.cuda:
                _attach_observer()
            _watches.append(self)
            if _hooked is None:
                _hooked = (sys.excepthook, _excepthook)
                sys.excepthook = _excepthook

    def stop(self) -> None:
        """Stop watching (idempotent); the history trainperf started stops, the excepthook goes with the
        last watch (unless another hook replaced it since: it then calls ours, which passes it on)."""
        global _hooked
        with _lock:
            if self in _watches:
                _watches.remove(self)
            if not _watches and _hooked is not None:
                if sys.excepthook is _hooked[1]:
                    sys.excepthook = _hooked[0]
                    _hooked = None
        if self.history is not None:
            self.history.stop()

    # -- the two ways in ------------------------------------------------------------------------
    def on_cuda_oom(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        """The allocator could not allocate ``alloc`` bytes on ``device``: write the snapshot and the evidence
        now (the Python stack is the allocation's), completed with the error when an adapter sees it."""
        try:  # nothing may escape into the allocator
            stack = "".join(traceback.format_stack()[:-2])
            at_oom = {"device": device, "requested_bytes": alloc, "device_allocated_bytes": device_allocated,
                      "device_free_bytes": device_free}
            exception = {"type": "torch.OutOfMemoryError", "raised": False, "traceback": stack,
                         "message": f"CUDA out of memory: {alloc} bytes requested on device {device} "
                                    "(the allocator's observer, before the error is raised)"}
            self._pending = self._write(exception, at_oom)
        except Exception as failure:  # noqa: BLE001 - said; the allocator raises its error as ever
            _log.warning("trainperf: out of memory on device %s; its evidence could not be gathered: %r", device,
                         failure)

    def saw(self, error: BaseException) -> None:
        """``error`` went by an adapter: an out-of-memory error leaves its evidence, once. The caller raises
        it on, unchanged."""
        if not isinstance(error, OOM_ERRORS) or getattr(error, _MARK, False):
            return
        try:
            setattr(error, _MARK, True)
        except Exception:  # noqa: BLE001 - an error that takes no attribute may be written twice
            pass
        pending, self._pending = self._pending, None
        try:
            exception = {"type": f"{type(error).__module__}.{type(error).__qualname__}", "raised": True,
                         "message": str(error), "traceback": "".join(traceback.format_exception(error))}
        except Exception as failure:  # noqa: BLE001 - an error whose text cannot be made: said by its type
            exception = {"type": type(error).__qualname__, "raised": True, "message": None,
                         "traceback": None, "unreadable": repr(failure)}
        if pending is not None and isinstance(error, torch.OutOfMemoryError):
            folder, evidence = pending
            if folder is None:  # the observer's write failed, and said so: not tried again
                return
            evidence["exception"] = {**exception, "at_oom": evidence["exception"]["traceback"]}
            try:
                _write_json(folder / "evidence.json", evidence)
            except Exception as failure:  # noqa: BLE001 - said; the error goes on
                _log.warning("trainperf: the evidence in %s/ could not be completed with the error: %r",
                             folder, failure)
            return
        self._write(exception, None)

    # -- writing -----------------------------------------------------------------------------------
    def _write(self, exception: dict[str, Any], at_oom: dict[str, Any] | None) -> tuple[Path | None, dict[str, Any]]:
        """Gather and write one folder of evidence; the folder (``None`` on a failure, said) and what it holds."""
        iteration = self.listener.iteration
        root = None
        try:
            root = self.root
            snapshot, failed = _snapshot() if self.cuda else (None, None)
            evidence = self._gather(iteration, exception, at_oom, snapshot)
            if failed is not None:
                evidence["snapshot_error"] = failed
            folder = _new_folder(root, iteration)
            if snapshot is not None:
                atomic_write(folder / "snapshot.pickle", lambda f: pickle.dump(snapshot, f, protocol=4), binary=True)
            _write_json(folder / "evidence.json", evidence)
        except Exception as failure:  # noqa: BLE001 - said; the error goes on
            _log.warning("trainperf: out of memory at iteration %d; its evidence could not be written under %s: %r",
                         iteration, root, failure)
            return None, {}
        _log.warning("trainperf: out of memory at iteration %d; evidence in %s%s: %s", iteration, folder, os.sep,
                     said_sites(evidence["largest_sites"], cuda=self.cuda))
        return folder, evidence

    def _gather(self, iteration: int, exception: dict[str, Any], at_oom: dict[str, Any] | None,
                snapshot: dict[str, Any] | None) -> dict[str, Any]:
        listener = self.listener
        records = listener.history.records
        evidence: dict[str, Any] = {
            "kind": "cuda" if self.cuda else "cpu", "iteration": iteration, "rank": listener.rank,
            "host": listener.host, "pid": os.getpid(), "time": listener.wall_clock(), "exception": exception,
            "last_record": records[-1].to_dict() if records else None,
        }
        if self.cuda:
            evidence["at_oom"] = at_oom or {"device": getattr(self.device, "index", None), "requested_bytes": None,
                                            "device_allocated_bytes": None, "device_free_bytes": None}
            evidence["history"] = self._history()
            evidence["largest_sites"] = cuda_sites(snapshot) if snapshot is not None else []
            evidence["snapshot"] = "snapshot.pickle" if snapshot is not None else None
        else:
            evidence["at_oom"] = process_memory()
            evidence["history"] = {"mode": listener.options.memory_history, "recorded": False, "since": None,
                                   "note": "the CUDA allocator's history: none on the CPU"}
            evidence["largest_sites"] = cpu_tensor_groups()
            evidence["tracemalloc"] = tracemalloc_sites()
        return evidence

    def _history(self) -> dict[str, Any]:
        history = self.history
        if history is None:
            return {"mode": self.listener.options.memory_history, "recorded": False, "since": None}
        since = None if history.since is None else {"time": history.since[0], "iteration": history.since[1]}
        return {"mode": history.mode, "recorded": history.recorded, "since": since, "theirs": history.theirs,
                "max_entries": HISTORY_ENTRIES}


def _snapshot() -> tuple[dict[str, Any] | None, str | None]:
    """The allocator's snapshot (``None`` where torch has no CUDA), and why there is none when taking it
    failed: the evidence is written without it."""
    if getattr(torch._C, "_cuda_memorySnapshot", None) is None:
        return None, "this torch has no CUDA allocator snapshot"
    memory: Any = torch.cuda.memory
    try:
        snapshot: dict[str, Any] = memory._snapshot()
    except Exception as failure:  # noqa: BLE001 - the rest of the evidence still helps
        return None, repr(failure)
    return snapshot, None


def _new_folder(root: Path, iteration: int) -> Path:
    """A new folder under ``root`` named after the iteration, the process and the time: never one
    that exists (created here, exclusively)."""
    root.mkdir(parents=True, exist_ok=True)
    base = f"oom-{iteration}-{os.getpid()}-{time.strftime('%Y%m%dT%H%M%S')}"
    for n in range(1000):
        folder = root / (base if n == 0 else f"{base}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"no free folder name for {base} under {root}")


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as ``None``: strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _write_json(path: Path, evidence: dict[str, Any]) -> None:
    text = json.dumps(_finite(evidence), indent=1, default=str, allow_nan=False)
    atomic_write(path, lambda f: f.write(text + "\n"))

