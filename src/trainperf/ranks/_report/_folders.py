"""A run directory's rank folders: which ``rank-<r>`` folders it holds, which folders named like one
are left out and why, and whether a path the report would write is one of the run's own files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .._layout import RANK_FILES
from ._read import writable

__all__: list[str] = []

#: The largest rank ``torch.distributed`` numbers (its ranks are C ``int``s).
MAX_RANK = 2**31 - 1
#: Folders named like a rank but left out, named in the report; the rest are counted.
MAX_IGNORED = 20
_RANK_DIR = re.compile(r"rank-([0-9]+)")  # ASCII digits: int() would read other scripts' digits too
NOT_A_NUMBER = "not rank-<number> (digits 0-9)"
NOT_A_FOLDER = "not a folder"
TOO_LARGE = f"beyond rank {MAX_RANK}, the largest torch.distributed numbers"


@dataclass
class RankFolders:
    """The rank folders of a run directory.

    Attributes:
        found: per rank, the folders that name it (``rank-1`` and ``rank-01``), in no order.
        ignored: ``(name, why)`` of the first :data:`MAX_IGNORED` entries, by name, that start with
            ``rank-`` but are no rank folder; ``ignored_total`` counts them all.
    """

    found: dict[int, list[Path]] = field(default_factory=dict)
    ignored: list[tuple[str, str]] = field(default_factory=list)
    ignored_total: int = 0

    def ignore(self, name: str, why: str) -> None:
        self.ignored_total += 1
        self.ignored.append((writable(name), why))
        if len(self.ignored) >= 4 * MAX_IGNORED:  # bounded for a folder of any number of entries
            self.ignored = sorted(self.ignored)[:MAX_IGNORED]

    def finish(self) -> None:
        self.ignored = sorted(self.ignored)[:MAX_IGNORED]


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # through a symbolic link too
    except OSError:
        return False


def rank_folders(run_dir: str | os.PathLike[str]) -> RankFolders:
    """Every entry of ``run_dir`` whose name starts with ``rank-``: a folder ``rank-<r>`` for a rank up
    to :data:`MAX_RANK` is found, anything else noted with why it is left out. Memory grows with the
    entries on disk only.

    Raises:
        FileNotFoundError: ``run_dir`` does not exist or is not a folder.
        OSError: it cannot be listed.
        ValueError: it holds no rank folder.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"run_dir {str(run_dir)!r} does not exist or is not a folder")
    folders = RankFolders()
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                name = entry.name
                if not name.startswith("rank-"):
                    continue
                match = _RANK_DIR.fullmatch(name)
                if match is None:
                    folders.ignore(name, NOT_A_NUMBER)
                elif not _is_folder(entry):
                    folders.ignore(name, NOT_A_FOLDER)
                elif int(match.group(1)) > MAX_RANK:  # a name holds at most 255 digits
                    folders.ignore(name, TOO_LARGE)
                else:
                    folders.found.setdefault(int(match.group(1)), []).append(root / name)
    except OSError as exc:
        raise OSError(f"cannot list run_dir {str(run_dir)!r}: {exc.strerror or exc}") from exc
    folders.finish()
    if not folders.found:
        left_out = "".join(f"; {name!r} left out: {why}" for name, why in folders.ignored[:3])
        raise ValueError(f"run_dir {str(run_dir)!r} holds no rank-<r> folder: not a trainperf run directory"
                         + left_out)
    return folders


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


class RunParts:
    """The run's own files and folders, found once, to tell whether a path the report would write is
    one of them: every rank folder (a second folder naming a rank too) with its links resolved, and
    the files the report reads in them, by what they are on disk (a link or a second hard link to a
    rank's file is that file)."""

    def __init__(self, folders: RankFolders) -> None:
        self._folders: dict[Path, int] = {}
        self._files: dict[tuple[int, int], str] = {}
        for rank, paths in sorted(folders.found.items(), reverse=True):  # the lowest rank is named
            for folder in paths:
                self._folders[Path(os.path.realpath(folder))] = rank
                for name in RANK_FILES:
                    same = _identity(folder / name)
                    if same is not None:
                        self._files[same] = f"rank {rank}'s {name}"

    def part(self, out: str | os.PathLike[str]) -> str | None:
        """What ``out`` is of the run, in words (``"is rank 0's windows.jsonl"``, ``"lies in rank 1's
        folder"``), or ``None`` when it is none of it."""
        target = Path(os.path.realpath(out))
        same = _identity(target)
        if same is not None and same in self._files:
            return f"is {self._files[same]}"
        if target in self._folders:
            return f"is rank {self._folders[target]}'s folder"
        inside = next((p for p in target.parents if p in self._folders), None)
        return None if inside is None else f"lies in rank {self._folders[inside]}'s folder"
