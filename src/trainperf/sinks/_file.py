"""What the sinks that own a file share: the path check, how a file an earlier run left is taken up,
``close()`` and the context manager."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

__all__: list[str] = []


class FileSink:
    """A sink that owns the file at ``path``.

    Every file sink treats a file an earlier run left the same way: with ``append=True`` (the default)
    it keeps what the file holds and adds to it, so a run restarted after a crash or a kill keeps the
    earlier attempt's records; when the file ends mid-line (the writer was killed mid-write), the first
    new line starts on a line of its own. ``append=False`` starts the file afresh.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {path!r}")
        self.path = Path(path)
        if not self.path.parent.exists():
            raise FileNotFoundError(f"path {str(self.path)!r}: folder {str(self.path.parent)!r} does not exist")
        if self.path.is_dir():
            raise IsADirectoryError(f"path {str(self.path)!r} is a folder; give a file's path")
        self._file: IO[str] | None = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"
