"""The ``trainperf`` command line."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..base import atomic_write
from ..ranks import add_goodput_command, add_report_command
from ..records import counted

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    run_demo(iterations=args.iterations, frequency=args.frequency, decode_ms=args.decode_ms)
    return 0


_TABLES = (".csv", ".jsonl")
_IMAGES = (".png", ".svg", ".pdf")


def _read_log(path: str) -> Any:
    """A :class:`~trainperf.ParsedLog` of ``path`` (``-``: standard input)."""
    from ..logs import parse_log

    return parse_log(sys.stdin.buffer if path == "-" else path)


def _parse(args: argparse.Namespace) -> int:
    from ._tables import csv_table, log_table, write_csv, write_json_lines

    out: str | None = args.output
    if out is not None and out != "-" and not out.endswith(_TABLES):
        raise ValueError(f"--output must end in {' or '.join(_TABLES)} (or be - for standard output), got {out!r}")
    if args.log.endswith(".csv"):  # what CsvSink writes, or what this command wrote
        try:
            with open(args.log, newline="", encoding="utf-8", errors="replace") as file:
                table = csv_table(file, args.log)
        except OSError as exc:
            raise OSError(f"cannot read {args.log!r}: {exc.strerror or exc}") from exc
        print(f"{args.log}: {counted(len(table), 'record')}", file=sys.stderr)
    else:
        log = _read_log(args.log)
        if not len(log):
            raise ValueError(f"{args.log}: no listener lines found ({counted(log.skipped, 'other line')})")
        print(f"{args.log}: {counted(len(log), 'listener line')}, {counted(log.skipped, 'other line')} skipped"
              + (f", {counted(log.truncated, 'cut-off line')} skipped" if log.truncated else ""), file=sys.stderr)
        table = log_table(log)
    write = write_csv if out is None or out == "-" or out.endswith(".csv") else write_json_lines
    if out is None or out == "-":
        write(table, sys.stdout)
        sys.stdout.flush()  # a closed pipe (`| head`) is met here, inside main's handler
        return 0
    _write(out, lambda f: write(table, f))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _write(path: str, write: Any, *, binary: bool = False) -> None:
    """Write ``path`` whole or not at all; an error names ``path``, not the temporary file."""
    try:
        atomic_write(path, write, binary=binary)  # type: ignore[call-overload]
    except OSError as exc:
        raise OSError(f"cannot write {path!r}: {exc.strerror or exc}") from exc


def _plot(args: argparse.Namespace) -> int:
    from ..logs import plot

    out: str = args.output
    suffix = os.path.splitext(out)[1].lower()
    if suffix not in _IMAGES:
        raise ValueError(f"--output must end in {', '.join(_IMAGES)}, got {out!r}")
    if args.log.endswith(".csv"):  # what CsvSink writes, or what `trainperf parse -o x.csv` wrote
        import pandas as pd

        try:
            data: Any = pd.read_csv(args.log)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read {args.log!r} as CSV: {exc}") from exc
        if "iteration" not in data:
            raise ValueError(f"{args.log}: no 'iteration' column, so no listener records")
    else:
        data = _read_log(args.log)
        if not len(data):
            raise ValueError(f"{args.log}: no listener lines found ({counted(data.skipped, 'other line')})")
    fig = plot(data, title=args.title, rank=args.rank, run=args.run)
    _write(out, lambda f: fig.savefig(f, format=suffix[1:], dpi=args.dpi), binary=True)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _factory(spec: str, what: str) -> Any:
    factory = _named(spec, what)
    try:
        made = factory() if callable(factory) else factory
    except Exception as exc:  # noqa: BLE001 - the user's code: said in one line, with where it failed
        raise ValueError(f"--{what} {spec!r} raised {type(exc).__name__}: {exc}") from exc
    if what == "model" and not callable(getattr(made, "parameters", None)):
        raise ValueError(f"--model {spec!r} must give a torch.nn.Module, got {type(made).__name__}")
    if what == "loader" and (not hasattr(made, "__iter__") or callable(getattr(made, "parameters", None))):
        model = callable(getattr(made, "parameters", None))  # a Sequential model is iterable too
        raise ValueError(f"--loader {spec!r} must give an iterable data loader, got {type(made).__name__}"
                         + (" (a model: give it as --model)" if model else ""))
    return made


def _optimizer(spec: str, model: Any) -> Any:
    """The optimizer ``--optimizer module:function`` makes from the model's parameters."""
    if model is None:
        raise ValueError("--optimizer needs --model: it is called with the model's parameters")
    factory = _function(spec, "optimizer")
    try:
        made = factory(model.parameters())
    except Exception as exc:  # noqa: BLE001 - the user's code: said in one line, with where it failed
        raise ValueError(f"--optimizer {spec!r} raised {type(exc).__name__}: {exc}") from exc
    if not callable(getattr(made, "step", None)) or not hasattr(made, "param_groups"):
        raise ValueError(f"--optimizer {spec!r} must give a torch.optim.Optimizer, got {type(made).__name__}")
    return made


def _named(spec: str, what: str) -> Any:
    """What ``module:name`` names, as given to ``--what``."""
    import importlib

    if os.getcwd() not in sys.path and "" not in sys.path:  # `trainperf` as a console script: find ./mytrain.py
        sys.path.insert(0, os.getcwd())
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--{what} must look like package.module:function, got {spec!r}")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--{what} {spec!r}: {exc}") from exc


def _function(spec: str, what: str) -> Any:
    """The function ``module:function`` names (not called)."""
    function = _named(spec, what)
    if not callable(function):
        raise ValueError(f"--{what} {spec!r} must name a function, got {type(function).__name__}")
    return function


def _doctor(args: argparse.Namespace) -> int:
    _needs_torch("doctor")
    from ..base import Progress
    from ..diagnosis import doctor

    # said on standard error only when a step lasts (a slow factory, a slow loader)
    with Progress("trainperf doctor", announce=False) as progress:
        if args.model or args.loader:
            progress.step(f"building {' and '.join(f'--{w}' for w in ('model', 'loader') if getattr(args, w))}")
        model = _factory(args.model, "model") if args.model else None
        loader = _factory(args.loader, "loader") if args.loader else None
        optimizer = _optimizer(args.optimizer, model) if args.optimizer else None
        progress.step("reading the environment" + (", watching the model" if model is not None else "")
                      + (f", timing {args.steps} batches of the loader and measuring one step's memory"
                         if loader is not None else ""))
        report = doctor(model=model, loader=loader, optimizer=optimizer, steps=args.steps)
    print(report.to_json(indent=2) if args.json else report)
    return 1 if any(check.status == "fail" for check in report.checks) else 0


def _bench(args: argparse.Namespace) -> int:
    import json

    _needs_torch("bench")

    from ..base import Progress
    from ..data.shared import format_bench, run_bench

    if args.model or args.loader:
        if not (args.model and args.loader):
            raise ValueError("--model and --loader go together")
        model_spec, loader_spec = args.model, args.loader
        batch_loss = _function(args.loss, "loss") if args.loss else None
        make_model, make_loader = lambda: _factory(model_spec, "model"), lambda: _factory(loader_spec, "loader")
    else:
        from ._demo import demo_factories

        if args.loss:
            raise ValueError("--loss goes with --model and --loader (the demo's batches are (inputs, targets))")
        make_model, make_loader = demo_factories(iterations=args.iterations, decode_ms=args.decode_ms)
        batch_loss = None
    # what is being measured, on standard error: the table alone goes to standard output
    with Progress("trainperf bench", total=1 + 3 * args.repeats) as progress:
        results = run_bench(make_model, make_loader, epochs=args.epochs, repeats=args.repeats, batch_loss=batch_loss,
                            progress=progress)
    if args.json:
        print(json.dumps({"results": [r.to_dict() for r in results]}, indent=2))
    else:
        print(format_bench(results))
    return 0


def _int_from(text: str, minimum: int, kind: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a {kind} integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be a {kind} integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    return _int_from(text, 0, "non-negative")


def _positive_int(text: str) -> int:
    return _int_from(text, 1, "positive")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive, finite number, got {text!r}")
    return value


def _milliseconds(text: str) -> float:
    value = _positive_float(text)
    if value > MAX_DECODE_MS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DECODE_MS:g} ms, got {text!r}")
    return value


def _dpi(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_DPI:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DPI} (a figure is about 9 inches wide), got {text!r}")
    return value


#: The longest simulated decode per batch ``demo`` and ``bench`` take (a minute).
MAX_DECODE_MS = 60_000.0
#: The finest resolution ``plot`` draws at: 9 inches at 1,200 dpi is already 10,800 pixels wide.
MAX_DPI = 1200


def _needs_torch(command: str) -> None:
    """The install hint, instead of ``No module named 'torch'``, for a command that trains."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as exc:
        raise ImportError(f"trainperf {command} needs PyTorch: pip install 'trainperf[torch]'") from exc


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="trainperf",
        description="Why is my training slow? Data wait, iteration time, throughput, GC and a verdict.",
        epilog="Run `trainperf COMMAND --help` for a command's options and an example.",
    )
    parser.add_argument("--version", action="version", version=f"trainperf {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, example: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, epilog=f"example: {example}",
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    demo = command("demo", "train a small model with a slow, then a fixed, input pipeline", "trainperf demo")
    demo.add_argument("--iterations", type=_positive_int, default=120, help="iterations per phase (default 120)")
    demo.add_argument("--frequency", type=_positive_int, default=20, help="report every N iterations (default 20)")
    demo.add_argument("--decode-ms", type=_milliseconds, default=12.0,
                      help="simulated decode time per batch, in ms (default 12)")
    demo.set_defaults(func=_demo)

    doc = command("doctor", "check the 13 common causes of slow training; exits 1 when a check fails",
                  "trainperf doctor --model mytrain:make_model --loader mytrain:make_loader")
    doc.add_argument("--json", action="store_true", help='print {"checks": [...], "memory": {...}} as JSON')
    doc.add_argument("--model", help="module:function returning the model (the module is looked up from the "
                                     "current folder too)")
    doc.add_argument("--loader", help="module:function returning the data loader")
    doc.add_argument("--optimizer", help="module:function called with the model's parameters, returning the "
                                         "optimizer (torch.optim:AdamW works as it is), so that the memory split "
                                         "counts its state")
    doc.add_argument("--steps", type=_positive_int, default=5,
                     help="batches to time when a loader is given (default 5)")
    doc.set_defaults(func=_doctor)

    bench = command("bench", "train as given, with prefetch, and from pre-saved data, and compare the three",
                    "trainperf bench --model mytrain:make_model --loader mytrain:make_loader --epochs 2")
    bench.description = (
        "Train a fresh model (from --model, a function taking no argument) on the batches of --loader (a\n"
        "function returning an iterable of batches) three ways: as given, through trainperf.data.prefetch,\n"
        "and from batches pre-saved once with trainperf.data.presave. Each step is a plain SGD step on the\n"
        "loss: cross entropy of model(inputs) against targets for (inputs, targets) batches; for any other\n"
        "batch, --loss names a function(model, batch) returning the loss. The modes take turns --repeats\n"
        "times; each line is the mode's median run, with the fastest and slowest totals as its spread.\n"
        "Without --model and --loader, the demo's model and slow pipeline are used.")
    bench.add_argument("--model", help="module:function returning the model (default: the demo's model)")
    bench.add_argument("--loader", help="module:function returning the loader (default: the demo's slow pipeline)")
    bench.add_argument("--epochs", type=_positive_int, default=1, help="passes over the data per mode (default 1)")
    bench.add_argument("--iterations", type=_positive_int, default=60, help="batches of the demo data (default 60)")
    bench.add_argument("--decode-ms", type=_milliseconds, default=12.0,
                       help="the demo's decode time per batch, in ms (default 12)")
    bench.add_argument("--loss", help="module:function(model, batch) returning the loss, for batches that are not "
                       "(inputs, targets) pairs")
    bench.add_argument("--repeats", type=_positive_int, default=3, help="runs per mode (default 3); the median counts")
    bench.add_argument("--json", action="store_true", help="print the results as JSON")
    bench.set_defaults(func=_bench)

    parse = command("parse", "read listener lines (trainperf, JSON lines, Deeplearning4j) into a CSV table",
                    "trainperf parse train.log -o train.csv   (or: cat train.log | trainperf parse -)")
    parse.add_argument("log", help="the log file, or - for standard input")
    parse.add_argument("-o", "--output", help="write the table to this .csv or .jsonl file (default: CSV to "
                                              "standard output)")
    parse.set_defaults(func=_parse)

    plot = command("plot", "plot a run: where the time went, iteration time, data wait, throughput, GC, score",
                   "trainperf plot train.log -o train.png   (also a CsvSink's .csv or a .jsonl file)")
    plot.add_argument("log", help="a log, a JSON lines file, a CSV file written by CsvSink, or - for standard input")
    plot.add_argument("-o", "--output", required=True, help="the image to write: .png, .svg or .pdf")
    plot.add_argument("--title", help="the figure's title")
    plot.add_argument("--dpi", type=_dpi, default=110, help="resolution of a .png (default 110, at most 1200)")
    plot.add_argument("--rank", type=_non_negative_int, help="draw only this rank's lines (a log of several ranks "
                      "draws each apart by default)")
    plot.add_argument("--run", type=_positive_int, help="draw only this run, 1 for the first (a log that holds "
                      "restarts draws each run in a column of its own by default)")
    plot.set_defaults(func=_plot)
    add_report_command(command)
    add_goodput_command(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # the reader went away (`trainperf parse log | head`): nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's last flush does not fail too
        return 0
    except (OSError, ValueError, ImportError) as exc:
        print(f"trainperf {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
