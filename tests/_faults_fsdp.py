"""Fault injection on real FSDP ranks (gloo, CPU): ``tests/_faults.py``'s scenarios with the model
sharded by FSDP2 (``fully_shard`` on each linear layer, then on the whole model) or wrapped by FSDP1
(``FullyShardedDataParallel``), run and judged the same way. Used by ``tests/test_fsdp.py``.

FSDP's collectives are not timed, nor the forward pass that holds its all-gather, so a straggler is
named from what precedes the collectives: a slow ``data``, ``host`` or ``gc`` rank is named with its
cause, and a slow ``forward`` pass names nobody (:func:`names` tells what each window named).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _faults import WRAPS, Plan, Scenario, _slowed, judged_windows

#: The faults FSDP runs: the three that precede the collectives, a forward pass, and nobody.
FAULTS = ("data", "host", "gc", "forward", "none")
#: How trainperf names each wrapping in the run directory's meta data.
WHY = {"fsdp2": "FSDP2: fully_shard", "fsdp1": "FSDP: FullyShardedDataParallel"}


def _fsdp2(net: Any) -> Any:
    import torch
    from torch.distributed.fsdp import fully_shard

    for layer in net.body:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    return fully_shard(net)


def _fsdp1(net: Any) -> Any:
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    # torch 2.13's FSDP1 refuses a model on the CPU unless the CPU is given as its device
    return FullyShardedDataParallel(net, device_id=torch.device("cpu"))


WRAPS.update(fsdp2=_fsdp2, fsdp1=_fsdp1)


def scenarios(wrap: str, slow_rank: int = 1) -> tuple[Scenario, ...]:
    """Every fault of :data:`FAULTS` on ``slow_rank`` (``host`` on rank 0), the model wrapped by ``wrap``."""
    return tuple(Scenario(f, 0 if f == "host" else slow_rank, wrap=wrap) for f in FAULTS)


def names(run_dir: Path, plan: Plan) -> dict[int, list[tuple[int, str]]]:
    """What the report's rule names in each steady window every rank reported, by the window's last
    iteration, as ``judge`` applies it."""
    return {last: [(s.rank, s.cause) for s in found] for last, found in judged_windows(run_dir, plan)}


def innocent(run_dir: Path, scenario: Scenario, plan: Plan) -> tuple[int, int, list[str]]:
    """Over the windows in which ``scenario``'s rank was slowed: how many there were, how many named a
    rank that was not slowed, and those windows in words."""
    acting = {last: found for last, found in names(run_dir, plan).items()
              if _slowed(scenario, scenario.slow_rank, last, plan.frequency)}
    wrong = [f"{last}: {found}" for last, found in acting.items() if any(r != scenario.slow_rank for r, _ in found)]
    return len(acting), len(wrong), wrong
