"""The job's goodput read back from a run directory: each rank's ``goodput.json`` (every attempt's
account, kept current as it trained), and only the windows its ledger did not hold yet (a killed
attempt's last ones). A folder without a ledger (written by an older trainperf) is read from its
windows alone, which cannot say its start-up or restart gaps: that is noted."""

from __future__ import annotations

import os

from ...records import AttemptAccount, GoodputAccount, account_job
from .._ledger import read_attempts
from ._folders import RankFolders, rank_folders

__all__ = ["read_goodput"]


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
        attempts, rank_notes = read_attempts(paths[0])
        notes += [f"rank {rank}: {note}" for note in rank_notes[:5]]
        if attempts:
            ranks[rank] = attempts
    if not ranks:
        raise ValueError(f"run_dir {str(run_dir)!r}: no rank wrote a window or a goodput.json")
    return account_job(ranks, notes=notes[:50])
