"""Ray Train's controller side: every worker's figures at each report, compared as rank 0's link compares
them under ``torchrun``; a worker that fails named in the run directory."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import ray.exceptions
import ray.train

from ..base import local_run_folder
from ..ranks import LiveJudge, cluster_line, name_silent, rank_figures
from ..sinks.shared import LOGGER_NAME, ensure_visible
from ._report import KEY

__all__ = ["PerformanceCallback"]

_LOG = logging.getLogger(LOGGER_NAME)


def _run_folder(run_context: Any) -> str | None:
    """The run's folder on its storage, when that is a file system this process can write."""
    try:
        storage = run_context.run_config.storage_context
    except Exception:  # noqa: BLE001 - Ray's own objects: another version may keep them differently
        return None
    return local_run_folder(storage)


def went_silent(error: BaseException) -> bool:
    """Whether a worker's failure is that it stopped answering (its process or node died, or it missed
    Ray Train's health checks), rather than an error it raised (often only news of another rank's
    death: a collective whose peer is gone)."""
    return hasattr(error, "health_check_failure") or isinstance(
        error, (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError))


class PerformanceCallback(ray.train.UserCallback):
    """Give it to ``RunConfig(callbacks=[...])``: at each report round (every worker's
    :func:`trainperf.ray.report`), it compares the ranks' figures since the round before and logs the
    world line on the ``trainperf`` logger (``cluster at report N: ...``, naming the straggler and its
    cause). When workers fail, it logs which and why; a worker that stopped answering (its process or
    node died, or it missed Ray's health checks) is also named silent in the run directory (an event in
    rank 0's ``events.jsonl``, as rank 0 names a rank that stops answering), so that ``trainperf report``
    says which rank went silent and when it was last heard from. Ranks that raised an error of their
    own (the others' collectives fail when one rank dies) are logged, not named. Ray Train runs callbacks in its
    controller, an actor whose log lines reach the driver's console; the lines are also kept in
    :attr:`lines` there.

    Args:
        run_dir: the workers' ``run_dir`` (relative: in the run's folder on Ray Train's storage).
    """

    def __init__(self, run_dir: str | os.PathLike[str] = "trainperf") -> None:
        if not isinstance(run_dir, (str, os.PathLike)) or not os.fspath(run_dir):
            raise TypeError(f"run_dir must be a non-empty path, got {run_dir!r}")
        self.run_dir = os.fspath(run_dir)
        self.lines: list[str] = []
        self.rounds = 0
        self.failed: set[int] = set()
        self._judge = LiveJudge()

    def after_report(self, run_context: Any, metrics: Sequence[Mapping[str, Any]], checkpoint: Any) -> None:
        self.rounds += 1
        figures = []
        for position, values in enumerate(metrics):
            ours = values.get(KEY) if isinstance(values, Mapping) else None
            if not isinstance(ours, Mapping) or not isinstance(ours.get("figures"), Mapping):
                continue
            rank = ours.get("rank")
            found = rank_figures(rank if isinstance(rank, int) else position, ours["figures"])
            if found is not None:
                figures.append(found)
        if len(figures) < 2:
            return
        line = f"cluster at report {self.rounds}: {cluster_line(figures, self._judge.see(figures))}"
        self.lines.append(line)
        ensure_visible(_LOG)  # in the controller's process: its stderr reaches the driver's console
        _LOG.info("%s", line)

    def after_exception(self, run_context: Any, worker_exceptions: Mapping[int, BaseException]) -> None:
        folder = _run_folder(run_context)
        run_dir = self.run_dir if folder is None else os.path.join(folder, self.run_dir)
        for rank, error in sorted(worker_exceptions.items()):
            if rank in self.failed:  # said at an earlier poll
                continue
            self.failed.add(rank)
            message = str(error).strip().splitlines()
            why = f"its worker failed: {type(error).__name__}" + (f": {message[0][:200]}" if message else "")
            named = went_silent(error) and os.path.isabs(run_dir) and name_silent(run_dir, rank, why)
            line = f"rank {rank} {why}" + (f" (named silent in {run_dir})" if named else "")
            self.lines.append(line)
            ensure_visible(_LOG)
            _LOG.warning("%s", line)
