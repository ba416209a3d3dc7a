"""``trainperf report``: read a run directory, analyse it, and write HTML, JSON or a Perfetto trace."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ...base import atomic_write
from ._analyse import analyse, build_report
from ._html import render_html
from ._json import report_json
from ._load import load_run
from ._notes import read_notes
from ._perfetto import perfetto_trace, perfetto_traces, write_trace

__all__ = ["build_report", "write_report", "REPORT_FORMATS"]

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
                 say: Callable[[str], None] | None = None) -> list[Path]:
    """Write the report of ``run_dir`` to ``out``.

    Args:
        run_dir: a run directory (``rank-<r>`` folders).
        out: the file to write; for ``perfetto``, an existing folder (or a path ending in ``/``) gets
            one ``rank-<r>.json`` trace per rank, the layout Holistic Trace Analysis reads.
        fmt: ``html``, ``json`` or ``perfetto``.
        say: called with each line of what could not be read (skipped lines, unreadable files,
            missing or duplicated ranks, restarts), as the HTML page states them.

    Returns:
        The files written.
    """
    if fmt not in REPORT_FORMATS:
        raise ValueError(f"format must be one of {', '.join(REPORT_FORMATS)}, got {fmt!r}")
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a path (str or os.PathLike), got {type(out).__name__}")
    as_folder = str(out).endswith(("/", os.sep))
    if as_folder and fmt != "perfetto":
        raise ValueError(f"out {str(out)!r} names a folder; the {fmt} report is one file: give its name")
    if as_folder and Path(out).exists() and not Path(out).is_dir():
        raise ValueError(f"out {str(out)!r} names a folder, but {str(out).rstrip('/' + os.sep)!r} is a file")
    if not as_folder and Path(out).is_dir() and fmt != "perfetto":
        raise ValueError(f"out {str(out)!r} is a folder; the {fmt} report is one file: give its name")
    ranks = load_run(run_dir)
    report = analyse(ranks)
    if say is not None:
        for note in read_notes(report):
            say(note)
    target = Path(out)
    if fmt == "html":
        _write_text(target, render_html(report))
        return [target]
    if fmt == "json":
        _write_text(target, report_json(report))
        return [target]
    silent = {s["rank"]: s["since"] for s in report["silent"]}
    if target.is_dir() or str(out).endswith(("/", os.sep)):
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for rank, trace in perfetto_traces(ranks, report["start"], silent).items():
            path = target / f"rank-{rank}.json"
            _write_with(path, functools.partial(write_trace, trace))
            written.append(path)
        return written
    _write_with(target, functools.partial(write_trace, perfetto_trace(ranks, report["start"], silent)))
    return [target]
