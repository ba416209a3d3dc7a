"""``trainperf report``: read a run directory, analyse it, and write HTML, JSON or a Perfetto trace."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ...base import atomic_write
from ._analyse import analyse, build_report
from ._folders import RunParts, rank_folders
from ._goodput import read_goodput, report_goodput
from ._html import render_html
from ._json import report_json
from ._load import load_run
from ._perfetto import perfetto_trace, perfetto_traces, write_trace

__all__ = ["build_report", "write_report", "read_goodput", "REPORT_FORMATS"]

#: What :func:`write_report` can write.
REPORT_FORMATS = ("html", "json", "perfetto")


def _write_text(path: Path, text: str) -> None:
    _write_with(path, lambda f: f.write(text))


def _write_with(path: Path, write: Callable[[IO[str]], Any]) -> None:
    try:
        atomic_write(path, write)
    except OSError as exc:
        raise OSError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc


def write_report(run_dir: str | os.PathLike[str], out: str | os.PathLike[str], fmt: str = "html", *,
                 say: Callable[[str], None] | None = None, out_name: str = "out") -> list[Path]:
    """Write the report of ``run_dir`` to ``out``, each file whole or not at all (a temporary file
    beside it, then a rename).

    Args:
        run_dir: a run directory (``rank-<r>`` folders).
        out: the file to write; for ``perfetto``, an existing folder (or a path ending in ``/``) gets
            one ``rank-<r>.json`` trace per rank, the layout Holistic Trace Analysis reads. Never a
            file or folder of the run being read.
        fmt: ``html``, ``json`` or ``perfetto``.
        say: called with each line of what could not be read (skipped lines, unreadable files,
            missing or duplicated ranks, restarts), as the HTML page states them.
        out_name: how errors about ``out`` name it (the command line: ``-o/--output``).

    Returns:
        The files written.

    Raises:
        ValueError: ``out`` is a file or folder of the run (through links too), or does not suit ``fmt``.
    """
    if fmt not in REPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(REPORT_FORMATS)}, got {fmt!r}")
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"{out_name} must be a path (str or os.PathLike), got {type(out).__name__}")
    folders = rank_folders(run_dir)
    as_folder = str(out).endswith(("/", os.sep))
    target = Path(out)
    many = fmt == "perfetto" and (as_folder or target.is_dir())
    # every path written, checked before anything is: the trace of each rank in a folder
    parts = RunParts(folders)
    for path in [target, *(target / f"rank-{r}.json" for r in folders.found)] if many else [target]:
        part = parts.part(path)
        if part is not None:
            raise ValueError(f"{out_name} {str(path)!r} {part} in the run directory being read; write the report "
                             "outside its rank folders")
    if as_folder and fmt != "perfetto":
        raise ValueError(f"{out_name} {str(out)!r} names a folder; the {fmt} report is one file: give its name")
    if as_folder and target.exists() and not target.is_dir():
        raise ValueError(f"{out_name} {str(out)!r} names a folder, but {str(out).rstrip('/' + os.sep)!r} is a file")
    if not as_folder and target.is_dir() and fmt != "perfetto":
        raise ValueError(f"{out_name} {str(out)!r} is a folder; the {fmt} report is one file: give its name")
    run = load_run(run_dir, folders)
    report = analyse(run, report_goodput(run_dir, folders))
    if say is not None:
        for note in report["notes"]:
            say(note)
    if fmt == "html":
        _write_text(target, render_html(report))
        return [target]
    if fmt == "json":
        _write_text(target, report_json(report))
        return [target]
    silent = {s["rank"]: s["since"] for s in report["silent"]}
    if many:
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for rank, trace in perfetto_traces(run.ranks, report["start"], silent).items():
            path = target / f"rank-{rank}.json"
            _write_with(path, functools.partial(write_trace, trace))
            written.append(path)
        return written
    _write_with(target, functools.partial(write_trace, perfetto_trace(run.ranks, report["start"], silent)))
    return [target]
