"""Batch size from whatever a model or loader is given, and a walk over the tensors in a batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch
from torch import Tensor

__all__ = ["IGNORE_INDEX", "NOT_COUNTED", "TokenCounts", "batch_size", "batch_token_counts", "batch_tokens",
           "map_tensors", "pair_size"]


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


#: The label that PyTorch's ``cross_entropy`` (and every Hugging Face model's loss) leaves out: padding
#: and prompt tokens that no loss is taken on.
IGNORE_INDEX = -100


class TokenCounts(NamedTuple):
    """The tokens of one batch, ``None`` where they cannot be read without waiting for a device.

    Attributes:
        padded: every position of ``input_ids``, padding included: what the model computes.
        real: the positions the attention mask keeps (all of them without a mask).
        loss: the labels other than :data:`IGNORE_INDEX`, as the batch holds them (a causal LM that
            shifts its labels inside the model takes its loss on up to one fewer per sequence; the
            Hugging Face Trainer's own ``num_items_in_batch`` counts them unshifted, as here).
    """

    padded: int | None
    real: int | None
    loss: int | None


#: A batch whose tokens are not known.
NOT_COUNTED = TokenCounts(None, None, None)


def batch_token_counts(batch: Any) -> TokenCounts:
    """The padded, real and loss tokens of a batch of token ids, never waiting for a device.

    A mapping (a tokenizer's ``BatchEncoding``, a collator's dict), alone or as the inputs of an
    ``(inputs, targets)`` pair whose targets are the labels: padded tokens are the size of its
    ``input_ids`` (its shape: known wherever the tensor is), real tokens the attention mask's nonzero
    count (without a mask, every position), loss tokens its ``labels`` other than -100. A mask or
    labels already on a device are not counted (``None``): reading a count there would wait for the
    device. :data:`NOT_COUNTED` for anything else.
    """
    kind = type(batch)
    if kind is tuple or kind is list:  # the common (tensor, tensor) pair answered at once
        if len(batch) != 2 or type(batch[0]) is Tensor or not isinstance(batch[0], Mapping):
            return NOT_COUNTED
        counts = batch_token_counts(batch[0])  # ``(inputs, targets)``: the targets are the labels
        targets = batch[1]
        if counts.loss is None and isinstance(targets, torch.Tensor) and counts is not NOT_COUNTED:
            counts = counts._replace(loss=_loss_tokens(targets))
        return counts
    if kind is Tensor or not isinstance(batch, Mapping):
        return NOT_COUNTED
    ids = batch.get("input_ids")
    mask = batch.get("attention_mask")
    labels = batch.get("labels")
    padded = ids.numel() if isinstance(ids, torch.Tensor) else None
    real: int | None = None
    if isinstance(mask, torch.Tensor):
        if padded is None:
            padded = mask.numel()
        if mask.is_cpu:
            real = int(mask.count_nonzero())
    else:
        real = padded
    loss = _loss_tokens(labels) if isinstance(labels, torch.Tensor) else None
    if padded is None and real is None and loss is None:
        return NOT_COUNTED
    return TokenCounts(padded, real, loss)


def _loss_tokens(labels: torch.Tensor) -> int | None:
    """Labels other than -100, when they are class ids on the host."""
    if not labels.is_cpu or labels.is_floating_point():
        return None
    return int(torch.count_nonzero(labels.ne(IGNORE_INDEX)))


def batch_tokens(batch: Any) -> int | None:
    """The real tokens of a batch of token ids, read on the host without waiting for a device.

    A mapping (a tokenizer's ``BatchEncoding``, a collator's dict) with an ``attention_mask``: the
    mask's sum (padding left out); without one, the size of its ``input_ids``. ``None`` for anything
    else, and for a mask that is already on a device: summing it there and reading the sum would wait
    for the device (count such batches with the ``tokens=`` option). See :func:`batch_token_counts`
    for the padded and loss tokens too.
    """
    return batch_token_counts(batch).real


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
