"""One training step's memory, measured with torch's memory tracker on copies of the user's model and optimizer."""

from __future__ import annotations

import copy
from typing import Any

from ._memory_fixes import Block, StepMemory, factored_state_bytes, memory_fixes, split_from_snapshots
from ._probe import _tensors, forward_loss, to_device

__all__ = ["fresh_optimizer", "step_memory"]


def fresh_optimizer(optimizer: Any, model: Any, twin: Any) -> Any:
    """A new optimizer of ``optimizer``'s class and param-group settings, over ``twin``'s parameters.

    ``twin`` is a deep copy of ``model``: each of the optimizer's parameters is matched to the copy's
    parameter at the same place in ``model.parameters()``. Its state is empty.
    """
    place = {id(p): i for i, p in enumerate(model.parameters())}
    copies = list(twin.parameters())
    groups = []
    for group in optimizer.param_groups:
        missing = [p for p in group["params"] if id(p) not in place]
        if missing:
            raise ValueError(f"the optimizer holds {len(missing)} parameters that are not the model's")
        settings = copy.deepcopy({k: v for k, v in group.items() if k != "params"})
        groups.append({**settings, "params": [copies[place[id(p)]] for p in group["params"]]})
    return type(optimizer)(groups)


def _device_figures(snapshot: dict[Any, dict[Any, int]], device: Any) -> dict[str, int]:
    """``{"PARAM": bytes, ..., "Total": bytes}`` of one device from a tracker snapshot."""
    return {getattr(key, "name", str(key)): value for key, value in snapshot.get(device, {}).items()}


def _blocks(tracker: Any, model: Any, device: Any) -> tuple[Block, ...]:
    """The top-level blocks' activations: the children of the first module with more than one."""
    from torch.distributed._tools.mem_tracker import _ModState

    prefix, module = "", model
    while len(children := list(module.named_children())) == 1:
        name, module = children[0]
        prefix += name + "."
    blocks = []
    for name, child in children:
        stats = tracker.memory_tracking.get(child)
        if stats is None or not stats.snapshots.get(_ModState.POST_FW):
            continue  # not called in the forward
        before = _device_figures(stats.snapshots[_ModState.PRE_FW][0], device).get("ACT", 0)
        after = _device_figures(stats.snapshots[_ModState.POST_FW][0], device).get("ACT", 0)
        blocks.append(Block(prefix + name, max(0, after - before), stats.output_mem))
    return tuple(blocks)


def _step(model: Any, optimizer: Any, batch: Any, loss_fn: Any) -> None:
    import torch

    with torch.enable_grad():
        loss = forward_loss(model, batch, loss_fn)
        if isinstance(loss, torch.Tensor) and loss.requires_grad:
            loss.backward()  # type: ignore[no-untyped-call]
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    else:
        model.zero_grad(set_to_none=True)


def step_memory(model: Any, loader: Any, optimizer: Any = None, *, loss_fn: Any = None) -> StepMemory:
    """Measure one training step's memory on copies of ``model`` and ``optimizer``, on one batch of ``loader``.

    A first step, not tracked, makes the optimizer's state as any later step finds it; the second is
    tracked: the forward, the backward and the optimizer's step. The user's model and optimizer are
    not touched.
    """
    import torch

    if model is None or loader is None:
        return StepMemory(None, skipped="needs a model and a loader" + (
            ": no model given" if model is None else ": no loader given"))
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError as exc:
        return StepMemory(None, skipped=f"this torch has no memory tracker (torch.distributed): {exc}")
    try:
        batch = next(iter(loader))
    except StopIteration:
        return StepMemory(None, skipped="the loader gave no batch")
    params = list(model.parameters())
    device = params[0].device if params else torch.device("cpu")
    notes = []
    if optimizer is None:
        notes.append("optimizer state not counted: no optimizer given")
    twin = copy.deepcopy(model)
    twin_optimizer = fresh_optimizer(optimizer, model, twin) if optimizer is not None else None
    batch = to_device(batch, device)
    _step(twin, twin_optimizer, batch, loss_fn)
    tracker = MemTracker()
    tracker.track_external(twin, *([twin_optimizer] if twin_optimizer is not None else []),
                           *_tensors(batch))
    with tracker:
        before = tracker.get_tracker_snapshot()
        with torch.enable_grad():
            loss = forward_loss(twin, batch, loss_fn)
            after_forward = tracker.get_tracker_snapshot()
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                loss.backward()  # type: ignore[no-untyped-call]
        if twin_optimizer is not None:
            twin_optimizer.step()
        del loss
        after = tracker.get_tracker_snapshot()
    from ..torch import batch_size

    by_dtype: dict[str, int] = {}
    for p in params:
        by_dtype[str(p.dtype)] = by_dtype.get(str(p.dtype), 0) + p.numel() * p.element_size()
    split = split_from_snapshots(
        before=_device_figures(before, device), after_forward=_device_figures(after_forward, device),
        after=_device_figures(after, device), peak=_device_figures(tracker.get_tracker_snapshot("peak"), device),
        device=str(device), optimizer=type(optimizer).__name__ if optimizer is not None else None,
        batch_size=batch_size(batch), parameter_dtype=max(by_dtype, key=by_dtype.__getitem__, default="torch.float32"),
        factored_state=factored_state_bytes((tuple(p.shape) for p in params), params[0].element_size())
        if params else None,
        blocks=_blocks(tracker, twin, device),
    )
    if len({p.device for p in params}) > 1:
        notes.append(f"parameters on several devices: only {device}'s memory is shown")
    return StepMemory(split, memory_fixes(split), notes=tuple(notes))
