"""The live verdict: what limits a window, judged from that window's own figures."""

from __future__ import annotations

from dataclasses import dataclass

from ._record import Verdict

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

def loop_work_s(other_s: float, gc_s: float) -> float:
    """The loop's own host work: its other time less GC pauses, which may fall between steps (an
    explicit ``gc.collect()`` after the step, say) and then belong to the GC's share."""
    return max(0.0, other_s - gc_s)


@dataclass(frozen=True)
class Thresholds:
    """Shares of a window's wall time, in percent, from which it is input-, GC- or loop-bound."""

    input_bound: float = INPUT_BOUND_SHARE
    gc_bound: float = GC_BOUND_SHARE
    loop_bound: float = LOOP_BOUND_SHARE


DEFAULT_THRESHOLDS = Thresholds()


def judge(
    window_s: float, etl_s: float, gc_s: float, other_s: float = 0.0, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> Verdict:
    """Verdict for one window from its wall time and the data-wait, GC-pause and other host seconds in it.

    The largest share that crosses its threshold names the verdict.
    """
    if window_s <= 0.0:
        return Verdict("fine", 0.0, "no time elapsed")
    etl_share = min(100.0, 100.0 * etl_s / window_s)
    gc_share = min(100.0, 100.0 * gc_s / window_s)
    other_share = min(100.0, 100.0 * loop_work_s(other_s, gc_s) / window_s)
    bound = [
        (share, kind, reason)
        for share, threshold, kind, reason in (
            (etl_share, thresholds.input_bound, "input-bound", "of step waiting for data"),
            (gc_share, thresholds.gc_bound, "gc-bound", "of step in garbage collection"),
            (other_share, thresholds.loop_bound, "loop-bound",
             "of step in the loop's own host work, outside the loader and the step"),
        )
        if share >= threshold
    ]
    if bound:
        share, kind, reason = max(bound, key=lambda b: b[0])
        return Verdict(kind, round(share, 1), f"{share:.0f}% {reason}")
    text = f"data wait {etl_share:.0f}%, GC {gc_share:.0f}%"
    if other_share >= 1.0:
        text += f", other host work {other_share:.0f}%"
    return Verdict("fine", round(max(etl_share, gc_share, other_share), 1), text + " of step")
