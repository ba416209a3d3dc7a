"""Ray Train's controller side: every worker's figures at each report, compared as rank 0's link compares
them under ``torchrun``."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import ray.train

from ..ranks import LiveJudge, cluster_line, rank_figures
from ..sinks.shared import LOGGER_NAME, ensure_visible
from ._report import KEY

__all__ = ["PerformanceCallback"]

_LOG = logging.getLogger(LOGGER_NAME)


class PerformanceCallback(ray.train.UserCallback):
    """Give it to ``RunConfig(callbacks=[...])``: at each report round (every worker's
    :func:`trainperf.ray.report`), it compares the ranks' figures since the round before and logs the
    world line on the ``trainperf`` logger (``cluster at report N: ...``, naming the straggler and its
    cause); when workers fail, it logs which. Ray Train runs callbacks in its controller, an actor
    whose log lines reach the driver's console; the lines are also kept in :attr:`lines` there.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.rounds = 0
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
        for rank, error in sorted(worker_exceptions.items()):
            line = f"rank {rank} failed: {type(error).__name__}: {error}"
            self.lines.append(line)
            ensure_visible(_LOG)
            _LOG.warning("%s", line)
