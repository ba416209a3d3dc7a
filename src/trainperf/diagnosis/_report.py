"""The doctor's report: one :class:`Check` per step of the guide."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ._memory_fixes import MIN_SAVING_SHARE, StepMemory

__all__ = ["Check", "DoctorReport", "STATUSES", "memory_dict", "memory_lines"]

STATUSES = ("ok", "warn", "fail", "skip")


@dataclass(frozen=True)
class Check:
    """One check's verdict.

    Args:
        step: the guide's step number, 1-13.
        id: a stable identifier (``data_loading``, ``dtypes``, ...).
        title: what was checked, in a few words.
        status: ``ok``, ``warn``, ``fail`` or ``skip``.
        evidence: the measured or read values the verdict rests on.
        fix: the change to make, in PyTorch terms (empty when ``ok``); for a skipped check, what
            would let it run (``pip install psutil``), if anything.
        reason: why it was skipped, or a one-line summary of the finding.
    """

    step: int
    id: str
    title: str
    status: str
    evidence: dict[str, Any] = field(default_factory=dict)
    fix: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class DoctorReport:
    """All checks, in the guide's order, and what one training step's memory is made of.

    Args:
        checks: the 13 checks.
        memory: one step's memory split and the fixes that would shrink it; ``None`` when not measured.
    """

    checks: tuple[Check, ...]
    memory: StepMemory | None = None

    def __getitem__(self, key: str | int) -> Check:
        for check in self.checks:
            if check.id == key or check.step == key:
                return check
        raise KeyError(f"no check {key!r}")

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.status in ("warn", "fail")]

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"checks": [asdict(c) for c in self.checks]}
        if self.memory is not None:
            found["memory"] = memory_dict(self.memory)
        return found

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), default=str, **kwargs)

    def __str__(self) -> str:
        marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}
        lines = [f"{'step':>4}  {'status':6}  check"]
        for c in self.checks:
            lines.append(f"{c.step:>4}  {marks[c.status]:6}  {c.title}: {c.reason}")
            if c.fix and c.status in ("warn", "fail"):
                lines.append(f"{'':14}fix: {c.fix}")
            elif c.fix and c.status == "skip":
                lines.append(f"{'':14}to run it: {c.fix}")
        counts = {s: sum(c.status == s for c in self.checks) for s in STATUSES}
        lines.append(f"{counts['fail']} fail, {counts['warn']} warn, {counts['ok']} ok, {counts['skip']} skipped")
        if self.memory is not None:
            lines += ["", *memory_lines(self.memory)]
        return "\n".join(lines)


#: The split's parts, as the report names them, in the order it prints them.
PARTS = (("parameters", "parameters"), ("buffers", "buffers"), ("gradients", "gradients"),
         ("optimizer_state", "optimizer state"), ("inputs", "batch"), ("activations", "activations"),
         ("temporaries", "temporaries"), ("peak", "peak"))


def _mb(size: int) -> float:
    return round(size / 1e6, 6)


def memory_dict(memory: StepMemory) -> dict[str, Any]:
    """The memory section as JSON values: sizes in MB (10^6 bytes)."""
    split = memory.split
    found: dict[str, Any] = {"skipped": memory.skipped, "notes": list(memory.notes)}
    if split is not None:
        found.update(device=split.device, batch_size=split.batch_size, optimizer=split.optimizer,
                     parameter_dtype=split.parameter_dtype)
        for name, _ in PARTS:
            size = getattr(split, name)
            found[f"{name}_mb"] = None if size is None else _mb(size)
    found["fixes"] = [{"id": f.id, "change": f.change, "saving_mb": _mb(f.saving), "estimate": f.estimate}
                      for f in memory.fixes]
    return found


def memory_lines(memory: StepMemory) -> list[str]:
    """The memory section as the printed report shows it."""
    split = memory.split
    if split is None:
        return [f"memory of one training step: skipped ({memory.skipped})"]
    about = [f"batch {split.batch_size}"] if split.batch_size is not None else []
    about += [split.optimizer] if split.optimizer else []
    lines = [f"memory of one training step on {split.device}" + (f" ({', '.join(about)})" if about else "") + ":"]
    for name, label in PARTS:
        size = getattr(split, name)
        lines.append(f"{'':6}{label:16}" + (f"{'not counted':>13}" if size is None else f"{size / 1e6:10.2f} MB"))
    lines += [f"{'':6}{note}" for note in memory.notes]
    for fix in memory.fixes:
        lines.append(f"{'':6}saves about {fix.saving / 1e6:.2f} MB: {fix.change}")
    if not memory.fixes:
        lines.append(f"{'':6}no fix would save {MIN_SAVING_SHARE:.0%} of the peak or more")
    return lines
