"""Files that a crash never leaves half-readable: whole-or-nothing writes (a temporary file in the
same folder, then a rename), and appends that start on a line of their own."""

from __future__ import annotations

import glob
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal, overload

__all__: list[str] = []


_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


def _create_beside(target: Path) -> tuple[int, str]:
    """A new, empty file in ``target``'s folder, named after it, open for writing. Created with mode
    ``0o666``, which the kernel lessens by the umask as for a plain ``open(path, "w")``: the process
    umask is never read or changed (changing it, even for a moment, would give a file another thread
    creates then the wrong permissions)."""
    for _ in range(100):
        tmp = os.path.join(target.parent, f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def remove_leftovers(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files that writes of ``path`` left behind when their process was killed
    between creating and renaming them (``.<name>.<random>.tmp`` beside it); the ones removed. A file
    that cannot be removed is left, silently: it is only clutter."""
    target = Path(path)
    removed: list[Path] = []
    try:
        leftovers = list(target.parent.glob(f".{glob.escape(target.name)}.*.tmp"))
    except OSError:
        return removed
    for leftover in leftovers:
        try:
            leftover.unlink()
            removed.append(leftover)
        except OSError:
            pass
    return removed


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
    fd, tmp = _create_beside(target)
    try:
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


def ends_mid_line(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` exists, is not empty and does not end with a line end (the
    process that wrote it was killed mid-line, or the disk took only part of its last write)."""
    try:
        with open(path, "rb") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


def open_to_append(path: str | os.PathLike[str], *, newline: str | None = None) -> IO[str]:
    """``path`` opened to append UTF-8 text, created when missing. When it ends mid-line, a line end
    is written first: the next line starts on a line of its own and never glues to the cut one,
    which stays as it was (a reader skips it as it would any cut line).

    Args:
        path: the file.
        newline: as for :func:`open` (``""`` for the :mod:`csv` module).
    """
    f = open(path, "a", encoding="utf-8", newline=newline)  # noqa: SIM115 - returned open
    try:
        if ends_mid_line(path):
            f.write("\n")
            f.flush()
    except BaseException:
        f.close()
        raise
    return f
