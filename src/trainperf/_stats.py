"""Window statistics over plain numbers."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["percentile", "safe_rate"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of an ascending sequence.

    Args:
        sorted_values: ascending values, at least one.
        q: percentile in [0, 100].
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of an empty window")
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def safe_rate(amount: float, seconds: float) -> float | None:
    """``amount / seconds``, or ``None`` when the interval is not positive."""
    if seconds <= 0.0:
        return None
    return amount / seconds
