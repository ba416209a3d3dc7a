"""Multi-rank runs: the run directory every rank writes (its format, the sink that writes it and
the helpers that copy it), straggler finding, and the report built from a run directory (load,
analyse, HTML, JSON, Perfetto). Framework-free: the live exchange between ranks under
``torch.distributed`` is :mod:`trainperf.torch`'s.

The public names are re-exported from :mod:`trainperf` (``RunDirSink``, ``build_report``,
``write_report``, ``run_dir_files``, ``write_run_dir_files``). Every name here is imported on first
use: a listener without a run directory loads none of this package, and the run directory's sink
none of the report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..base import lazy_names as _lazy_names

if _TYPE_CHECKING:
    from ._command import add_goodput_command as add_goodput_command
    from ._command import add_report_command as add_report_command
    from ._copy import run_dir_files, write_run_dir_files
    from ._gather import clock_offset as clock_offset
    from ._gather import mean_figures as mean_figures
    from ._layout import RANK_FILES as RANK_FILES
    from ._report import REPORT_FORMATS, build_report, read_goodput, write_report
    from ._silent import name_silent as name_silent
    from ._sink import RunDirSink
    from ._sink import rank_dir as rank_dir
    from ._spans import RunDirLink as RunDirLink
    from ._stragglers import RankFigures, Straggler, find_stragglers
    from ._stragglers import cluster_line as cluster_line
    from ._stragglers import rank_figures as rank_figures
    from ._windows import LiveJudge as LiveJudge

__all__ = ["RunDirSink", "build_report", "read_goodput", "write_report", "REPORT_FORMATS", "run_dir_files",
           "write_run_dir_files", "RankFigures", "Straggler", "find_stragglers"]

if not _TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__, __dir__ = _lazy_names(__name__, {
        "run_dir_files": "._copy", "write_run_dir_files": "._copy",
        "REPORT_FORMATS": "._report", "build_report": "._report", "write_report": "._report",
        "read_goodput": "._report",
        "RunDirSink": "._sink", "RankFigures": "._stragglers", "Straggler": "._stragglers",
        "find_stragglers": "._stragglers",
        # used by the other parts of trainperf
        "add_report_command": "._command", "add_goodput_command": "._command", "clock_offset": "._gather",
        "mean_figures": "._gather",
        "RANK_FILES": "._layout", "rank_dir": "._sink", "RunDirLink": "._spans", "cluster_line": "._stragglers",
        "rank_figures": "._stragglers", "LiveJudge": "._windows", "name_silent": "._silent",
    })
