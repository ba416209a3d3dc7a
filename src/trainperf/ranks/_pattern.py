"""When a rank's extra time comes back: every n-th iteration (a checkpoint, an evaluation, a log
flush), or now and then."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

__all__ = ["recurrence"]

#: At least this many slow iterations before a pattern is told.
MIN_SPIKES = 3
#: The gap between slow iterations that is "every n-th" must hold for this share of them.
REGULAR_SHARE = 0.8


def recurrence(iterations: Sequence[int], values_ms: Sequence[float], floor_ms: float, words: str) -> str | None:
    """The pattern of ``values_ms`` (one per iteration) in plain words, such as ``"every 5th
    iteration, 100.2 ms of host time"``; ``None`` when fewer than :data:`MIN_SPIKES` iterations
    stand out.

    An iteration stands out when its value exceeds the usual one (the lower quartile) by at least
    ``floor_ms`` and by half of the largest excess; its excess is what the pattern tells.

    Args:
        iterations: the iteration numbers, in order.
        values_ms: the phase's time in each of them.
        floor_ms: the least excess that counts (the straggler margin).
        words: what the time is (``"host time"``).

    Example:
        >>> recurrence(list(range(1, 21)), [100.0 if i % 5 == 0 else 1.0 for i in range(1, 21)], 3.0, "host time")
        'every 5th iteration, 99.0 ms of host time'
    """
    if len(iterations) != len(values_ms):
        raise ValueError(f"iterations and values_ms must be as long, got {len(iterations)} and {len(values_ms)}")
    if len(values_ms) < MIN_SPIKES:
        return None
    base = sorted(values_ms)[len(values_ms) // 4]  # the usual iteration's: work every 2nd iteration moves the median
    top = max(values_ms) - base
    cut = max(floor_ms, top / 2.0)
    spikes = [(i, v - base) for i, v in zip(iterations, values_ms, strict=True) if v - base >= cut]
    if len(spikes) < MIN_SPIKES:
        return None
    excess = statistics.median(e for _, e in spikes)
    gaps = Counter(b[0] - a[0] for a, b in zip(spikes, spikes[1:], strict=False))
    gap = gaps.most_common(1)[0][0]
    # regular: the slow iterations fall on (nearly) every gap-th iteration of those seen (spans may
    # cover some windows only, so gaps between them are multiples of the period)
    start = spikes[0][0]
    due = sum(1 for i in iterations if i >= start and (i - start) % gap == 0)
    on_time = sum(1 for i, _ in spikes if (i - start) % gap == 0)
    if gap > 1 and on_time >= REGULAR_SHARE * len(spikes) and on_time >= REGULAR_SHARE * due:
        return f"every {_ordinal(gap)} iteration, {excess:.1f} ms of {words}"
    return f"{len(spikes)} of {len(values_ms)} iterations, {excess:.1f} ms of {words} each"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
