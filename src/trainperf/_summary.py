"""End-of-run summary: where the time went, every bottleneck that crossed its line, and its fixes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._verdict import DEFAULT_THRESHOLDS, Thresholds, loop_work_s

__all__ = ["RunSummary", "build_summary"]

#: Fixes listed per bottleneck.
FIXES_PER_BOTTLENECK = 3


@dataclass(frozen=True)
class Bottleneck:
    """One bottleneck of a run: its share of the wall time, the windows judged so, and its fixes."""

    kind: str
    share: float
    windows: int
    fixes: tuple[str, ...]


@dataclass(frozen=True)
class RunSummary:
    """Time split of a run (after the warm-up window), its bottlenecks and their fixes.

    ``recommendations`` holds every bottleneck's fixes, the largest bottleneck's first.
    ``total_iterations`` counts the warm-up window too.
    """

    wall_s: float
    etl_s: float
    gc_s: float
    compute_s: float
    iterations: int
    samples: int
    verdict_counts: dict[str, int] = field(default_factory=dict)
    recommendations: tuple[str, ...] = ()
    other_s: float = 0.0
    bottlenecks: tuple[Bottleneck, ...] = ()
    total_iterations: int = 0

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
            "total_iterations": self.total_iterations,
            "samples": self.samples,
            "samples_per_sec": self.samples_per_sec,
            "verdict_counts": dict(self.verdict_counts),
            "bottlenecks": [
                {"kind": b.kind, "share": b.share, "windows": b.windows, "fixes": list(b.fixes)}
                for b in self.bottlenecks
            ],
            "recommendations": list(self.recommendations),
        }

    def __str__(self) -> str:
        if self.iterations == 0:
            return "trainperf summary: no iterations after the warm-up window were reported"
        rate = self.samples_per_sec
        left_out = self.total_iterations - self.iterations
        counted = (
            f"{self.iterations} of {self.total_iterations} iterations, warm-up left out"
            if left_out > 0
            else f"{self.iterations} iterations"
        )
        lines = [
            f"trainperf summary: {counted}, in {self.wall_s:.2f} s" + (f" ({rate:.1f} samples/sec)" if rate else ""),
            f"  data wait {self.etl_s:8.3f} s  {self.etl_pct:5.1f}%",
            f"  compute   {self.compute_s:8.3f} s  {self.compute_pct:5.1f}%",
        ]
        if self.other_s > 0:
            lines.append(f"  other     {self.other_s:8.3f} s  {self.other_pct:5.1f}%  (loop's own host work)")
        lines.append(f"  GC        {self.gc_s:8.3f} s  {self.gc_pct:5.1f}%")
        if self.verdict_counts:
            windows = sum(self.verdict_counts.values())
            counts = ", ".join(f"{kind} {n}" for kind, n in sorted(self.verdict_counts.items(), key=lambda kv: -kv[1]))
            lines.append(f"  verdicts over {windows} windows: {counts}")
        if not self.bottlenecks:
            lines.append("  no bottleneck found: data wait, GC and other host work are small next to compute")
        for b in self.bottlenecks:
            lines.append(f"  {b.kind}: {b.share:.0f}% of the time, {b.windows} window(s) judged so; fixes:")
            lines.extend(f"    - {fix}" for fix in b.fixes)
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
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    total_iterations: int | None = None,
) -> RunSummary:
    """Assemble a :class:`RunSummary`.

    A bottleneck is listed when its share of the whole run crosses half its verdict threshold, or
    when any window was judged so; the largest share first, each with its fixes.
    """
    compute_s = max(0.0, wall_s - etl_s - gc_s - other_s)
    bottlenecks: list[Bottleneck] = []
    if wall_s > 0:
        for kind, seconds, threshold in (
            ("input-bound", etl_s, thresholds.input_bound),
            ("gc-bound", gc_s, thresholds.gc_bound),
            ("loop-bound", loop_work_s(other_s, gc_s), thresholds.loop_bound),
        ):
            share = 100.0 * seconds / wall_s
            windows = verdict_counts.get(kind, 0)
            if share >= threshold / 2 or windows:
                bottlenecks.append(Bottleneck(kind, share, windows, tuple(fixes(kind)[:FIXES_PER_BOTTLENECK])))
    bottlenecks.sort(key=lambda b: -b.share)
    recommendations: list[str] = []
    for b in bottlenecks:
        recommendations.extend(fix for fix in b.fixes if fix not in recommendations)
    return RunSummary(
        wall_s=wall_s,
        etl_s=etl_s,
        gc_s=gc_s,
        compute_s=compute_s,
        other_s=other_s,
        iterations=iterations,
        samples=samples,
        verdict_counts=verdict_counts,
        recommendations=tuple(recommendations),
        bottlenecks=tuple(bottlenecks),
        total_iterations=iterations if total_iterations is None else total_iterations,
    )
