"""Batch size from whatever a model or loader is given, and a walk over the tensors in a batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["batch_size", "map_tensors"]


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``obj`` with ``fn`` applied to every tensor in it: tuples (named ones keep their type), lists
    and mappings (given back as dicts), nested; anything else is returned as it is."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    return _map(obj, fn)


def _map(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        items = [_map(item, fn) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_map(item, fn) for item in obj]
    if isinstance(obj, Mapping):
        return {key: _map(value, fn) for key, value in obj.items()}
    return obj


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
