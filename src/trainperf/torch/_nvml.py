"""The GPU's utilisation and memory from NVML (``nvidia-ml-py``), read on report iterations only."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..core import Probe, Throttled

__all__: list[str] = []

_MB = 1024.0 * 1024.0


class NvmlProbe:
    """NVML's utilisation of one GPU (percent of its last sample period, 1/6 s to 1 s, in which a
    kernel ran) and its memory in use by every process.

    NVML's utilisation is itself a share of a sample period, so reading it more often than every
    ``min_interval_s`` gives nothing new: a report sooner than that repeats the last reading (the
    two driver calls cost about 10 us on an H100).

    Args:
        nvml: the ``pynvml`` module (tests pass a fake).
        handle: NVML's handle of the device.
        min_interval_s: seconds between two readings.
        clock: monotonic clock, injectable for tests.
    """

    def __init__(
        self, nvml: Any, handle: Any, *, min_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._throttled = Throttled(self._read, min_interval_s=min_interval_s, clock=clock)
        self._nvml = nvml
        self._handle = handle

    def __call__(self) -> Mapping[str, float | None]:
        return self._throttled()

    def _read(self) -> dict[str, float | None]:
        nvml, handle = self._nvml, self._handle
        return {
            "gpu_utilization_pct": float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "gpu_memory_used_mb": nvml.nvmlDeviceGetMemoryInfo(handle).used / _MB,
        }


def nvml_probe(device: torch.device, nvml: Any = None) -> Probe | None:
    """The NVML probe for ``device``, or ``None`` when ``nvidia-ml-py`` or the driver's NVML is missing.

    The device is found by its UUID, so ``CUDA_VISIBLE_DEVICES`` cannot make it the wrong GPU.

    Args:
        device: the CUDA device.
        nvml: the ``pynvml`` module; imported when ``None``.
    """
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", ""))
        if uuid:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no NVML: the fields stay None
        return None
    return NvmlProbe(nvml, handle)
