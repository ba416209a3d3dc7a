"""What a report could not read or see, in plain words: ranks whose collectives were not timed (FSDP),
skipped lines and unreadable files per rank, missing and duplicated ranks, folders named like a rank
and left out, ranks restarted into their folder, an MFU above 100%. The HTML page, the JSON report
(``notes``) and the command line say the same lines."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ...records import MFU_ABOVE_PEAK, counted

__all__: list[str] = []

#: Rank ranges named in a note; the rest are counted.
MAX_RANGES = 20


def ranks_words(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"ranks 0-2, 5"``; one rank as ``"rank 3"``; past :data:`MAX_RANGES` ranges,
    the rest counted."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ranges_words(runs, len(ranks))


def ranges_words(ranges: list[list[int]], total: int) -> str:
    """Ranges of ranks ``[[0, 2], [5, 5]]`` as ``"ranks 0-2, 5"`` (``"rank 3"`` when ``total`` is one);
    past :data:`MAX_RANGES` ranges, or past the ranges given, the rest of ``total`` counted."""
    named = [str(a) if a == b else f"{a}-{b}" for a, b in ranges[:MAX_RANGES]]
    rest = total - sum(b - a + 1 for a, b in ranges[:MAX_RANGES])
    return ("rank " if total == 1 else "ranks ") + ", ".join(named) + (f" and {rest:,} more" if rest > 0 else "")


def figure_words(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, never in exponent form, so that a small rate reads
    as what it is rather than 0.

    Example:
        >>> figure_words(0.000213456), figure_words(0.15), figure_words(1234.5), figure_words(2e-5)
        ('0.000213', '0.15', '1230', '0.00002')
    """
    return format(Decimal(f"{value:.{digits}g}"), "f")


def mfu_words(mfu: float) -> str:
    """An MFU as a percentage: one decimal, or two significant digits below 0.1% (``"3.0%"``, ``"0.012%"``)."""
    pct = 100.0 * mfu
    return f"{pct:.1f}%" if pct >= 0.1 or pct <= 0 else f"{figure_words(pct, 2)}%"


def untimed_lines(report: dict[str, Any]) -> list[str]:
    """One line per reason the collectives of some ranks were not timed (FSDP)."""
    return [f"collectives not timed ({u['why']}) on {ranks_words(u['ranks'])}: stragglers are named only from "
            "what precedes the collectives (data wait, host time after the step, GC); a late forward pass, "
            "backward pass or optimizer step names no rank" for u in report.get("collectives_untimed") or []]


def read_notes(report: dict[str, Any]) -> list[str]:
    """One line per thing the report left out or could not tell apart; none for a clean run."""
    notes = untimed_lines(report)
    if report.get("goodput_missing"):
        notes.append(f"goodput not known: {report['goodput_missing']}")
    missing, total = report.get("missing_ranks") or [], report.get("missing_ranks_total") or 0
    if total:
        notes.append(f"{ranges_words(missing, total)} absent ({counted(total, 'rank')} without a folder)")
    ignored = report.get("ignored_folders") or []
    for folder in ignored:
        notes.append(f"folder {folder['name']!r} left out: {folder['why']}")
    more = (report.get("ignored_folders_total") or 0) - len(ignored)
    if more > 0:
        notes.append(f"{counted(more, 'more folder')} named like a rank left out")
    for rank in report["ranks"]:
        r = rank["rank"]
        for name in rank.get("duplicates") or []:
            notes.append(f"rank {r}: folder {name} names the same rank as {rank['folder']}; only "
                         f"{rank['folder']} was read")
        skipped = {f: n for f, n in (rank.get("skipped") or {}).items() if n}
        if skipped:
            files = ", ".join(f"{counted(n, 'line')} of {f}" for f, n in skipped.items())
            notes.append(f"rank {r}: skipped {files} (cut, not JSON, or values no run writes)")
        for name, why in (rank.get("unreadable") or {}).items():
            notes.append(f"rank {r}: {name} could not be read: {why}")
        stride = rank.get("window_stride") or 1
        if stride > 1:
            notes.append(f"rank {r}: more windows than the report holds; one in {stride} was read, over the "
                         "whole run")
        if rank.get("spans_not_read"):
            notes.append(f"rank {r}: {counted(rank['spans_not_read'], 'span')} of the timeline beyond what the "
                         "report holds were not read")
        mfu = rank.get("mfu")
        if mfu is not None and mfu > 1:
            notes.append(f"rank {r}: MFU {mfu_words(mfu)} is {MFU_ABOVE_PEAK}")
        attempts, runs = rank.get("attempts") or [], rank.get("attempts_total") or 0
        if runs > 1:
            earlier = "; ".join(f"iterations {a['first']}-{a['last']} ({counted(a['windows'], 'window')})"
                                for a in attempts[:-1])
            last = attempts[-1]
            notes.append(f"rank {r}: {runs} runs wrote into its folder (restarted); the report reads the last, "
                         f"iterations {last['first']}-{last['last']}; earlier: {earlier}")
    return notes
