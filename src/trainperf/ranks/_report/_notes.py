"""What a report could not read, in plain words: skipped lines and unreadable files per rank, missing
and duplicated ranks, ranks restarted into their folder. The HTML page and the command line say the
same lines."""

from __future__ import annotations

from typing import Any

from ...records import counted

__all__: list[str] = []


def read_notes(report: dict[str, Any]) -> list[str]:
    """One line per thing the report left out or could not tell apart; none for a clean run."""
    notes: list[str] = []
    missing, total = report.get("missing_ranks") or [], report.get("missing_ranks_total") or 0
    if total:
        named = ", ".join(map(str, missing)) + (f" and {total - len(missing):,} more" if total > len(missing) else "")
        notes.append(f"{counted(total, 'rank')} without a folder: {named}")
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
        attempts, runs = rank.get("attempts") or [], rank.get("attempts_total") or 0
        if runs > 1:
            earlier = "; ".join(f"iterations {a['first']}-{a['last']} ({counted(a['windows'], 'window')})"
                                for a in attempts[:-1])
            last = attempts[-1]
            notes.append(f"rank {r}: {runs} runs wrote into its folder (restarted); the report reads the last, "
                         f"iterations {last['first']}-{last['last']}; earlier: {earlier}")
    return notes
