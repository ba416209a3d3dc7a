"""The job's goodput read back from a run directory: each rank's ``goodput.json`` (every attempt's
account, kept current as it trained), and only the windows its ledger did not hold yet (a killed
attempt's last ones). A folder without a ledger (written by an older trainperf) is read from its
windows alone, which cannot say its start-up or restart gaps: that is noted."""

from __future__ import annotations

import math
import os
from typing import Any

from ...records import AttemptAccount, GoodputAccount, account_job
from .._ledger import read_attempts
from ._folders import RankFolders, rank_folders

__all__ = ["read_goodput", "report_goodput"]


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
