"""Fixes for an input-bound verdict that can be read off a DataLoader."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .._advice import dataloader_tips

__all__: list[str] = []


def loader_advisor(loader: Any) -> Callable[[str], list[str]]:
    """An advisor that names what is wrong with ``loader``'s settings when training is input-bound."""

    def advise(kind: str) -> list[str]:
        if kind != "input-bound" or not isinstance(loader, torch.utils.data.DataLoader):
            return []
        return dataloader_tips(
            num_workers=loader.num_workers,
            persistent_workers=loader.persistent_workers,
            prefetch_factor=loader.prefetch_factor,
            pin_memory=loader.pin_memory,
            cuda=torch.cuda.is_available(),
        )

    return advise
