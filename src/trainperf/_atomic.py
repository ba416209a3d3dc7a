"""Whole-or-nothing file writes: a temporary file in the same folder, then a rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal, overload

__all__: list[str] = []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@overload
def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], Any], *, binary: Literal[True],
                 fsync: bool = ...) -> None: ...
@overload
def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[str]], Any], *, binary: Literal[False] = ...,
                 fsync: bool = ...) -> None: ...
def atomic_write(path: str | os.PathLike[str], write: Callable[[Any], Any], *, binary: bool = False,
                 fsync: bool = False) -> None:
    """Call ``write(file)`` on a temporary file beside ``path``, then rename it over ``path``.

    A reader or a crash sees the old file or the new one, never half of one. The new file gets the
    permissions a plain ``open(path, "w")`` would give it (``0o666`` less the umask), not the
    ``0o600`` of a temporary file. On failure the temporary file is removed and the error raised.

    Args:
        path: the file to write.
        write: writes the whole content to the open file it is given.
        binary: open the temporary file in binary mode (else UTF-8 text, newlines as written).
        fsync: put the data on disk before the rename (survives power loss).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")) as f:
            write(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
