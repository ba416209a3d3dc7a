"""The doctor's report: one :class:`Check` per step of the guide."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Check", "DoctorReport", "STATUSES"]

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
    """All checks, in the guide's order."""

    checks: tuple[Check, ...]

    def __getitem__(self, key: str | int) -> Check:
        for check in self.checks:
            if check.id == key or check.step == key:
                return check
        raise KeyError(f"no check {key!r}")

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.status in ("warn", "fail")]

    def to_dict(self) -> dict[str, Any]:
        return {"checks": [asdict(c) for c in self.checks]}

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
        return "\n".join(lines)
