"""Where the live memory is at an out-of-memory error: the largest allocation sites of a CUDA
allocator snapshot, the largest live CPU tensors, tracemalloc's top lines, the process's memory, and
the one line that says them. Plain functions of what they are given, or of what ``gc`` holds."""

from __future__ import annotations

import gc
import linecache
import os
import tracemalloc
from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = ["cpu_tensor_groups", "cuda_sites", "process_memory", "said_sites", "tracemalloc_sites"]

#: How many sites or groups the evidence keeps, largest first.
TOP = 10

#: Frames in these folders are torch's or trainperf's own: a site is the first frame outside them.
_OWN_FOLDERS = tuple(os.path.dirname(os.path.abspath(m.__file__ or "")) + os.sep
                     for m in (torch, __import__("trainperf")))


def _user_frame(frames: Iterable[Mapping[str, Any]], own: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The innermost frame (a snapshot lists the innermost first) outside ``own``'s folders."""
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if filename and not filename.startswith(own) and not filename.startswith("<"):
            return frame
    return None


def cuda_sites(snapshot: Mapping[str, Any], own: tuple[str, ...] = _OWN_FOLDERS) -> list[dict[str, Any]]:
    """The snapshot's live blocks (``active_allocated``) grouped by the first frame of their stack outside
    torch and trainperf, largest first: ``site`` (``file:line``), ``function``, ``code`` (the line's text),
    ``bytes``, ``blocks`` and ``share`` of the live bytes. Blocks without a stack (the history was off
    when they were allocated) are one group, ``site`` ``None``."""
    groups: dict[tuple[str, int, str] | None, list[int]] = {}
    for segment in snapshot.get("segments", ()):
        for block in segment.get("blocks", ()):
            if block.get("state") != "active_allocated":
                continue
            frame = _user_frame(block.get("frames") or (), own)
            key = None if frame is None else (str(frame["filename"]), int(frame.get("line", 0)),
                                               str(frame.get("name", "")))
            entry = groups.setdefault(key, [0, 0])
            entry[0] += int(block.get("size", 0))
            entry[1] += 1
    total = sum(size for size, _ in groups.values())
    sites = []
    for key, (size, count) in sorted(groups.items(), key=lambda item: -item[1][0])[:TOP]:
        site = code = function = None
        if key is not None:
            filename, line, function = key
            site = f"{filename}:{line}"
            code = linecache.getline(filename, line).strip() or None
        sites.append({"site": site, "function": function, "code": code, "bytes": size, "blocks": count,
                      "share": size / total if total else 0.0})
    return sites


def cpu_tensor_groups(objects: Iterable[object] | None = None) -> list[dict[str, Any]]:
    """The live CPU tensors ``gc`` tracks (or ``objects``), grouped by shape, dtype and ``grad_fn``,
    largest first: ``shape``, ``dtype``, ``grad_fn``, ``bytes`` (of their storages, each counted once,
    for the first tensor found on it), ``tensors`` and ``share`` of the bytes found."""
    seen: set[int] = set()
    groups: dict[tuple[tuple[int, ...], str, str | None], list[int]] = {}
    for obj in gc.get_objects() if objects is None else objects:
        if not isinstance(obj, torch.Tensor):
            continue
        try:
            if obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
            pointer, size = storage.data_ptr(), storage.nbytes()
            grad_fn = obj.grad_fn
            key = (tuple(obj.shape), str(obj.dtype).removeprefix("torch."),
                   None if grad_fn is None else type(grad_fn).__name__)
        except Exception:  # noqa: BLE001 - a sparse or odd tensor has no plain storage: left out
            continue
        entry = groups.setdefault(key, [0, 0])
        entry[1] += 1
        if pointer and pointer not in seen:
            seen.add(pointer)
            entry[0] += size
    total = sum(size for size, _ in groups.values())
    return [{"shape": list(shape), "dtype": dtype, "grad_fn": grad_fn, "bytes": size, "tensors": count,
             "share": size / total if total else 0.0}
            for (shape, dtype, grad_fn), (size, count) in sorted(groups.items(), key=lambda item: -item[1][0])[:TOP]]


def tracemalloc_sites() -> list[dict[str, Any]] | None:
    """tracemalloc's top lines by live bytes when it is tracing, else ``None``."""
    if not tracemalloc.is_tracing():
        return None
    stats = tracemalloc.take_snapshot().statistics("lineno")[:TOP]
    return [{"site": f"{s.traceback[0].filename}:{s.traceback[0].lineno}", "bytes": s.size, "count": s.count}
            for s in stats]


def process_memory() -> dict[str, int | None]:
    """The process's resident memory now (``rss_bytes``, needs ``psutil``) and its peak (``peak_rss_bytes``)."""
    rss = peak = None
    try:
        import psutil

        rss = int(psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001 - psutil is optional
        pass
    try:
        import resource

        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        peak *= 1 if os.uname().sysname == "Darwin" else 1024  # bytes there, KiB on Linux
    except Exception:  # noqa: BLE001 - not on Windows
        pass
    return {"rss_bytes": rss, "peak_rss_bytes": peak}


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def said_sites(sites: list[dict[str, Any]], *, cuda: bool, most: int = 3) -> str:
    """The largest ``sites`` (of :func:`cuda_sites`, or :func:`cpu_tensor_groups` when not ``cuda``) in
    words, for the line an out-of-memory error leaves: ``61% of live memory (1.2 GB) allocated at
    model.py:88 (scores = q @ k, 24 blocks), 22% (...) at train.py:40 (3 blocks)``."""
    if not sites:
        return "no live allocation found"
    said = []
    for n, site in enumerate(sites[:most]):
        share = f"{site['share']:.0%}" + ("" if n else " of live memory" if cuda else " of live CPU tensors")
        share += f" ({_size(site['bytes'])})"
        if not cuda:
            grad = f" ({site['grad_fn']})" if site["grad_fn"] else ""
            said.append(f"{share} in {site['tensors']} {site['dtype']}{site['shape']} tensor(s){grad}")
        elif site["site"] is None:
            said.append(f"{share} in {site['blocks']} blocks allocated with no stack recorded")
        else:
            code = f"{site['code'][:40]}, " if site["code"] else ""
            where = os.path.basename(site["site"])
            said.append(f"{share}{' allocated' if not n else ''} at {where} ({code}{site['blocks']} blocks)")
    return ", ".join(said)
