"""Fixes for an input-bound verdict that can be read off a DataLoader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..records import dataloader_tips

__all__: list[str] = []


def loader_advisor(loader: Any, on_cuda: Callable[[], bool]) -> Callable[[str], list[str]]:
    """An advisor that names what is wrong with ``loader``'s settings when training is input-bound.

    Args:
        loader: the training loader (anything else than a DataLoader gets no advice).
        on_cuda: whether the model trains on a CUDA device (asked when advising): ``pin_memory`` is
            advised only there.
    """

    settings = loader_settings(loader)

    def advise(kind: str) -> list[str]:
        if kind != "input-bound" or settings is None:
            return []
        return dataloader_tips(**settings, cuda=on_cuda())

    return advise


def loader_settings(loader: Any) -> dict[str, Any] | None:
    """The settings of a DataLoader that the advice reads (``None`` for anything else), copied: the
    advice outlives the loader (a summary printed after training)."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return None
    return {
        "num_workers": loader.num_workers,
        "persistent_workers": loader.persistent_workers,
        "prefetch_factor": loader.prefetch_factor,
        "pin_memory": loader.pin_memory,
    }


def worker_pids(iterator: Any) -> frozenset[int]:
    """The process ids of a DataLoader iterator's worker processes (none without workers)."""
    workers = getattr(iterator, "_workers", None) or ()
    return frozenset(pid for w in workers if isinstance(pid := getattr(w, "pid", None), int))


def on_cuda_of(listener: Any) -> Callable[[], bool]:
    """Whether ``listener``'s model runs on CUDA (its records carry a device index only there)."""
    return lambda: listener.device is not None
