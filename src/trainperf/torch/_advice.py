"""Fixes for an input-bound verdict that can be read off a DataLoader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["loader_advisor"]


def loader_advisor(loader: Any) -> Callable[[str], list[str]]:
    """An advisor that names what is wrong with ``loader``'s settings when training is input-bound."""

    def advise(kind: str) -> list[str]:
        if kind != "input-bound" or not isinstance(loader, torch.utils.data.DataLoader):
            return []
        tips: list[str] = []
        if loader.num_workers == 0:
            tips.append("DataLoader has num_workers=0: load in worker processes, e.g. num_workers=4")
        else:
            if not loader.persistent_workers:
                tips.append(
                    f"DataLoader has num_workers={loader.num_workers} without persistent_workers=True: "
                    "workers restart every epoch"
                )
            if loader.prefetch_factor is not None and loader.prefetch_factor < 2:
                tips.append(f"DataLoader has prefetch_factor={loader.prefetch_factor}: raise it to 2-4")
        if torch.cuda.is_available() and not loader.pin_memory:
            tips.append("DataLoader has pin_memory=False on a CUDA machine: set pin_memory=True")
        return tips

    return advise
