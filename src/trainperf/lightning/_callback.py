"""``PerformanceCallback``: the listener for Lightning's ``Trainer``.

An iteration is one optimizer step (``trainer.global_step`` moving on), so gradient accumulation
counts every micro-batch in the step that consumes it. Validation and checkpoint saving that happen
during ``fit`` are taken out of the windows: they count neither as data wait nor as training time.

Data wait: Lightning has no hook around fetching a batch. During an epoch the callback times the
training data fetcher's own ``next()`` on the dataloader iterator, the same span Lightning's
profiler reports as ``train_dataloader_next`` (with its default one-batch prefetch, that fetch
returns the batch after the one about to run). For the first batch of each epoch, whose fetch
happens while the epoch's iterator is created, and where the fetcher cannot be timed, the data
wait is the gap between the end of the previous step (or the epoch's start) and
``on_train_batch_start``, which also covers moving the batch to the device.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._listener import PerformanceListener
from ..sinks import LoggerSink, Sink
from ._compat import callback_bases

__all__ = ["PerformanceCallback"]

_LISTENER_OPTIONS = (
    "report_score", "report_gc", "report_etl", "report_iteration", "report_time", "report_sample",
    "report_batch", "sinks", "strict", "history", "verdict", "clock", "wall_clock", "rank",
)


class _TimedFetch:
    """Wraps one of the fetcher's profiler callables to time the span between them."""

    __slots__ = ("inner", "owner", "starts")

    def __init__(self, inner: Any, owner: _PerformanceCallbackImpl, starts: bool) -> None:
        self.inner = inner
        self.owner = owner
        self.starts = starts

    def __call__(self) -> None:
        owner = self.owner
        if self.starts:
            owner._fetch_started = owner._clock()
        elif owner._fetch_started is not None:
            owner.listener.add_etl(owner._clock() - owner._fetch_started)
            owner._fetch_started = None
        self.inner()


class _PerformanceCallbackImpl:
    def __init__(self, frequency: int = 1, *, log_to_loggers: bool = True, **options: Any) -> None:
        unknown = set(options) - set(_LISTENER_OPTIONS)
        if unknown:
            name = sorted(unknown)[0]
            raise TypeError(f"PerformanceCallback got an unexpected keyword argument {name!r}")
        if not isinstance(log_to_loggers, bool):
            raise TypeError(f"log_to_loggers must be a bool, got {log_to_loggers!r}")
        self._frequency = frequency
        self._options = dict(options)
        self.log_to_loggers = log_to_loggers
        self.listener = PerformanceListener(frequency, **options)
        self._clock = self.listener.clock
        self._reset_state()

    def _reset_state(self) -> None:
        self._open = False
        self._started = 0.0
        self._samples: int | None = 0
        self._micro = 0
        self._last_step = 0
        self._paused_at: float | None = None
        self._fetch_started: float | None = None
        self._fetcher: Any = None
        self._logger_sink: Sink | None = None
        self._trainer: Any = None

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if self.listener.closed:
            sinks: Iterable[Sink] | None = self._options.get("sinks")
            self.listener = PerformanceListener(self._frequency, **{**self._options, "sinks": sinks})
            self._clock = self.listener.clock
        self._reset_state()
        self._trainer = trainer
        if self.log_to_loggers and trainer.loggers:
            self._logger_sink = LoggerSink(trainer)
            self.listener.add_sink(self._logger_sink)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        from ..torch._cuda import CudaEventTimer, alloc_retries_reader

        listener = self.listener
        device = getattr(pl_module, "device", None)
        if device is not None and device.type == "cuda":
            listener.set_timer(CudaEventTimer(device))
            listener.device = device.index
            name, read = alloc_retries_reader(device)
            listener.add_collector(name, read)  # type: ignore[arg-type]
        if getattr(trainer, "world_size", 1) > 1:
            listener.rank = trainer.global_rank
        self._last_step = trainer.global_step
        self._wrap_save_checkpoint(trainer)
        from ..torch._advice import loader_advisor

        listener.add_advisor(lambda kind: loader_advisor(getattr(trainer, "train_dataloader", None))(kind))
        listener.start()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.listener.epoch = trainer.current_epoch

    # -- hot path -------------------------------------------------------------------------
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        fetcher = trainer.fit_loop._data_fetcher if self._fetcher is None else self._fetcher
        if fetcher is not None and not isinstance(getattr(fetcher, "_stop_profiler", None), _TimedFetch):
            self._wrap_fetcher(fetcher)
        n = batch_size(batch)
        if self._open:
            self._micro += 1
            self._samples = None if n is None or self._samples is None else self._samples + n
            return
        self._open = True
        self._samples = n
        self._micro = 1
        self._started = self._clock()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if step == self._last_step or not self._open:
            return
        self._last_step = step
        self._open = False
        score = None
        if self.listener.report_score:
            score = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self.listener.record_iteration(self._samples, self._micro, 0.0, score, self._started)

    # -- time that is not training --------------------------------------------------------
    def _pause(self) -> None:
        self._paused_at = self._clock()

    def _resume(self) -> None:
        if self._paused_at is None:
            return
        paused = self._clock() - self._paused_at
        self._paused_at = None
        self.listener.exclude(paused)
        if self._open:
            self._started += paused

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._pause()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:
            self._resume()

    def _wrap_save_checkpoint(self, trainer: Any) -> None:
        original = trainer.save_checkpoint
        if getattr(original, "_trainperf", False):
            return

        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            outer = self._paused_at is None
            if outer:
                self._pause()
            try:
                return original(*args, **kwargs)
            finally:
                if outer:
                    self._resume()

        save_checkpoint._trainperf = True  # type: ignore[attr-defined]
        trainer.save_checkpoint = save_checkpoint

    def _wrap_fetcher(self, fetcher: Any) -> None:
        if not hasattr(fetcher, "_start_profiler") or not hasattr(fetcher, "_stop_profiler"):
            return
        self._fetcher = fetcher
        fetcher._start_profiler = _TimedFetch(fetcher._start_profiler, self, True)
        fetcher._stop_profiler = _TimedFetch(fetcher._stop_profiler, self, False)

    def _unwrap(self, trainer: Any) -> None:
        if getattr(trainer.__dict__.get("save_checkpoint"), "_trainperf", False):
            del trainer.__dict__["save_checkpoint"]
        fetcher = self._fetcher
        if fetcher is not None:
            for name in ("_start_profiler", "_stop_profiler"):
                wrapped = getattr(fetcher, name, None)
                if isinstance(wrapped, _TimedFetch):
                    setattr(fetcher, name, wrapped.inner)
        self._fetcher = None

    # -- teardown -------------------------------------------------------------------------
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.listener.flush()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        self._unwrap(trainer)
        self.listener.close()

    def summary(self) -> Any:
        """The listener's :meth:`~trainperf.PerformanceListener.summary` for the last fit."""
        return self.listener.summary()

    @property
    def history(self) -> Any:
        """The listener's recent records."""
        return self.listener.history


def batch_size(batch: Any) -> int | None:
    from ..torch._batch import batch_size as find

    return find(batch)


PerformanceCallback = type(
    "PerformanceCallback",
    (_PerformanceCallbackImpl, *callback_bases()),
    {
        "__module__": __name__,
        "__doc__": """Reports Lightning training like :class:`~trainperf.PerformanceListener` reports a loop.

    Subclasses the ``Callback`` of ``lightning.pytorch`` and of ``pytorch_lightning`` (each that is
    installed), so a ``Trainer`` from either accepts it.

    Args:
        frequency: report every this many optimizer steps.
        log_to_loggers: also send the figures to the trainer's loggers (``log_metrics``, keyed by step).
        **options: any keyword option of :class:`~trainperf.PerformanceListener`
            (``report_score``, ``report_gc``, ``sinks``, ...).

    Example:
        >>> trainer = Trainer(callbacks=[PerformanceCallback(10, report_gc=True, report_score=True)])  # doctest: +SKIP
    """,
    },
)
