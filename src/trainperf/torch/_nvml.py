"""The GPU's utilisation and memory from NVML (``nvidia-ml-py``), read on report iterations only."""

from __future__ import annotations

from typing import Any

import torch

from .._hardware import Probe

__all__: list[str] = []

_MB = 1024.0 * 1024.0


class NvmlProbe:
    """NVML's utilisation of one GPU (percent of its last sample period, 1/6 s to 1 s, in which a
    kernel ran) and its memory in use by every process.

    Args:
        nvml: the ``pynvml`` module (tests pass a fake).
        handle: NVML's handle of the device.
    """

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle

    def __call__(self) -> dict[str, float | None]:
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
