"""What the command line uses of the data package: ``trainperf bench``'s run and its table."""

from __future__ import annotations

from ._bench import format_bench, run_bench

__all__ = ["format_bench", "run_bench"]
