"""The live verdict: what limits a window, judged from that window's own figures."""

from __future__ import annotations

from dataclasses import dataclass

from ._record import Verdict
from ._timeline import speedup

__all__: list[str] = []

#: Data wait at or above this share of the window's wall time makes it input-bound.
#: TensorFlow's profiler calls a step "highly input-bound" from 20% of its time in input.
INPUT_BOUND_SHARE = 20.0
#: GC pauses at or above this share make a window GC-bound. The guide treats collections that
#: cost tens of milliseconds every few seconds as noticeable; a tenth of the wall time is well past that.
GC_BOUND_SHARE = 10.0
#: The loop's own host work (neither data wait nor the step) at or above this share makes a window
#: loop-bound: evaluation, logging or metric syncs between steps take as long as a slow loader would.
LOOP_BOUND_SHARE = 20.0
#: A GPU busy less than this share of the time (NVML's utilisation), while it neither waits for data
#: nor for the loop between steps, is starved by the host's launches: ``host-bound``.
HOST_BOUND_UTILIZATION = 50.0
#: A bottleneck must also be worth fixing: at least this many milliseconds per iteration. A few
#: microseconds of "data wait" in a loop with no data at all are no input pipeline to fix.
MATERIAL_MS = 0.5
#: A window judged bad stays so while its share is above this fraction of the threshold, so a
#: share that wanders around the line does not flip the verdict every window.
HYSTERESIS = 0.8
#: A bottleneck persists (it is warned about, and it is one of the run's) once it was the verdict of
#: this many windows after the warm-up...
PERSIST_WINDOWS = 3
#: ...and of at least this share of those windows: a one-off slow window never is.
PERSIST_SHARE = 0.3


def persists(windows: int, judged: int) -> bool:
    """Whether a verdict of ``windows`` of the ``judged`` windows after the warm-up is a bottleneck
    that persists."""
    return windows >= PERSIST_WINDOWS and windows >= PERSIST_SHARE * judged

#: The training process and its loader workers together using at least this share of the cores
#: they may run on, the workers at least ``CONTENTION_WORKERS_PCT`` of one core: they compete for CPU.
CONTENTION_LOAD_PCT = 90.0
CONTENTION_WORKERS_PCT = 50.0
#: ...while the step is slowed: the training process gets less than this share of the CPU its
#: compute needs (its compute share of the window times the cores its threads could use).
STARVED_SHARE = 0.75


@dataclass(frozen=True)
class CpuLoad:
    """What the CPU did in a window: the training process's and its loader workers' use, in percent
    of one core (200 = two cores busy), the cores the process may run on, and, when known, the
    threads the step computes with and the window's compute share (percent), which tell whether the
    step got the CPU it needed."""

    process_pct: float
    workers_pct: float
    cores: int
    step_threads: int | None = None
    compute_pct: float | None = None

    @property
    def load_pct(self) -> float:
        """Both together, in percent of all the cores."""
        return (self.process_pct + self.workers_pct) / max(1, self.cores)

    @property
    def needed_pct(self) -> float | None:
        """The CPU the step's compute needed, in percent of one core (``None`` when unknown)."""
        if self.step_threads is None or self.compute_pct is None:
            return None
        return self.compute_pct * min(self.step_threads, max(1, self.cores))

    @property
    def contended(self) -> bool:
        """The cores are full, the loader's workers hold a fair part of them, and (when known) the
        step got clearly less CPU than its compute needed: it was slowed."""
        if self.load_pct < CONTENTION_LOAD_PCT or self.workers_pct < CONTENTION_WORKERS_PCT:
            return False
        needed = self.needed_pct
        return needed is None or self.process_pct < STARVED_SHARE * needed

    def reason(self) -> str:
        text = (f"the training process ({self.process_pct:.0f}%) and its loader workers ({self.workers_pct:.0f}%) "
                f"use {self.load_pct:.0f}% of the {self.cores} cores they may run on")
        needed = self.needed_pct
        if needed is not None:
            text += f"; the step got {self.process_pct:.0f}% of a core where its compute needed {needed:.0f}%"
        return text + ": the step and the loader compete for CPU"


@dataclass(frozen=True)
class Thresholds:
    """Shares of a window's wall time, in percent, from which it is input-, GC- or loop-bound."""

    input_bound: float = INPUT_BOUND_SHARE
    gc_bound: float = GC_BOUND_SHARE
    loop_bound: float = LOOP_BOUND_SHARE


DEFAULT_THRESHOLDS = Thresholds()


def judge(
    window_s: float,
    etl_s: float,
    gc_s: float,
    other_s: float = 0.0,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    *,
    iterations: int = 1,
    previous: str | None = None,
    cpu: CpuLoad | None = None,
) -> Verdict:
    """Verdict for one window from its wall time and the data-wait, GC-pause and other host seconds in it
    (each without the others: GC pauses between steps are not in ``other_s``).

    A share makes the window bad when it reaches its threshold and is worth fixing (at least
    :data:`MATERIAL_MS` per iteration); the largest such share names the verdict. The previous
    window's bad verdict holds down to :data:`HYSTERESIS` times its threshold. When the process and
    its loader workers use about every core (``cpu``), the window is ``cpu-contention`` rather than
    input-bound or fine: more workers would only make that worse.

    Args:
        window_s: the window's wall time.
        etl_s: its data wait.
        gc_s: its GC pauses.
        other_s: its other host time.
        thresholds: the shares from which a window is bad.
        iterations: iterations in the window (for the per-iteration amount).
        previous: the previous window's verdict kind.
        cpu: the CPU use of the window, when known.
    """
    if window_s <= 0.0:
        return Verdict("fine", 0.0, "no time elapsed")
    etl_share = min(100.0, 100.0 * etl_s / window_s)
    gc_share = min(100.0, 100.0 * gc_s / window_s)
    other_share = min(100.0, 100.0 * other_s / window_s)
    material_s = MATERIAL_MS / 1000.0 * max(1, iterations)
    # The largest share over its line names the verdict (the first of equal ones); checked in line,
    # as this runs at every report.
    share, kind = -1.0, ""
    if etl_s >= material_s and etl_share >= _line(thresholds.input_bound, "input-bound", previous):
        share, kind = etl_share, "input-bound"
    gc_bound = gc_s >= material_s and gc_share >= _line(thresholds.gc_bound, "gc-bound", previous)
    if gc_bound and gc_share > share:
        share, kind = gc_share, "gc-bound"
    loop_bound = other_s >= material_s and other_share >= _line(thresholds.loop_bound, "loop-bound", previous)
    if loop_bound and other_share > share:
        share, kind = other_share, "loop-bound"
    if cpu is not None and not (gc_bound or loop_bound) and cpu.contended:
        return Verdict("cpu-contention", round(min(100.0, cpu.load_pct), 1), cpu.reason())
    if kind:
        words = f"{share:.0f}% {_REASONS[kind]}"
        if kind != "loop-bound":  # what free data or GC-free training would gain
            words += _gain_words(kind, speedup(window_s, etl_s if kind == "input-bound" else gc_s))
        return Verdict(kind, round(share, 1), words)
    text = f"data wait {etl_share:.0f}%, GC {gc_share:.0f}%"
    if other_share >= 1.0:
        text += f", other host work {other_share:.0f}%"
    return Verdict("fine", round(max(etl_share, gc_share, other_share), 1), text + " of step")


_REASONS = {
    "input-bound": "of step waiting for data",
    "gc-bound": "of step in garbage collection",
    "loop-bound": "of step in the loop's own host work, outside the loader and the step",
}


def _line(threshold: float, kind: str, previous: str | None) -> float:
    """The share from which a window is ``kind``: lower while the window before was (hysteresis)."""
    return threshold * HYSTERESIS if kind == previous else threshold


def _gain_words(kind: str, gain: float | None) -> str:
    """``: free data would make this run 1.85x faster`` for an input- or GC-bound verdict."""
    what = {"input-bound": "free data", "gc-bound": "GC-free training"}.get(kind)
    if what is None or gain is None:
        return ""
    return f": {what} would make this run {gain:.2f}x faster"


def judge_device(
    window_s: float,
    idle_s: float,
    data_idle_s: float,
    etl_s: float,
    gc_s: float,
    other_s: float = 0.0,
    *,
    iterations: int = 1,
    utilization: float | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    previous: str | None = None,
) -> Verdict:
    """Verdict for one window on an asynchronous device (CUDA), from what the device did.

    The rule of :func:`judge` holds here too: a share must reach its line and cost at least
    :data:`MATERIAL_MS` of the device's idle time per iteration, and the previous window's bad
    verdict holds down to :data:`HYSTERESIS` times its line.

    Host time counts only where the device sat idle for it: the device's idle time between steps
    goes first to the data wait before each forward (``data_idle_s``), then to GC pauses, then to
    the loop's own host work. Data wait hidden behind device work makes no window input-bound.

    Args:
        window_s: device time of the window (previous window's last step end to this one's).
        idle_s: the device's idle time between steps in the window.
        data_idle_s: of that, the idle time that free data would remove (see
            :meth:`~trainperf.records._timeline.DeviceWindow.data_idle_s`).
        etl_s: the host's data wait in the window.
        gc_s: GC pauses in the window.
        other_s: the loop's other host time, GC pauses left out.
        iterations: iterations in the window, for the per-batch figures in the reason.
        utilization: the GPU's utilisation in percent over the window (NVML), ``None`` when unknown.
        thresholds: the shares from which a window is input-, GC- or loop-bound.
        previous: the previous window's verdict kind.
    """
    if window_s <= 0.0:
        return Verdict("fine", 0.0, "no time elapsed")
    material_s = MATERIAL_MS / 1000.0 * max(1, iterations)

    def line(kind: str, threshold: float) -> float:
        return threshold * HYSTERESIS if kind == previous else threshold

    rest = max(0.0, idle_s - data_idle_s)
    gc_idle = min(rest, gc_s)
    loop_idle = min(max(0.0, rest - gc_idle), other_s)
    data_share = min(100.0, 100.0 * data_idle_s / window_s)
    gc_share = min(100.0, 100.0 * gc_idle / window_s)
    loop_share = min(100.0, 100.0 * loop_idle / window_s)
    idle_share = min(100.0, 100.0 * idle_s / window_s)
    if (
        data_share >= line("input-bound", thresholds.input_bound)
        and data_share >= max(gc_share, loop_share)
        and data_idle_s >= material_s
    ):
        gain = speedup(window_s, data_idle_s)
        return Verdict(
            "input-bound", round(data_share, 1), f"{data_share:.0f}% of the time the GPU waited for data" +
            _gain_words("input-bound", gain)
        )
    if gc_share >= line("gc-bound", thresholds.gc_bound) and gc_share >= loop_share and gc_idle >= material_s:
        return Verdict(
            "gc-bound", round(gc_share, 1), f"{gc_share:.0f}% of the time the GPU waited for garbage collection" +
            _gain_words("gc-bound", speedup(window_s, gc_idle))
        )
    if loop_share >= line("loop-bound", thresholds.loop_bound) and loop_idle >= material_s:
        return Verdict(
            "loop-bound", round(loop_share, 1),
            f"{loop_share:.0f}% of the time the GPU waited for the loop's own host work between steps",
        )
    if utilization is not None and utilization < HOST_BOUND_UTILIZATION:
        return Verdict(
            "host-bound", round(100.0 - utilization, 1),
            f"{100.0 - utilization:.0f}% of the time the GPU ran no kernel, yet it waited between steps only "
            f"{idle_share:.0f}% of the time: the host cannot launch work fast enough",
        )
    n = max(1, iterations)
    busy_ms = 1000.0 * (window_s - idle_s) / n
    if etl_s > 0.0:
        text = f"data: {1000.0 * etl_s / n:.0f} ms per batch, hidden behind {busy_ms:.0f} ms of GPU work"
    else:
        text = f"{busy_ms:.0f} ms of GPU work per step"
    return Verdict("fine", round(max(data_share, gc_share, loop_share), 1),
                   f"{data_share:.0f}% of the time the GPU waited for data; " + text)
