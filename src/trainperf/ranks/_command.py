"""``trainperf report RUN_DIR -o OUT``: the distributed run's report as HTML, JSON or a Perfetto trace."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = ["add_report_command", "add_goodput_command"]


def _report(args: argparse.Namespace) -> int:
    from ..base import Progress
    from ._report import write_report

    fmt: str = args.format or ("json" if args.output.endswith(".json") else "html")
    # a large run directory takes a while: said on standard error when it lasts
    with Progress("trainperf report", announce=False) as progress:
        progress.step(f"reading {args.run_dir} and writing {args.output}")
        written = write_report(args.run_dir, args.output, fmt,
                               say=lambda note: print(f"note: {note}", file=sys.stderr), out_name="-o/--output")
    where = written[0] if len(written) == 1 else f"{len(written)} files in {args.output}"
    print(f"wrote {where}", file=sys.stderr)
    return 0


def add_report_command(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    """Register ``trainperf report`` through the main parser's ``command(name, summary, example)``."""
    report = command("report", "report a run directory: per-rank timeline, stragglers and their cause, "
                               "clock alignment, silent ranks",
                     "trainperf report runs/today -o report.html   (--format json | perfetto)")
    report.add_argument("run_dir", help="the run directory that listeners with run_dir= wrote (rank-<r> folders)")
    report.add_argument("-o", "--output", required=True,
                        help="the file to write (never one of the run's: a path into a rank folder is refused); "
                             "with --format perfetto a folder (ending in /) gets one trace per rank, as Holistic "
                             "Trace Analysis reads them")
    report.add_argument("--format", choices=("html", "json", "perfetto"),
                        help="html (default; json when --output ends in .json), json or perfetto")
    report.set_defaults(func=_report)


def _goodput(args: argparse.Namespace) -> int:
    import json

    from ..base import Progress
    from ._report import read_goodput

    with Progress("trainperf goodput", announce=False) as progress:
        progress.step(f"reading {args.run_dir}")
        account = read_goodput(args.run_dir)
    if args.json:
        print(json.dumps(account.to_dict(), indent=1))
        return 0
    print("\n".join(account.lines()))
    if len(account.ranks) > 1:
        print("  per rank: " + ", ".join(
            f"{rank} {100 * a.goodput:.1f}%" if a.goodput is not None else f"{rank} -"
            for rank, a in sorted(account.ranks.items())[:16]) + (" ..." if len(account.ranks) > 16 else ""))
    return 0


def add_goodput_command(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    """Register ``trainperf goodput`` through the main parser's ``command(name, summary, example)``."""
    goodput = command("goodput", "how much of a run directory's whole time trained the model, and where the "
                                 "rest went: start-up, data wait, checkpoints, restarts...",
                      "trainperf goodput runs/today   (--json)")
    goodput.add_argument("run_dir", help="the run directory that listeners with run_dir= wrote (rank-<r> folders)")
    goodput.add_argument("--json", action="store_true", help="the rows, with seconds and shares, as JSON")
    goodput.set_defaults(func=_goodput)
