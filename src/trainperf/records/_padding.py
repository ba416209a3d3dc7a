"""Padding: the share of a window's tokens that are pads, what computing them costs, and the verdict
``padding`` when that cost is worth fixing. Pure: plain numbers in, plain numbers out.

What the step spends on pads is estimated from the tokens: the layers that act on each position
(embeddings, projections, MLPs, the loss head) cost the same per position, pad or not, so their
share on pads is the padding share of the tokens exactly. Attention's scores grow with the square of
the padded length, and a sequence padded from ``l`` to ``L`` computes ``1 - (l/L)**2`` of them on
pads, more than ``1 - l/L``: the token share is a lower bound, close to the truth while sequences
are short beside the model's width (the quadratic term is then a small part of the step). A verdict
from it never overstates what packing would save.
"""

from __future__ import annotations

from ._record import Verdict
from ._verdict import HYSTERESIS, MATERIAL_MS

__all__: list[str] = []

#: A window is ``padding`` when computing pad tokens takes at least this share (percent) of its wall
#: time: the same line as ``input-bound`` and ``loop-bound``, a fifth of the time that a fix gives back.
#: A packed run (no pads) or a run padded to a few percent never reaches it. Like every verdict it
#: must also cost at least ``MATERIAL_MS`` per iteration, and holds down to ``HYSTERESIS`` of its line.
PADDING_SHARE = 20.0


def padding_share(real: int | None, padded: int | None) -> float | None:
    """``1 - real / padded``: the share of the computed positions that are pads (``None`` when either
    is unknown or nothing was computed; never below 0, should a count give more real than padded)."""
    if real is None or padded is None or padded <= 0:
        return None
    return max(0.0, 1.0 - real / padded)


def real_mfu(mfu: float | None, share: float | None) -> float | None:
    """The MFU spent on real tokens: ``mfu * real / padded`` (the device's peak share that computed
    real tokens); the MFU itself without padding, ``None`` when either is unknown."""
    if mfu is None or share is None:
        return None
    return mfu * (1.0 - share)


def judge_padding(verdict: Verdict | None, share: float | None, step_s: float, window_s: float, *,
                  iterations: int = 1, previous: str | None = None, line: float = PADDING_SHARE) -> Verdict | None:
    """``verdict``, or ``padding`` when computing pads takes at least ``line`` percent of the window and
    more than what ``verdict`` names (a bad verdict with a larger share keeps the window; so does
    ``cpu-contention``, which is judged on the cores, not on time).

    Args:
        verdict: the window's verdict from its times (``None``: verdicts are off, and stay so).
        share: its padding share of the tokens (:func:`padding_share`).
        step_s: the window's seconds in the step (the host's compute time, or the device's busy time).
        window_s: the window's wall time (or device time) the shares are of.
        iterations: iterations in the window, for the material amount.
        previous: the previous window's verdict kind (hysteresis).
        line: the share of the window, in percent, from which padding is the verdict.
    """
    if verdict is None or share is None or share <= 0.0 or window_s <= 0.0 or verdict.kind == "cpu-contention":
        return verdict
    pads_s = share * max(0.0, step_s)
    pct = min(100.0, 100.0 * pads_s / window_s)
    if pct < (line * HYSTERESIS if previous == "padding" else line):
        return verdict
    if pads_s < MATERIAL_MS / 1000.0 * max(1, iterations):
        return verdict
    if verdict.kind != "fine" and verdict.share >= pct:
        return verdict
    return Verdict("padding", round(pct, 1),
                   f"{pct:.0f}% of step computing padding ({100.0 * share:.0f}% of its tokens are pads): "
                   "pack sequences or bucket them by length")
