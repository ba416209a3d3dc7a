"""MLflow: the figures in the run the user has active, at the record's iteration and wall-clock time."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import PerformanceRecord
from ._tracked import Tracked, check_start, cluster_metrics, record_metrics

__all__ = ["MlflowSink", "mlflow_key"]

_REFUSED = re.compile(r"[^/\w.\- :]")


def mlflow_key(name: str) -> str:
    """``name`` with every character MLflow refuses in a metric's or tag's name (outside
    ``[/\\w.\\- :]``) made ``_``.

    >>> mlflow_key("trainperf/gc/gen(0)/ms")
    'trainperf/gc/gen_0_/ms'
    """
    return _REFUSED.sub("_", name)


class MlflowSink:
    """Logs every record to an MLflow run: its figures under ``trainperf/`` (named as
    :class:`TensorBoardSink` names them) at ``step=iteration`` with the record's wall-clock timestamp,
    so they line up with MLflow's ``system/`` metrics; all of what the writer thread hands over at once
    goes in one ``log_batch`` call. The verdict's text is the tag ``trainperf.verdict`` whenever the
    verdict changes.

    Args:
        run: the run: an ``mlflow.entities.Run`` or a run id; by default ``mlflow.active_run()`` when the
            sink is created (MLflow's active run belongs to the thread that started it).
        start: with no run active, start one with ``mlflow.start_run(**init)`` (ended when the sink closes).
        init: keyword arguments for ``mlflow.start_run`` when ``start`` is true.
        prefix: the metrics' prefix.
        all_ranks: in a multi-rank run, every rank logs its own figures under ``<prefix>rank<r>/`` (give
            every rank the same ``run`` id to gather them in one run); by default only rank 0 logs, with
            the run's world figures and straggler line from the ranks' link.

    Raises:
        ImportError: when ``mlflow`` is missing (with the install command).
        RuntimeError: when no run is active and neither ``run`` nor ``start`` gives one.
    """

    def __init__(
        self,
        run: Any = None,
        *,
        start: bool = False,
        init: Mapping[str, Any] | None = None,
        prefix: str = "trainperf/",
        all_ranks: bool = False,
    ) -> None:
        self._tracked = Tracked(prefix, all_ranks)
        start = check_start(start, init, run, "mlflow.start_run")
        run_id = run if isinstance(run, str) else getattr(getattr(run, "info", None), "run_id", None)
        if run is not None and not (isinstance(run_id, str) and run_id):
            raise TypeError(f"run must be an mlflow Run or a run id, got {run!r}")
        try:
            import mlflow
            from mlflow.entities import Metric, RunTag
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise ImportError("MlflowSink needs mlflow: pip install 'trainperf[mlflow]'") from exc
        self._metric, self._tag = Metric, RunTag
        self._owned = False
        if run_id is None:
            active = mlflow.active_run()
            if active is None and start:
                active = mlflow.start_run(**dict(init or {}))
                self._owned = True
            if active is None:
                raise RuntimeError(
                    "MlflowSink found no active MLflow run: create the sink inside mlflow.start_run(), "
                    "give run=, or start=True to let the sink start one")
            run_id = active.info.run_id
        self.run_id: str = run_id
        self.client = MlflowClient()
        self._closed = False

    def __call__(self, record: PerformanceRecord) -> None:
        self.write_many((record,))

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        """Log ``records``' figures and the verdict's changes in one ``log_batch`` call."""
        tracked, metric, tag = self._tracked, self._metric, self._tag
        metrics: list[Any] = []
        tags: dict[str, Any] = {}
        for record in records:
            prefix = tracked.prefix_for(record)
            if prefix is None:
                continue
            stamp = int(record.timestamp * 1000)
            step = record.iteration
            metrics.extend(metric(mlflow_key(name), value, stamp, step)
                           for name, value in record_metrics(record, prefix).items())
            text = tracked.new_verdict(record, prefix)
            if text is not None:
                key = mlflow_key(prefix.replace("/", ".") + "verdict")
                tags[key] = tag(key, text)
        if metrics or tags:
            self.client.log_batch(self.run_id, metrics=metrics, tags=list(tags.values()))

    def on_cluster(self, event: Mapping[str, Any]) -> None:
        """Rank 0's link: the world figures at the event's iteration, its line as the tag
        ``trainperf.world.line``."""
        prefix = self._tracked.prefix
        figures = cluster_metrics(event, prefix)
        if not figures:
            return
        stamp = int(float(event.get("time") or time.time()) * 1000)
        step = int(event.get("iteration", 0))
        metric = self._metric
        metrics = [metric(mlflow_key(name), value, stamp, step) for name, value in figures.items()]
        key = mlflow_key(prefix.replace("/", ".") + "world.line")
        self.client.log_batch(self.run_id, metrics=metrics, tags=[self._tag(key, str(event.get("line", ""))[:5000])])

    def close(self) -> None:
        """End the run if the sink started it."""
        if self._closed:
            return
        self._closed = True
        if self._owned:
            import mlflow

            active = mlflow.active_run()
            if active is not None and active.info.run_id == self.run_id:
                mlflow.end_run()  # also off the thread's stack of active runs
            else:
                self.client.set_terminated(self.run_id)

    def __enter__(self) -> MlflowSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
