"""Weights & Biases: the figures in the run the user has active, on trainperf's own step axis."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import PerformanceRecord
from ._tracked import Tracked, check_start, cluster_metrics, record_metrics

__all__ = ["WandbSink"]

_ROWS = ("auto", "own", "join")


class WandbSink:
    """Logs every record to a Weights & Biases run as one ``log`` call of metrics under ``trainperf/``
    (named as :class:`TensorBoardSink` names them), charted against ``trainperf/iteration``: the sink
    declares ``define_metric("trainperf/*", step_metric="trainperf/iteration")`` and never passes
    ``step=``, so W&B's own step stays the user's.

    W&B keeps one row per step and drops what is logged to a step below the current one: a writer that
    advances the step can make the user's later ``log(..., step=s)`` land below it. So, with ``rows``:

    * ``"auto"`` (default): each record gets a row of its own while nothing else logs to the run; once
      the run's step moves by someone else's ``log``, each record joins the row the run is on instead
      (``commit=False``), and the sink never moves W&B's step again.
    * ``"own"``: always a row of its own (right when the user's own calls never pass ``step=``).
    * ``"join"``: always the run's current row. Joining, at most one record goes into a row: a record
      that finds the row already holding one waits for the next row. Records still waiting when the
      sink closes get rows of their own then, after the user's last step.

    Args:
        run: the W&B run to log to; by default ``wandb.run``, the one ``wandb.init()`` started.
        start: with no run active, start one with ``wandb.init(**init)`` (finished when the sink closes).
        init: keyword arguments for ``wandb.init`` when ``start`` is true.
        prefix: the metrics' prefix.
        all_ranks: in a multi-rank run, every rank logs its own figures under ``<prefix>rank<r>/``
            (each rank needs a run: its own, or one shared); by default only rank 0 logs, with the
            run's world figures and straggler line from the ranks' link.
        rows: ``"auto"``, ``"own"`` or ``"join"``, above.

    Raises:
        ImportError: when ``wandb`` is missing (with the install command).
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
        rows: str = "auto",
    ) -> None:
        self._tracked = Tracked(prefix, all_ranks)
        if not prefix:
            raise ValueError("prefix must not be empty: the sink charts every metric under it against its iteration")
        start = check_start(start, init, run, "wandb.init")
        if rows not in _ROWS:
            raise ValueError(f"rows must be one of {', '.join(map(repr, _ROWS))}, got {rows!r}")
        if run is not None and not all(callable(getattr(run, m, None)) for m in ("log", "define_metric")):
            raise TypeError(f"run must be a wandb Run (with log and define_metric; a Lightning WandbLogger's is its "
                            f"experiment), got {run!r}")
        try:
            import wandb
        except ImportError as exc:
            raise ImportError("WandbSink needs wandb: pip install 'trainperf[wandb]'") from exc
        self._owned = False
        if run is None:
            run = wandb.run
            if run is None and start:
                run = wandb.init(**dict(init or {}))
                self._owned = True
            if run is None:
                raise RuntimeError(
                    "WandbSink found no active W&B run: call wandb.init() before creating the sink, "
                    "give run=, or start=True to let the sink start one")
        self.run = run
        self.rows = rows
        self._defined: set[str] = set()
        self._waiting: deque[dict[str, float]] = deque()
        self._shared = rows == "join"
        self._expect = self._step() if rows == "auto" else None  # the step if nobody else logs
        self._joined: int | None = None  # the step read after the last record joined a row
        self._closed = False
        self._failed = False

    def __call__(self, record: PerformanceRecord) -> None:
        self.write_many((record,))

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        """Log ``records`` in order (the writer thread hands over what it holds)."""
        tracked = self._tracked
        for record in records:
            prefix = tracked.prefix_for(record)
            if prefix is None:
                continue
            self._define(prefix)
            metrics: dict[str, float] = record_metrics(record, prefix)
            metrics[prefix + "iteration"] = float(record.iteration)
            self._waiting.append(metrics)
            text = tracked.new_verdict(record, prefix)
            if text is not None:
                self.run.summary[prefix + "verdict"] = text
        self._place_or_drop()

    def on_cluster(self, event: Mapping[str, Any]) -> None:
        """Rank 0's link: the world figures at the event's iteration, its line in the run's summary."""
        prefix = self._tracked.prefix
        metrics = cluster_metrics(event, prefix)
        if not metrics:
            return
        self._define(prefix)
        metrics[prefix + "iteration"] = float(event.get("iteration", 0))
        self._waiting.append(metrics)
        self.run.summary[prefix + "world/line"] = str(event.get("line", ""))
        self._place_or_drop()

    def _define(self, prefix: str) -> None:
        if prefix not in self._defined:
            self._defined.add(prefix)
            self.run.define_metric(prefix + "iteration")
            self.run.define_metric(prefix + "*", step_metric=prefix + "iteration")

    def _step(self) -> int:
        return int(self.run.step)

    def _place_or_drop(self, *, closing: bool = False) -> None:
        """:meth:`_place`; when the tracker raises, what waits is dropped (a failing sink loses the records
        it was handed, and nothing piles up behind a tracker that keeps failing)."""
        try:
            self._place(closing=closing)
        except Exception:
            self._waiting.clear()
            self._failed = True
            raise

    def _place(self, *, closing: bool = False) -> None:
        """Log what waits: rows of its own while the run is the sink's alone, else one record per row."""
        waiting, log = self._waiting, self.run.log
        if not waiting:
            return
        if self.rows == "own":
            while waiting:
                log(waiting.popleft())
            return
        now = self._step()
        if not self._shared and self._expect is not None and now != self._expect:
            self._shared = True  # someone else logged: never move W&B's step again
        if not self._shared:
            while waiting:
                log(waiting.popleft())
                now += 1  # each record a row: the step the next batch finds if nobody else logs
            self._expect = now
            return
        if self._joined is None or now > self._joined:
            log(waiting.popleft(), commit=False)
            self._joined = self._step()  # at least the row joined: the next record waits for a later one
        if closing and waiting:
            if self._step() <= self._joined:
                log({})  # the row holding the last record joined is closed first: nothing overwrites it
            while waiting:
                log(waiting.popleft())

    def close(self) -> None:
        """Log what still waits (rows of its own), and finish the run if the sink started it."""
        if self._closed:
            return
        self._closed = True
        failed_before = self._failed
        try:
            self._place_or_drop(closing=True)
        except Exception:
            if not failed_before:
                raise  # a tracker that failed before was said then: once is enough
        finally:
            if self._owned:
                self.run.finish()

    def __enter__(self) -> WandbSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
