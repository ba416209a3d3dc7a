"""The ``trainperf`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    run_demo(iterations=args.iterations, frequency=args.frequency, decode_ms=args.decode_ms)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="trainperf", description="Why is my training slow?")
    parser.add_argument("--version", action="version", version=f"trainperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="train a small model with a slow, then a fixed, input pipeline")
    demo.add_argument("--iterations", type=int, default=120, help="iterations per phase (default 120)")
    demo.add_argument("--frequency", type=int, default=20, help="report every N iterations (default 20)")
    demo.add_argument("--decode-ms", type=float, default=12.0, help="simulated decode time per batch")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (OSError, ValueError) as exc:
        print(f"trainperf {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
