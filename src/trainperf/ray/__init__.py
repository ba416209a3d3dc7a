"""Ray Train: what a worker hands to ``ray.train.report``, its Ray Data input timed, and what Ray Train's
controller makes of every worker's figures. In a worker, a listener (and the torch, Lightning and Trainer
adapters) works as under ``torchrun``: Ray Train sets up the process group and the ranks' environment,
and a relative ``run_dir`` is the run's folder on Ray Train's storage. ``ray`` is imported when
:class:`PerformanceCallback` is first used or :func:`report` called; nothing else in trainperf imports it."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..base import lazy_names as _lazy_names
from ._data import RAY_DATA_TIMERS, ShardBatches, batches
from ._report import hand_back, report, run_dir_of

if _TYPE_CHECKING:
    from ._callback import PerformanceCallback

__all__ = ["PerformanceCallback", "RAY_DATA_TIMERS", "ShardBatches", "batches", "hand_back", "report", "run_dir_of"]

if not _TYPE_CHECKING:  # a subclass of Ray's UserCallback: made when first asked for
    __getattr__, __dir__ = _lazy_names(__name__, {"PerformanceCallback": "._callback"})
