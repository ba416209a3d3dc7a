"""The Lightning adapter: ``Trainer(callbacks=[PerformanceCallback(10)])``."""

from ._callback import PerformanceCallback

__all__ = ["PerformanceCallback"]
