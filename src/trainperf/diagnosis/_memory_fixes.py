"""What one training step's memory is made of, and about how much each fix would save.

Plain numbers in, plain numbers out: the measuring part (``_memory_step.py``) reads torch's memory
tracker and hands its figures here in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "MIN_SAVING_SHARE", "Block", "MemoryFix", "MemorySplit", "StepMemory", "factored_state_bytes", "memory_fixes",
    "split_from_snapshots",
]

#: A fix is offered when it would save at least this share of the step's peak.
MIN_SAVING_SHARE = 0.05


@dataclass(frozen=True)
class Block:
    """One top-level block of the model, as its forward left memory.

    Args:
        name: the block's name in the model (``layers.3``).
        activations: bytes its forward added to the activations, its output included.
        output: bytes of its output.
    """

    name: str
    activations: int
    output: int


@dataclass(frozen=True)
class MemorySplit:
    """One training step's memory on the model's device, in bytes.

    Args:
        device: where it was measured (``cpu``, ``cuda:0``).
        parameters, buffers: the model's weights and buffers.
        gradients: the gradients after the backward.
        optimizer_state: what the optimizer keeps between steps; ``None`` when no optimizer was given.
        inputs: the batch.
        activations: what the forward keeps for the backward (and its outputs), at the end of the forward.
        temporaries: the rest of the step's peak: the backward's and the optimizer's scratch memory.
        peak: the most the step held at once.
        batch_size: samples in the batch, if known.
        parameter_dtype: the dtype of most of the parameters' bytes.
        optimizer: the optimizer's class name, if one was given.
        factored_state: bytes a factored optimizer (Adafactor) would keep for these parameters.
        blocks: the model's top-level blocks, for activation checkpointing.
    """

    device: str
    parameters: int
    buffers: int
    gradients: int
    optimizer_state: int | None
    inputs: int
    activations: int
    temporaries: int
    peak: int
    batch_size: int | None = None
    parameter_dtype: str = "torch.float32"
    optimizer: str | None = None
    factored_state: int | None = None
    blocks: tuple[Block, ...] = ()


@dataclass(frozen=True)
class MemoryFix:
    """One change and about how many bytes it would save.

    Args:
        id: ``checkpointing``, ``smaller_batch``, ``mixed_precision``, ``optimizer_sgd_momentum``,
            ``optimizer_adafactor`` or ``optimizer_sgd``.
        change: what to change, in PyTorch terms.
        saving: about how many bytes it would save.
        estimate: how the saving is estimated.
    """

    id: str
    change: str
    saving: int
    estimate: str


@dataclass(frozen=True)
class StepMemory:
    """The doctor's memory section: the split and its fixes, or why there is none."""

    split: MemorySplit | None
    fixes: tuple[MemoryFix, ...] = ()
    skipped: str = ""
    notes: tuple[str, ...] = ()


def split_from_snapshots(
    *, before: Mapping[str, int], after_forward: Mapping[str, int], after: Mapping[str, int],
    peak: Mapping[str, int], device: str, optimizer: str | None = None, batch_size: int | None = None,
    parameter_dtype: str = "torch.float32", factored_state: int | None = None, blocks: tuple[Block, ...] = (),
) -> MemorySplit:
    """The split from the tracker's snapshots of one device, each ``{"PARAM": bytes, "ACT": ..., ...}``.

    Args:
        before: when the step starts (the weights, the optimizer's state, the batch).
        after_forward: when the loss is computed.
        after: when the backward (and the optimizer's step) is done.
        peak: at the step's peak.
        device: the device's name.
        optimizer: the optimizer's class name; ``None`` when there is none (its state is then not counted).
        batch_size, parameter_dtype, factored_state, blocks: as in :class:`MemorySplit`.
    """
    def get(snapshot: Mapping[str, int], key: str) -> int:
        return int(snapshot.get(key, 0))

    activations = max(0, get(after_forward, "ACT") - get(before, "ACT"))
    gradients, state = get(after, "GRAD"), get(after, "OPT")
    # at the peak: what is there beyond the weights, the batch, and the gradients, state and
    # activations that the step keeps, is scratch memory
    held = (get(peak, "PARAM") + get(peak, "BUFFER") + get(peak, "OTH") + min(get(peak, "GRAD"), gradients)
            + min(get(peak, "OPT"), state) + min(get(peak, "ACT"), activations))
    return MemorySplit(
        device=device, parameters=get(after, "PARAM"), buffers=get(after, "BUFFER"), gradients=gradients,
        optimizer_state=None if optimizer is None else state, inputs=get(before, "OTH"),
        activations=activations, temporaries=max(0, get(peak, "Total") - held), peak=get(peak, "Total"),
        batch_size=batch_size, parameter_dtype=parameter_dtype, optimizer=optimizer,
        factored_state=factored_state, blocks=blocks,
    )


def factored_state_bytes(shapes: Iterable[tuple[int, ...]], element_size: int) -> int:
    """Bytes Adafactor keeps for parameters of these shapes: a row and a column factor per matrix.

    A tensor of shape ``(..., m, n)`` keeps ``numel / n + numel / m`` values; a vector keeps one per
    element (no factoring); a scalar one.
    """
    values = 0
    for shape in shapes:
        numel = 1
        for size in shape:
            numel *= size
        if len(shape) >= 2 and shape[-1] and shape[-2]:
            values += numel // shape[-1] + numel // shape[-2]
        else:
            values += numel
    return values * element_size


def _checkpointing(split: MemorySplit) -> MemoryFix | None:
    blocks = split.blocks
    if len(blocks) < 2:
        return None
    # each checkpointed block keeps only its output (the next block's input); the backward
    # recomputes one block at a time, holding that block's activations again
    kept_inside = sum(max(0, b.activations - b.output) for b in blocks)
    largest = max(b.activations for b in blocks)
    names = ", ".join(b.name for b in blocks[:4]) + (", ..." if len(blocks) > 4 else "")
    return MemoryFix(
        "checkpointing",
        f"torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) around each of the {len(blocks)} "
        f"top-level blocks ({names})",
        min(kept_inside - largest, split.activations),
        "what each block keeps inside it, less the largest block's activations, recomputed in the backward",
    )


def _smaller_batch(split: MemorySplit) -> MemoryFix | None:
    n = split.batch_size
    if n is None or n < 2:
        return None
    return MemoryFix(
        "smaller_batch",
        f"batch size {n // 2} instead of {n} (accumulate the gradients of 2 batches to keep the same effective batch)",
        (split.activations + split.inputs) // 2,
        "the activations and the batch grow with the batch size: half the batch, about half of them",
    )


def _mixed_precision(split: MemorySplit) -> MemoryFix | None:
    if split.parameter_dtype != "torch.float32":  # bf16 or fp16 already: autocast has nothing to halve
        return None
    device_type = split.device.split(":")[0]
    return MemoryFix(
        "mixed_precision",
        f"torch.autocast('{device_type}', dtype=torch.bfloat16) around the forward and the loss",
        split.activations // 2 - split.parameters // 2,
        "bf16 activations take half the bytes, less the bf16 copy of the weights autocast keeps for the "
        "backward (half the parameters); parameters, gradients and optimizer state stay float32",
    )


def _optimizers(split: MemorySplit) -> list[MemoryFix]:
    state = split.optimizer_state
    if state is None or split.parameters <= 0:
        return []
    per_parameter = state / split.parameters
    kept = f"{per_parameter:.1f} values per parameter ({split.optimizer})"
    options = [
        ("optimizer_sgd_momentum", "torch.optim.SGD(params, lr, momentum=0.9): 1 value per parameter",
         split.parameters),
        ("optimizer_sgd", "torch.optim.SGD(params, lr) without momentum: no state", 0),
    ]
    if split.factored_state is not None:
        options.insert(1, ("optimizer_adafactor", "torch.optim.Adafactor(params): a row and a column factor per "
                           "weight matrix", split.factored_state))
    return [MemoryFix(fix_id, f"{change}, instead of {kept}", state - target,
                      "the measured optimizer state less what that optimizer keeps for these parameters")
            for fix_id, change, target in options]


def memory_fixes(split: MemorySplit) -> tuple[MemoryFix, ...]:
    """The fixes that would save at least :data:`MIN_SAVING_SHARE` of the step's peak, largest first."""
    found = [_checkpointing(split), _smaller_batch(split), _mixed_precision(split), *_optimizers(split)]
    worth = MIN_SAVING_SHARE * split.peak
    return tuple(sorted((f for f in found if f is not None and f.saving > 0 and f.saving >= worth),
                        key=lambda f: f.saving, reverse=True))
