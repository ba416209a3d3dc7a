"""Ray Train: what a worker hands to ``ray.train.report`` and what Ray Train's controller makes of every
worker's figures. In a worker, a listener (and the torch, Lightning and Trainer adapters) works as under
``torchrun``: Ray Train sets up the process group and the ranks' environment, and a relative ``run_dir``
is the run's folder on Ray Train's storage. Importing this module imports ``ray``; nothing else in
trainperf does."""

from ._callback import PerformanceCallback
from ._report import report, run_dir_of

__all__ = ["PerformanceCallback", "report", "run_dir_of"]
