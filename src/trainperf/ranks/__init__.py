"""Multi-rank runs: the run directory every rank writes (its format, the sink that writes it and
the helpers that copy it), straggler finding, and the report built from a run directory (load,
analyse, HTML, JSON, Perfetto). Framework-free: the live exchange between ranks under
``torch.distributed`` is :mod:`trainperf.torch`'s.

The public names are re-exported from :mod:`trainperf` (``RunDirSink``, ``build_report``,
``write_report``, ``run_dir_files``, ``write_run_dir_files``).
"""

from __future__ import annotations

from ._copy import run_dir_files, write_run_dir_files
from ._report import REPORT_FORMATS, build_report, write_report
from ._sink import RunDirSink
from ._stragglers import RankFigures, Straggler, find_stragglers

__all__ = ["RunDirSink", "build_report", "write_report", "REPORT_FORMATS", "run_dir_files", "write_run_dir_files",
           "RankFigures", "Straggler", "find_stragglers"]

# used by the other parts of trainperf
from ._command import add_report_command as add_report_command
from ._gather import clock_offset as clock_offset
from ._gather import mean_figures as mean_figures
from ._layout import RANK_FILES as RANK_FILES
from ._sink import rank_dir as rank_dir
from ._spans import RunDirLink as RunDirLink
from ._stragglers import cluster_line as cluster_line
from ._stragglers import rank_figures as rank_figures
from ._windows import LiveJudge as LiveJudge
