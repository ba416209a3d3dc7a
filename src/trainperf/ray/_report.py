"""The worker's side: ``ray.train.report`` with the listener's figures since the last report."""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from typing import Any

from ..base import ray_train_run_folder
from ..core import PerformanceListener
from ..ranks import RunDirSink, mean_figures
from ..sinks import scalar_metrics

__all__ = ["hand_back", "report", "run_dir_of"]

#: The key of trainperf's figures in the metrics every worker reports.
KEY = "trainperf"

_reported: weakref.WeakKeyDictionary[PerformanceListener, int] = weakref.WeakKeyDictionary()


def report(metrics: Mapping[str, Any] | None = None, *, listener: PerformanceListener, checkpoint: Any = None,
           **options: Any) -> None:
    """``ray.train.report(metrics, checkpoint, **options)`` with trainperf's figures added: the newest
    record's figures under ``trainperf/`` (as a metric logger names them) and, under ``"trainperf"``, this
    rank and its mean figures per iteration over the records since its last report, which
    :class:`PerformanceCallback` compares across ranks. As with ``ray.train.report`` itself, every rank
    must call it as many times as the others (it waits for them all); that wait is timed as the span
    ``report`` (``extra["report_ms"]``), which the straggler analysis leaves out.

    Args:
        metrics: the worker's own metrics (kept as they are).
        listener: the worker's listener.
        checkpoint: a ``ray.train.Checkpoint`` to report with them, if any.
        options: ``ray.train.report``'s other arguments (``checkpoint_dir_name``, ...).
    """
    import ray.train

    if not isinstance(listener, PerformanceListener):
        raise TypeError(f"listener must be a PerformanceListener, got {listener!r}")
    if metrics is not None and not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping or None, got {metrics!r}")
    out = dict(metrics or {})
    since = _reported.get(listener, 0)
    records = [r for r in listener.history if r.iteration > since]
    if records:
        _reported[listener] = records[-1].iteration
        out.update(scalar_metrics(records[-1]))
    out[KEY] = {"rank": listener.rank if listener.rank is not None else ray.train.get_context().get_world_rank(),
                "figures": mean_figures(records) if records else None}
    if listener.closed:
        ray.train.report(out, checkpoint=checkpoint, **options)
        return
    with listener.span("report"):  # a barrier: no rank's training time (the straggler analysis leaves it out)
        ray.train.report(out, checkpoint=checkpoint, **options)


def hand_back(metrics: Mapping[str, Any] | None = None, *, listener: PerformanceListener, **options: Any) -> str | None:
    """A worker's last report, after its training: closes ``listener`` (in a multi-rank run rank 0 then holds
    every rank's files) and calls :func:`report`. Where the run directory is not in the run's folder on Ray
    Train's storage (cloud storage: each worker wrote to its own disk), rank 0 reports it as the report's
    checkpoint, in a folder of the run named as the run directory (``checkpoint_dir_name``), where
    :func:`run_dir_of` finds it on the driver. Every rank calls it, once. Returns the folder handed over
    (``None``: none was, as on rank 1 and later, or with the run directory already on the storage).

    Args:
        metrics: the worker's own metrics for this last report.
        listener: the worker's listener (with a ``run_dir``; without one, only the report is made).
        options: ``ray.train.report``'s other arguments.
    """
    import ray.train

    if not isinstance(listener, PerformanceListener):
        raise TypeError(f"listener must be a PerformanceListener, got {listener!r}")
    found = [sink for sink in listener.sinks if isinstance(sink, RunDirSink)]
    listener.close()
    run_dir = os.path.abspath(found[0].path.parent) if found else None
    storage = ray_train_run_folder()
    on_storage = storage is not None and run_dir is not None and os.path.commonpath(
        [os.path.abspath(storage), run_dir]) == os.path.abspath(storage)
    checkpoint = None
    if run_dir is not None and not on_storage:
        options.setdefault("checkpoint_dir_name", os.path.basename(run_dir))
        if found[0].rank == 0:
            checkpoint = ray.train.Checkpoint.from_directory(run_dir)
    report(metrics, listener=listener, checkpoint=checkpoint, **options)
    return run_dir if checkpoint is not None else None


def run_dir_of(result: Any, name: str = "trainperf") -> str:
    """Where a run's run directory is on the driver: ``name`` (the workers' relative ``run_dir``) in the
    run's storage folder (``result.path``). On cloud storage it is first copied to a local folder of the
    same name in the working directory.

    Raises:
        FileNotFoundError: when the run has no such folder.
    """
    import pyarrow.fs

    filesystem, path = result.filesystem, os.path.join(result.path, name)
    if getattr(filesystem, "type_name", None) == "local":
        if not os.path.isdir(path):
            raise FileNotFoundError(f"the run at {result.path!r} has no folder {name!r} (the workers' run_dir?)")
        return path
    if filesystem.get_file_info(path).type != pyarrow.fs.FileType.Directory:
        raise FileNotFoundError(f"the run at {result.path!r} has no folder {name!r} (the workers' run_dir?)")
    local = os.path.abspath(name)
    pyarrow.fs.copy_files(path, local, source_filesystem=filesystem)
    return local
