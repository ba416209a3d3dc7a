"""End-of-run summary: where the time went and what to change first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._verdict import GC_BOUND_SHARE, INPUT_BOUND_SHARE, LOOP_BOUND_SHARE

__all__ = ["RunSummary", "build_summary"]


@dataclass(frozen=True)
class RunSummary:
    """Time split of a run (after the warm-up window) and its top recommendations."""

    wall_s: float
    etl_s: float
    gc_s: float
    compute_s: float
    iterations: int
    samples: int
    verdict_counts: dict[str, int] = field(default_factory=dict)
    recommendations: tuple[str, ...] = ()
    other_s: float = 0.0

    def _pct(self, part: float) -> float:
        return 100.0 * part / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def etl_pct(self) -> float:
        return self._pct(self.etl_s)

    @property
    def gc_pct(self) -> float:
        return self._pct(self.gc_s)

    @property
    def other_pct(self) -> float:
        return self._pct(self.other_s)

    @property
    def compute_pct(self) -> float:
        return self._pct(self.compute_s)

    @property
    def samples_per_sec(self) -> float | None:
        return self.samples / self.wall_s if self.wall_s > 0 and self.samples else None

    def to_dict(self) -> dict[str, object]:
        return {
            "wall_s": self.wall_s,
            "etl_s": self.etl_s,
            "gc_s": self.gc_s,
            "compute_s": self.compute_s,
            "etl_pct": self.etl_pct,
            "gc_pct": self.gc_pct,
            "compute_pct": self.compute_pct,
            "other_s": self.other_s,
            "other_pct": self.other_pct,
            "iterations": self.iterations,
            "samples": self.samples,
            "samples_per_sec": self.samples_per_sec,
            "verdict_counts": dict(self.verdict_counts),
            "recommendations": list(self.recommendations),
        }

    def __str__(self) -> str:
        if self.iterations == 0:
            return "trainperf summary: no iterations after the warm-up window were reported"
        rate = self.samples_per_sec
        lines = [
            f"trainperf summary: {self.iterations} iterations in {self.wall_s:.2f} s"
            + (f" ({rate:.1f} samples/sec)" if rate else ""),
            f"  data wait {self.etl_s:8.3f} s  {self.etl_pct:5.1f}%",
            f"  compute   {self.compute_s:8.3f} s  {self.compute_pct:5.1f}%",
            f"  GC        {self.gc_s:8.3f} s  {self.gc_pct:5.1f}%",
        ]
        if self.other_s > 0:
            lines.insert(3, f"  other     {self.other_s:8.3f} s  {self.other_pct:5.1f}%  (loop's own host work)")
        if self.recommendations:
            lines.append("  recommendations:")
            lines.extend(f"    {i}. {text}" for i, text in enumerate(self.recommendations, 1))
        else:
            lines.append("  no bottleneck found: data wait and GC are small next to compute")
        return "\n".join(lines)


def build_summary(
    *,
    wall_s: float,
    etl_s: float,
    gc_s: float,
    other_s: float = 0.0,
    iterations: int,
    samples: int,
    verdict_counts: dict[str, int],
    fixes: Callable[[str], Sequence[str]],
    top: int = 3,
) -> RunSummary:
    """Assemble a :class:`RunSummary`; recommendations follow the larger bottleneck first."""
    compute_s = max(0.0, wall_s - etl_s - gc_s - other_s)
    ranked: list[tuple[float, str]] = []
    if wall_s > 0:
        etl_share, gc_share = 100 * etl_s / wall_s, 100 * gc_s / wall_s
        if etl_share >= INPUT_BOUND_SHARE / 4:
            ranked.append((etl_share, "input-bound"))
        if gc_share >= GC_BOUND_SHARE / 2:
            ranked.append((gc_share, "gc-bound"))
        other_share = 100 * other_s / wall_s
        if other_share >= LOOP_BOUND_SHARE / 2:
            ranked.append((other_share, "loop-bound"))
    recommendations: list[str] = []
    for _, kind in sorted(ranked, reverse=True):
        for fix in fixes(kind):
            if fix not in recommendations:
                recommendations.append(fix)
    return RunSummary(
        wall_s=wall_s,
        etl_s=etl_s,
        gc_s=gc_s,
        compute_s=compute_s,
        other_s=other_s,
        iterations=iterations,
        samples=samples,
        verdict_counts=verdict_counts,
        recommendations=tuple(recommendations[:top]),
    )
