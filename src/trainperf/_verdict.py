"""The live verdict: what limits a window, judged from that window's own figures."""

from __future__ import annotations

from ._record import Verdict

__all__: list[str] = []

#: Data wait at or above this share of the window's wall time makes it input-bound.
#: TensorFlow's profiler calls a step "highly input-bound" from 20% of its time in input.
INPUT_BOUND_SHARE = 20.0
#: GC pauses at or above this share make a window GC-bound. The guide treats collections that
#: cost tens of milliseconds every few seconds as noticeable; a tenth of the wall time is well past that.
GC_BOUND_SHARE = 10.0

def judge(window_s: float, etl_s: float, gc_s: float) -> Verdict:
    """Verdict for one window from its wall time and the data-wait and GC-pause seconds in it."""
    if window_s <= 0.0:
        return Verdict("fine", 0.0, "no time elapsed")
    etl_share = min(100.0, 100.0 * etl_s / window_s)
    gc_share = min(100.0, 100.0 * gc_s / window_s)
    if etl_share >= INPUT_BOUND_SHARE and etl_share >= gc_share:
        return Verdict("input-bound", round(etl_share, 1), f"{etl_share:.0f}% of step waiting for data")
    if gc_share >= GC_BOUND_SHARE:
        return Verdict("gc-bound", round(gc_share, 1), f"{gc_share:.0f}% of step in garbage collection")
    return Verdict(
        "fine", round(max(etl_share, gc_share), 1), f"data wait {etl_share:.0f}%, GC {gc_share:.0f}% of step"
    )
