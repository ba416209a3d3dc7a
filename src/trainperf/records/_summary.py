"""End-of-run summary: where the time went, every bottleneck that crossed its line, and its fixes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._goodput_rows import GoodputAccount
from ._memory_peaks import MemoryPeaks
from ._timeline import speedup
from ._verdict import DEFAULT_THRESHOLDS, MATERIAL_MS, Thresholds, persists

__all__ = ["RunSummary", "build_summary"]

#: Fixes listed per bottleneck.
FIXES_PER_BOTTLENECK = 3
#: Why an MFU above 100% cannot be: said beside it wherever it is shown.
MFU_ABOVE_PEAK = ("above 100%: the peak FLOP/s is likely wrong (too low for the device) or the FLOP count per step "
                  "too high")
#: What each bottleneck's share of the time was spent on.
_SPENT = {"input-bound": "waiting for data", "gc-bound": "in garbage collection",
          "loop-bound": "in the loop's own host work"}


@dataclass(frozen=True)
class Bottleneck:
    """One bottleneck of a run: its share of the wall time, the windows judged so, its fixes, and the
    share of a whole run (half a window's threshold) above which it is one without persisting."""

    kind: str
    share: float
    windows: int
    fixes: tuple[str, ...]
    line: float = 0.0

    def words(self, judged: int) -> str:
        """Why it is a bottleneck of the run, in words: the windows judged so when it persisted, else
        its share of the run against its line and the windows that passed the window's threshold."""
        spent = _SPENT.get(self.kind)
        if persists(self.windows, judged) or self.kind == "memory-growth":
            share = f" ({self.share:.0f}% of the time {spent})" if spent else ""
            return f"{self.kind}: judged so in {self.windows} of {judged} windows{share}"
        words = (f"{self.kind} over the run: {self.share:.0f}% of the time {spent}, above the {self.line:g}% line "
                 f"for a whole run (half the {2 * self.line:g}% that makes a window {self.kind})")
        if judged:
            passed = "no single window" if not self.windows else f"only {self.windows} of {judged} windows"
            words += f", though {passed} passed it"
        return words


@dataclass(frozen=True)
class RunSummary:
    """Time split of a run (after the warm-up window), its bottlenecks and their fixes.

    ``recommendations`` holds every bottleneck's fixes, the largest bottleneck's first.
    ``total_iterations`` counts the warm-up window too. ``data_free_s`` and ``gc_free_s`` are the
    time that free data and GC-free training would have saved (on CUDA: the device's idle time
    spent waiting for them); ``device_wall_s`` and ``device_idle_s`` are the device's time and its
    idle time between steps, on CUDA only.
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
    data_free_s: float = 0.0
    gc_free_s: float = 0.0
    device_wall_s: float | None = None
    device_idle_s: float = 0.0
    tokens: int = 0
    tokens_wall_s: float = 0.0
    flops: float = 0.0
    flops_wall_s: float = 0.0
    peak_flop_s: float = 0.0
    goodput: GoodputAccount | None = None
    memory: MemoryPeaks | None = None

    @property
    def tflops_per_sec(self) -> float | None:
        """TFLOP/s over the windows whose FLOPs per step were known (``None``: none were)."""
        return self.flops / self.flops_wall_s / 1e12 if self.flops_wall_s > 0 else None

    @property
    def mfu(self) -> float | None:
        """The run's model FLOPs utilisation: its FLOPs over what the peak could have done in the same
        windows (``None`` without a peak)."""
        return self.flops / self.peak_flop_s if self.peak_flop_s > 0 else None

    @property
    def tokens_per_sec(self) -> float | None:
        """Real tokens per second over the windows that counted their tokens (``None``: none did)."""
        return self.tokens / self.tokens_wall_s if self.tokens_wall_s > 0 else None

    @property
    def speedup_if_data_free(self) -> float | None:
        """How many times faster the run would have been if data cost nothing."""
        return speedup(self.device_wall_s if self.device_wall_s is not None else self.wall_s, self.data_free_s)

    @property
    def speedup_if_gc_free(self) -> float | None:
        """How many times faster the run would have been without GC pauses."""
        return speedup(self.device_wall_s if self.device_wall_s is not None else self.wall_s, self.gc_free_s)

    def gain_words(self) -> str:
        """The data's cost in words: what the GPU waited for, or what the data wait hid behind."""
        gain = self.speedup_if_data_free
        base = self.device_wall_s if self.device_wall_s is not None else self.wall_s
        share = 100.0 * self.data_free_s / base if base > 0 else 0.0
        n = max(1, self.iterations)
        if self.device_wall_s is not None:
            if gain is not None and gain >= 1.01:
                return (f"the GPU waited for data {share:.0f}% of the time: "
                        f"free data would make this run {gain:.2f}x faster")
            busy_ms = 1000.0 * (self.device_wall_s - self.device_idle_s) / n
            return (f"data: {1000.0 * self.etl_s / n:.0f} ms per batch, hidden behind {busy_ms:.0f} ms of GPU work"
                    if self.etl_s > 0 else f"no data wait; {busy_ms:.0f} ms of GPU work per step")
        if gain is None:
            return "the run did nothing but wait for data"
        return f"data wait took {share:.0f}% of the time: free data would make this run {gain:.2f}x faster"

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
            "tokens": self.tokens,
            "tokens_per_sec": self.tokens_per_sec,
            "tflops_per_sec": self.tflops_per_sec,
            "mfu": self.mfu,
            "verdict_counts": dict(self.verdict_counts),
            "bottlenecks": [
                {"kind": b.kind, "share": b.share, "windows": b.windows, "fixes": list(b.fixes), "line": b.line}
                for b in self.bottlenecks
            ],
            "recommendations": list(self.recommendations),
            "data_free_s": self.data_free_s,
            "gc_free_s": self.gc_free_s,
            "device_wall_s": self.device_wall_s,
            "device_idle_s": self.device_idle_s,
            "speedup_if_data_free": self.speedup_if_data_free,
            "speedup_if_gc_free": self.speedup_if_gc_free,
            "goodput": self.goodput.to_dict() if self.goodput is not None else None,
            "memory": self.memory.to_dict() if self.memory is not None else None,
        }

    def __str__(self) -> str:
        goodput = "\n" + "\n".join(self.goodput.lines()) if self.goodput is not None else ""
        return self._text() + goodput

    def _text(self) -> str:
        if self.iterations == 0:
            return "trainperf summary: no iterations after the warm-up window were reported"
        rate = self.samples_per_sec
        rates = ", ".join(([f"{rate:.1f} samples/sec"] if rate else [])
                          + ([f"{self.tokens_per_sec:.1f} tokens/sec"] if self.tokens_per_sec else [])
                          + ([f"{self.tflops_per_sec:.3g} TFLOP/s"] if self.tflops_per_sec else [])
                          + ([f"MFU {100 * self.mfu:.1f}%" + (f" ({MFU_ABOVE_PEAK})" if self.mfu > 1 else "")]
                             if self.mfu else []))
        left_out = self.total_iterations - self.iterations
        counted = (
            f"{self.iterations} of {self.total_iterations} iterations, warm-up left out"
            if left_out > 0
            else f"{self.iterations} iterations"
        )
        lines = [
            f"trainperf summary: {counted}, in {self.wall_s:.2f} s" + (f" ({rates})" if rates else ""),
            f"  data wait {self.etl_s:8.3f} s  {self.etl_pct:5.1f}%",
            f"  compute   {self.compute_s:8.3f} s  {self.compute_pct:5.1f}%",
        ]
        if self.other_s > 0:
            lines.append(f"  other     {self.other_s:8.3f} s  {self.other_pct:5.1f}%  (loop's own host work)")
        lines.append(f"  GC        {self.gc_s:8.3f} s  {self.gc_pct:5.1f}%")
        if self.device_wall_s is not None:
            idle_pct = 100.0 * self.device_idle_s / self.device_wall_s if self.device_wall_s > 0 else 0.0
            lines.append(f"  GPU idle between steps {self.device_idle_s:8.3f} s  {idle_pct:5.1f}%")
        lines.append(f"  {self.gain_words()}")
        gc_gain = self.speedup_if_gc_free
        if gc_gain is not None and gc_gain >= 1.01:
            lines.append(f"  GC-free training would make this run {gc_gain:.2f}x faster")
        if self.verdict_counts:
            windows = sum(self.verdict_counts.values())
            counts = ", ".join(f"{kind} {n}" for kind, n in sorted(self.verdict_counts.items(), key=lambda kv: -kv[1]))
            lines.append(f"  verdicts over {windows} windows: {counts}")
        if not self.bottlenecks:
            lines.append("  no bottleneck found: data wait, GC and other host work are small next to compute")
        judged = sum(self.verdict_counts.values())
        for b in self.bottlenecks:
            lines.append(f"  {b.words(judged)}; fixes:")
            lines.extend(f"    - {fix}" for fix in b.fixes)
        if self.memory is not None:
            lines.extend(self.memory.lines())
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
    data_free_s: float | None = None,
    gc_free_s: float | None = None,
    device_wall_s: float | None = None,
    device_idle_s: float = 0.0,
    tokens: int = 0,
    tokens_wall_s: float = 0.0,
    flops: float = 0.0,
    flops_wall_s: float = 0.0,
    peak_flop_s: float = 0.0,
    memory: MemoryPeaks | None = None,
) -> RunSummary:
    """Assemble a :class:`RunSummary`.

    A bottleneck of the run is listed when its share of the whole run crosses half its verdict
    threshold and it costs at least :data:`~trainperf.records._verdict.MATERIAL_MS` per iteration, or when it
    persisted: the verdict of at least ``PERSIST_WINDOWS`` windows and ``PERSIST_SHARE`` of them (one
    bad window is no bottleneck of the run). The largest share first, each with its fixes. On CUDA
    (``device_wall_s`` given) the input- and GC-bound shares are the device's idle time for them.
    ``data_free_s`` and ``gc_free_s`` default to ``etl_s`` and ``gc_s``.
    """
    data_free = etl_s if data_free_s is None else data_free_s
    gc_free = gc_s if gc_free_s is None else gc_free_s
    base_s = wall_s if device_wall_s is None else device_wall_s
    compute_s = max(0.0, wall_s - etl_s - gc_s - other_s)
    bottlenecks: list[Bottleneck] = []
    judged = sum(verdict_counts.values())
    material_s = MATERIAL_MS / 1000.0 * max(1, iterations)
    if wall_s > 0:
        for kind, seconds, threshold, over in (
            ("input-bound", data_free, thresholds.input_bound, base_s),
            ("gc-bound", gc_free, thresholds.gc_bound, base_s),
            ("loop-bound", other_s, thresholds.loop_bound, wall_s),
            ("cpu-contention", 0.0, 100.0, wall_s),
            ("host-bound", 0.0, 100.0, wall_s),
            ("padding", 0.0, 100.0, wall_s),
            ("memory-growth", 0.0, 100.0, wall_s),
        ):
            share = 100.0 * seconds / over if over > 0 else 0.0
            windows = verdict_counts.get(kind, 0)
            if kind in ("host-bound", "cpu-contention", "padding", "memory-growth") and windows:
                share = 100.0 * windows / judged  # no time of its own: the windows' share
            # growth is judged over several windows already: one window judged so is a bottleneck of the run
            grew = kind == "memory-growth" and windows > 0
            if grew or (share >= threshold / 2 and seconds >= material_s) or persists(windows, judged):
                bottlenecks.append(Bottleneck(kind, share, windows, tuple(fixes(kind)[:FIXES_PER_BOTTLENECK]),
                                              threshold / 2))
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
        data_free_s=data_free,
        gc_free_s=gc_free,
        device_wall_s=device_wall_s,
        device_idle_s=device_idle_s,
        tokens=tokens,
        tokens_wall_s=tokens_wall_s,
        flops=flops,
        flops_wall_s=flops_wall_s,
        peak_flop_s=peak_flop_s,
        memory=memory,
    )
