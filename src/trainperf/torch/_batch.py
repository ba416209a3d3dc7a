"""Batch size from whatever a model or loader is given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["batch_size"]


def batch_size(obj: Any, _depth: int = 0) -> int | None:
    """Leading dimension of the first tensor found in ``obj`` (tuples, lists, dicts, nested).

    Returns ``None`` when there is no tensor with at least one dimension.
    """
    if isinstance(obj, torch.Tensor):
        return int(obj.shape[0]) if obj.dim() > 0 else None
    if _depth > 6:
        return None
    if isinstance(obj, (tuple, list)):
        for item in obj:
            found = batch_size(item, _depth + 1)
            if found is not None:
                return found
    elif isinstance(obj, Mapping):
        for item in obj.values():
            found = batch_size(item, _depth + 1)
            if found is not None:
                return found
    return None
