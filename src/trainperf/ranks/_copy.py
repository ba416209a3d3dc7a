"""A run directory as a mapping of relative paths to bytes, and back: for ranks whose folders are
not on a disk the caller can read, e.g. Spark's ``TorchDistributor``, where only rank 0's return
value comes back to the driver."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from ..base import atomic_write

__all__ = ["run_dir_files", "write_run_dir_files"]

_NAME = re.compile(r"rank-\d{1,7}/[A-Za-z0-9_.-]{1,100}")


def run_dir_files(run_dir: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every rank's files under ``run_dir``, keyed by their path relative to it (``"rank-1/windows.jsonl"``).

    Args:
        run_dir: a folder of ``rank-<r>`` folders (see ``docs/distributed.md``).

    Raises:
        FileNotFoundError: ``run_dir`` is missing.

    Example:
        >>> def train_fn(run_dir):  # doctest: +SKIP
        ...     ...  # train with PerformanceListener(..., run_dir=run_dir)
        ...     listener.close(); dist.barrier()
        ...     return run_dir_files(run_dir)
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"run_dir {str(run_dir)!r} is not a folder")
    files: dict[str, bytes] = {}
    for path in sorted(root.glob("rank-*/*")):
        name = path.relative_to(root).as_posix()
        if path.is_file() and _NAME.fullmatch(name) and not name.endswith(".part"):
            files[name] = path.read_bytes()
    return files


def write_run_dir_files(files: Mapping[str, bytes], run_dir: str | os.PathLike[str]) -> Path:
    """Write what :func:`run_dir_files` returned under ``run_dir`` (created when missing), for
    :func:`trainperf.build_report` or ``trainperf report``; returns the folder.

    Args:
        files: relative paths (``rank-<r>/<name>``) to contents.
        run_dir: the folder to write.

    Raises:
        ValueError: a path is not of the form ``rank-<r>/<name>``, or a content is not bytes.
    """
    for name, data in files.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name.split("/")[1] in (".", ".."):
            raise ValueError(f"files keys must be paths 'rank-<r>/<name>', got {name!r}")
        if not isinstance(data, (bytes, bytearray)):
            raise ValueError(f"files[{name!r}] must be bytes, got {type(data).__name__}")
    root = Path(run_dir)
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, _writer(bytes(data)), binary=True)
    return root


def _writer(data: bytes) -> Callable[[IO[bytes]], int]:
    return lambda f: f.write(data)
