"""The Hugging Face ``Trainer`` adapter (needs ``transformers``; nothing imports it unless used).

A plain ``accelerate`` loop needs no adapter: :func:`trainperf.torch.attach` times its base loader.
"""

from ._callback import PerformanceCallback

__all__ = ["PerformanceCallback"]
