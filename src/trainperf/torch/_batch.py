"""Batch size from whatever a model or loader is given, and a walk over the tensors in a batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["batch_size", "batch_tokens", "map_tensors", "pair_size"]


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


_NO_TOKENS = frozenset({tuple, list, torch.Tensor})


def batch_tokens(batch: Any) -> int | None:
    """The real tokens of a batch of token ids, read on the host without waiting for a device.

    A mapping (a tokenizer's ``BatchEncoding``, a collator's dict) with an ``attention_mask``: the
    mask's sum (padding left out); without one, the size of its ``input_ids``. ``None`` for anything
    else, and for a mask that is already on a device: summing it there and reading the sum would wait
    for the device (count such batches with the ``tokens=`` option).
    """
    if type(batch) in _NO_TOKENS or not isinstance(batch, Mapping):  # the common pairs at once
        return None
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        if mask.device.type != "cpu":
            return None
        return int(mask.count_nonzero())
    ids = batch.get("input_ids")
    if isinstance(ids, torch.Tensor):
        return ids.numel()
    return None


def batch_size(obj: Any, _depth: int = 0) -> int | None:
    """How many samples a batch holds; ``None`` when that cannot be known.

    * a tensor: its first dimension (``None`` for a 0-d tensor);
    * a mapping (``{"input_ids": ..., "labels": ...}``): the size its values agree on;
    * a tuple or list of tensors: their common first dimension when they are the fields of one
      batch (``(inputs, targets)``: first dimensions agree), or its length when they are the
      samples themselves (four or more whose first dimensions vary: a collate that returns a list of
      variable-length sequences; channels-first images of varying sizes); two or three tensors
      whose first dimensions disagree, or four or more of one shape, could be either, and give
      ``None``;
    * a tuple or list of mappings, strings or numbers: its length (one per sample);
    * a tuple or list of sequences (a detection-style ``tuple(zip(*batch))``): the size its parts
      agree on, each part read as above (a part of one item is one sample).
    """
    if isinstance(obj, torch.Tensor):
        return int(obj.shape[0]) if obj.dim() > 0 else None
    if _depth > 6:
        return None
    if type(obj) in _PAIRS and len(obj) == 2:  # the common (inputs, targets): answered at once
        first, second = obj
        if type(first) is _TENSOR and type(second) is _TENSOR:
            a, b = first.shape, second.shape
            if a and b and a[0] == b[0] and not (len(a) == 3 == len(b) and a[0] in _CHANNELS):
                return int(a[0])
    if isinstance(obj, Mapping):
        return _agreed([batch_size(v, _depth + 1) for v in obj.values()])
    if not isinstance(obj, (tuple, list)) or not obj:
        return None
    if len(obj) == 1:  # one item: a batch wrapped once (a forward's arguments, say), not one sample
        return batch_size(obj[0], _depth + 1)
    if all(isinstance(item, torch.Tensor) for item in obj):
        shapes = [tuple(item.shape) for item in obj]
        if any(not shape for shape in shapes):  # 0-d tensors: one number per sample
            return len(obj) if all(not shape for shape in shapes) else None
        firsts = {shape[0] for shape in shapes}
        if len(firsts) > 1:  # variable-length samples, or fields that disagree
            return len(obj) if len(obj) >= 4 else None
        if len(set(shapes)) > 1 and all(len(s) == 3 and s[0] in _CHANNELS for s in shapes):
            return len(obj)  # images of different sizes, channels first: one per sample
        if len(obj) <= 3 or len(set(shapes)) > 1:
            return int(shapes[0][0])  # the fields of one batch: (inputs, targets), a seq2seq tuple
        return None  # many tensors of one shape: fields of one batch, or equal-length samples
    if all(isinstance(item, (Mapping, str, bytes, int, float)) for item in obj):
        return len(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple is fields
        return _agreed([batch_size(item, _depth + 1) for item in obj])
    if all(isinstance(item, (tuple, list)) for item in obj):
        return _agreed([_samples_of(item, _depth + 1) for item in obj])
    return _agreed([batch_size(item, _depth + 1) for item in obj])


_PAIRS = (tuple, list)
_TENSOR = torch.Tensor

#: Channel counts of images (grey, RGB, RGBA): a list of ``(C, H, W)`` tensors of varying sizes
#: with one of these first is a list of images.
_CHANNELS = (1, 3, 4)


def _samples_of(part: Any, depth: int) -> int | None:
    """The samples in one part of a transposed batch: its length when it holds one item per sample
    (per-sample dicts, strings or numbers, or a single item: a part of a one-sample batch), else
    what :func:`batch_size` finds in it."""
    per_sample = (Mapping, str, bytes, int, float)
    if isinstance(part, (tuple, list)) and (
            len(part) == 1 or part and all(isinstance(item, per_sample) for item in part)):
        return len(part)
    return batch_size(part, depth)


def _agreed(sizes: list[int | None]) -> int | None:
    """The size every known one agrees on; ``None`` when none is known or two disagree."""
    known = {size for size in sizes if size is not None}
    return known.pop() if len(known) == 1 else None


def pair_size(batch: Any) -> int | None:
    """The rows of a tensor, or of an ``(inputs, targets)`` pair of tensors whose rows agree;
    ``None`` for anything else (then :func:`batch_size` decides)."""
    kind = type(batch)
    if kind is Tensor:
        shape = batch.shape
        return shape[0] if shape else None
    if (kind is tuple or kind is list) and len(batch) == 2:
        a, b = batch
        if type(a) is Tensor and type(b) is Tensor:
            sa, sb = a.shape, b.shape
            if sa and sb and sa[0] == sb[0]:
                return int(sa[0])
    return None
