"""The ``trainperf`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from .._atomic import atomic_write

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    run_demo(iterations=args.iterations, frequency=args.frequency, decode_ms=args.decode_ms)
    return 0


def _parse(args: argparse.Namespace) -> int:
    from .._logs import parse_log

    out: str | None = args.output
    if out is not None and not out.endswith((".csv", ".jsonl", ".json")):
        raise ValueError(f"--output must end in .csv or .jsonl, got {out!r}")
    log = parse_log(args.log)
    print(f"{args.log}: {len(log)} listener lines, {log.skipped} other lines skipped"
          + (", a cut-off last line skipped" if log.truncated else ""), file=sys.stderr)
    if out is None:
        frame = log.to_pandas()
        print(frame.to_string(max_rows=20))
        return 0
    frame = log.to_pandas()
    if out.endswith(".csv"):
        atomic_write(out, lambda f: frame.to_csv(f, index=False))
    else:
        atomic_write(out, lambda f: frame.to_json(f, orient="records", lines=True))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from .._logs import parse_log, plot

    fig = plot(parse_log(args.log), title=args.title)
    out: str = args.output
    suffix = os.path.splitext(out)[1][1:] or "png"
    atomic_write(out, lambda f: fig.savefig(f, format=suffix, dpi=args.dpi), binary=True)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _factory(spec: str, what: str) -> Any:
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--{what} must look like package.module:function, got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--{what} {spec!r}: {exc}") from exc
    return factory() if callable(factory) else factory


def _doctor(args: argparse.Namespace) -> int:
    from .._doctor import doctor

    model = _factory(args.model, "model") if args.model else None
    loader = _factory(args.loader, "loader") if args.loader else None
    report = doctor(model=model, loader=loader, steps=args.steps)
    print(report.to_json(indent=2) if args.json else report)
    return 0


def _bench(args: argparse.Namespace) -> int:
    import json

    from ..data._bench import format_bench, run_bench

    if args.model or args.loader:
        if not (args.model and args.loader):
            raise ValueError("--model and --loader go together")
        model_spec, loader_spec = args.model, args.loader
        results = run_bench(lambda: _factory(model_spec, "model"), lambda: _factory(loader_spec, "loader"),
                            epochs=args.epochs)
    else:
        from ._demo import demo_factories

        make_model, make_loader = demo_factories(iterations=args.iterations, decode_ms=args.decode_ms)
        results = run_bench(make_model, make_loader, epochs=args.epochs)
    if args.json:
        print(json.dumps({"results": [r.to_dict() for r in results]}, indent=2))
    else:
        print(format_bench(results))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="trainperf", description="Why is my training slow?")
    parser.add_argument("--version", action="version", version=f"trainperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="train a small model with a slow, then a fixed, input pipeline")
    demo.add_argument("--iterations", type=int, default=120, help="iterations per phase (default 120)")
    demo.add_argument("--frequency", type=int, default=20, help="report every N iterations (default 20)")
    demo.add_argument("--decode-ms", type=float, default=12.0, help="simulated decode time per batch")
    demo.set_defaults(func=_demo)

    doc = sub.add_parser("doctor", help="check the 13 common causes of slow training")
    doc.add_argument("--json", action="store_true", help='print {"checks": [...]} as JSON')
    doc.add_argument("--model", help="package.module:make_model, a factory returning the model")
    doc.add_argument("--loader", help="package.module:make_loader, a factory returning the data loader")
    doc.add_argument("--steps", type=int, default=5, help="batches to time when a loader is given")
    doc.set_defaults(func=_doctor)

    bench = sub.add_parser("bench", help="train as given, with prefetch, and from pre-saved data; compare")
    bench.add_argument("--model", help="package.module:make_model (default: the demo's model)")
    bench.add_argument("--loader", help="package.module:make_loader (default: the demo's slow pipeline)")
    bench.add_argument("--epochs", type=int, default=1)
    bench.add_argument("--iterations", type=int, default=60, help="batches of the demo data")
    bench.add_argument("--decode-ms", type=float, default=12.0, help="the demo's decode time per batch")
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(func=_bench)

    parse = sub.add_parser("parse", help="read listener lines (trainperf, JSON lines, Deeplearning4j) into a table")
    parse.add_argument("log", help="the log file")
    parse.add_argument("-o", "--output", help="write the table to this .csv or .jsonl file")
    parse.set_defaults(func=_parse)

    plot = sub.add_parser("plot", help="plot a log: iteration time, data wait, throughput, GC and score")
    plot.add_argument("log", help="the log file")
    plot.add_argument("-o", "--output", required=True, help="the image to write (.png, .svg, .pdf)")
    plot.add_argument("--title", help="the figure's title")
    plot.add_argument("--dpi", type=int, default=110)
    plot.set_defaults(func=_plot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (OSError, ValueError, ImportError) as exc:
        print(f"trainperf {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
