"""``PerformanceCallback``: the listener for Lightning's ``Trainer``.

An iteration is one optimizer step (``trainer.global_step`` moving on), so gradient accumulation
counts every micro-batch in the step that consumes it. Validation and checkpoint saving that happen
during ``fit`` are taken out of the windows: they count neither as data wait nor as training time.

Data wait: Lightning has no hook around fetching a batch. During an epoch the callback times the
training data fetcher's own ``next()`` on the dataloader iterator (through the profiler callables
that the training epoch loop hands to the fetcher), the same span Lightning's
profiler reports as ``train_dataloader_next`` (for a loader without a length, Lightning fetches one
batch ahead, so that fetch returns the batch after the one about to run). A ``DataLoader``'s
``iter()`` (which starts its workers every epoch unless they persist) and any fetch outside that span
(the fetch ahead made while an epoch's iterator is created) are timed through the same loader hooks
the plain-loop adapter uses. Lightning creates the first epoch's iterator before ``on_train_start``:
the first window starts where that began, so it is the first step's data wait like any other.

Other host time: the rest of the time between the end of one step and ``on_train_batch_start`` of
the next: the loop's own hooks, ``on_train_epoch_end`` and anything else done at an epoch's edge.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..core import RunListeners, check_options, fetch_wait
from ..records import DeviceTimeline
from ..sinks import LoggerSink, Sink
from ..torch.shared import (
    StepFlopCounter,
    batch_size,
    join_cluster,
    loader_advisor,
    loop_hooks,
    on_cuda_of,
    step_format,
    time_collectives,
    token_counter,
    use_model_device,
    worker_pids,
)
from ._compat import callback_base

if TYPE_CHECKING:
    from pytorch_lightning import Callback as _CallbackBase
else:
    _CallbackBase = callback_base()

__all__ = ["PerformanceCallback"]

class _TimedFetch:
    """Wraps one of the fetcher's profiler callables to time the span between them."""

    __slots__ = ("inner", "owner", "starts")

    def __init__(self, inner: Any, owner: PerformanceCallback, starts: bool) -> None:
        self.inner = inner
        self.owner = owner
        self.starts = starts

    def __call__(self) -> None:
        owner = self.owner
        if self.starts:
            owner._fetch_started = owner._clock()
        elif owner._fetch_started is not None:
            owner._add_fetch(owner._fetch_started, owner._clock())
            owner._fetch_started = None
        self.inner()


class PerformanceCallback(_CallbackBase):
    """Reports Lightning training like :class:`~trainperf.PerformanceListener` reports a loop.

    Subclasses the ``Callback`` of ``lightning.pytorch`` and of ``pytorch_lightning`` (each that is
    installed), so a ``Trainer`` from either accepts it.

    Args:
        frequency: report every this many optimizer steps.
        log_to_loggers: also send the figures to the trainer's loggers (``log_metrics``, keyed by step).
        timeline_factory: builds the device timeline for the model's device (tests pass a fake); by
            default CUDA events on CUDA, and the host clock alone elsewhere.
        **options: any keyword option of :class:`~trainperf.PerformanceListener`
            (``report_score``, ``report_gc``, ``sinks``, ...).

    Example:
        >>> trainer = Trainer(callbacks=[PerformanceCallback(10, report_gc=True, report_score=True)])  # doctest: +SKIP
    """

    def __init__(
        self,
        frequency: int = 1,
        *,
        log_to_loggers: bool = True,
        timeline_factory: Callable[[Any], DeviceTimeline] | None = None,
        **options: Any,
    ) -> None:
        check_options(options)
        if not isinstance(log_to_loggers, bool):
            raise TypeError(f"log_to_loggers must be a bool, got {log_to_loggers!r}")
        if timeline_factory is not None and not callable(timeline_factory):
            raise TypeError(f"timeline_factory must be callable or None, got {timeline_factory!r}")
        self._timeline_factory = timeline_factory
        super().__init__()
        # The user's sinks serve every fit: each fit's listener gets them lent (see _runs).
        self._runs = RunListeners(self, frequency, options)
        self.log_to_loggers = log_to_loggers
        self.listener = self._runs.new()
        self._clock = self.listener.clock
        self._reset_state()

    def close(self) -> None:
        """Close the sinks given to the callback (each fit leaves them open for the next). Idempotent;
        it also happens when the callback is collected or the interpreter exits."""
        if not self.listener.closed:
            self.listener.close()
        self._runs.close()

    def _reset_state(self) -> None:
        self._open = False
        self._started = 0.0
        self._samples: int | None = 0
        self._tokens: int | None = 0
        # the real tokens of each batch fetched and not yet trained on, oldest first: Lightning fetches
        # a batch ahead, and the batch its hooks see is on the device already (its mask unreadable
        # without waiting for the device)
        self._fetched_tokens: collections.deque[int | None] = collections.deque()
        self._count_tokens = token_counter(self.listener)
        self._flop_counter: StepFlopCounter | None = None
        self._micro = 0
        self._last_step = 0
        self._per_batch = False
        self._samples_of: Callable[[Any], int | None] = batch_size
        self._paused_at: float | None = None
        self._fetch_started: float | None = None  # inside the fetcher's timed next()
        self._boundary = 0.0  # the end of the previous step
        self._gap_etl = 0.0  # data wait since then, not yet given to an iteration
        self._first_fetch: float | None = None  # when the first fetch began (read when training starts)
        self._etl = 0.0
        self._other = 0.0
        self._observing = False
        self._worker_pids: frozenset[int] = frozenset()
        self.thread = threading.get_ident()  # the loader hooks count fetches on this thread only
        self.clock: Callable[[], float] = self._clock
        self._epoch_loop: Any = None
        self._logger_sink: Sink | None = None
        self._trainer: Any = None
        self._timeline: DeviceTimeline | None = None
        self._collective: Any = None  # a distributed run's forward and collective timing
        self._loop_wait = 0.0  # time in Lightning's own collective since the last step
        self._loop_collective: tuple[Any, str] | None = None

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if self.listener.closed:
            self.listener = self._runs.new()
            self._clock = self.listener.clock
        self._reset_state()
        self._trainer = trainer
        if self.log_to_loggers and trainer.loggers:
            self._logger_sink = LoggerSink(trainer)
            self.listener.add_sink(self._logger_sink)
        # Lightning creates the first epoch's iterator (and, for a loader without a length, fetches
        # its first batch) before ``on_train_start``: the loader hooks time them from here on (on this
        # thread, with the listener's clock, as ``_reset_state`` set them), and the first window
        # starts where they began.
        loop_hooks.register(self)
        self._observing = True

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        listener = self.listener
        device = getattr(pl_module, "device", None)
        if device is not None:
            use_model_device(listener, device, self._timeline_factory)
        self._timeline = listener.timeline
        if getattr(trainer, "world_size", 1) > 1:
            listener.set_rank(trainer.global_rank)
            if join_cluster(listener):  # a no-op without an initialised process group
                self._collective = time_collectives(listener, pl_module, _ddp_of(trainer))
                self._wrap_loop_collective(trainer)
        self._last_step = trainer.global_step
        # Manual optimization may step several optimizers per batch (a GAN): an iteration is then
        # one training batch, and the record counts its optimizer steps.
        self._per_batch = not getattr(pl_module, "automatic_optimization", True)
        self._samples_of = _samples_reader(getattr(trainer.fit_loop, "_combined_loader", None))
        self._wrap_save_checkpoint(trainer)
        self._wrap_fetch(trainer)
        self._flop_counter = StepFlopCounter(listener, device, _number_format(trainer, pl_module, device),
                                             _lightning_flops(trainer, pl_module))
        on_cuda = on_cuda_of(listener)
        listener.add_advisor(lambda kind: loader_advisor(getattr(trainer, "train_dataloader", None), on_cuda)(kind))
        listener.set_loader_workers(lambda: self._worker_pids)
        listener.set_etl_source("loader")
        if device is not None and getattr(device, "type", None) == "cpu":
            listener.set_step_threads(torch.get_num_threads())
        first_fetch = self._first_fetch
        listener.start(at=first_fetch)
        # a fetch before now (the first epoch's iterator) is the first iteration's data wait
        self._boundary = self._clock() if first_fetch is None else first_fetch

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.listener.set_epoch(trainer.current_epoch)

    # -- hot path -------------------------------------------------------------------------
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        n = self._samples_of(batch)
        fetched = self._fetched_tokens
        tokens = fetched.popleft() if fetched else None
        if self._open:  # a later micro-batch: its fetch is this iteration's data wait
            self._micro += 1
            self._samples = None if n is None or self._samples is None else self._samples + n
            self._tokens = None if tokens is None or self._tokens is None else self._tokens + tokens
            self._etl += self._gap_etl
            self._gap_etl = 0.0
            return
        self._open = True
        self._samples = n
        self._tokens = tokens
        self._micro = 1
        self._started = now = self._clock()
        self._etl = etl = self._gap_etl
        self._gap_etl = 0.0
        self._other = max(0.0, now - self._boundary - etl - self._loop_wait)
        if self._loop_wait:  # Lightning's own collective between steps: waiting, not host work
            self._collective.add_wait(self._loop_wait)
            self._loop_wait = 0.0
        if self._timeline is not None:  # the device's side of the iteration starts here
            self._timeline.begin()
        if self._flop_counter is not None:
            self._flop_counter.begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if not self._open or (step == self._last_step and not self._per_batch):
            return
        steps = step - self._last_step
        self._last_step = step
        self._open = False
        score = None
        if self.listener.options.report_score:
            score = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if self._collective is not None:
            self._collective.on_step(self._clock())
        counter = self._flop_counter
        if counter is not None:
            counter.end()
            if counter.done:
                self._flop_counter = None
        self.listener.record_iteration(self._samples, self._micro, self._etl, score, None, self._other, steps, 0,
                                       self._tokens)
        self._boundary = self._clock()  # trainperf's own time since is not on this clock

    # -- the loader hooks (DataLoader.iter() and fetches outside the fetcher's timed next()) --
    def on_fetch(self, started: float, ended: float, batch: Any) -> None:
        if batch is not None:
            self._fetched_tokens.append(self._count_tokens(batch))
        if self._fetch_started is None:  # else the fetcher's own span times it
            if self._first_fetch is None:
                self._first_fetch = started
            self._add_fetch(started, ended)

    def _add_fetch(self, started: float, ended: float) -> None:
        self._gap_etl += fetch_wait(self.listener.gc_pauses, started, ended)  # its collections are GC

    def on_loader(self, loader: Any, iterator: Any) -> None:
        self._worker_pids = worker_pids(iterator)

    def on_scaler_update(self) -> None:
        return None

    # -- time that is not training --------------------------------------------------------
    def _pause(self) -> None:
        self._paused_at = self._clock()

    def _resume(self) -> None:
        if self._paused_at is None:
            return
        paused = self._clock() - self._paused_at
        self._paused_at = None
        self.listener.exclude(paused)  # the listener's clock, which ours is, now reads that much less

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

    def _wrap_fetch(self, trainer: Any) -> None:
        """Time the training fetcher's ``next()``: at each epoch's start, Lightning's training epoch loop
        hands its ``_on_before_fetch`` / ``_on_after_fetch`` to the fetcher as profiler callables; wrapped
        once here on the loop instance, the fetcher gets the timed ones every epoch."""
        epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        if epoch_loop is None or not all(hasattr(epoch_loop, n) for n in ("_on_before_fetch", "_on_after_fetch")):
            return
        self._epoch_loop = epoch_loop
        epoch_loop._on_before_fetch = _TimedFetch(epoch_loop._on_before_fetch, self, True)
        epoch_loop._on_after_fetch = _TimedFetch(epoch_loop._on_after_fetch, self, False)

    def _wrap_loop_collective(self, trainer: Any) -> None:
        """Time the collective Lightning's training loop runs between steps (a broadcast of whether
        rank 0 got SIGTERM, Lightning 2.5 and later): the ranks that wait there for a late rank 0
        are waiting, not doing host work."""
        epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        name = "_broadcast_sigterm_tensor"
        original = getattr(epoch_loop, name, None)
        if original is None:
            return
        clock = self._clock

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = clock()
            try:
                return original(*args, **kwargs)
            finally:
                self._loop_wait += clock() - began

        epoch_loop.__dict__[name] = timed
        self._loop_collective = (epoch_loop, name)

    def _unwrap(self, trainer: Any) -> None:
        if self._loop_collective is not None:
            loop, name = self._loop_collective
            loop.__dict__.pop(name, None)
            self._loop_collective = None
        if getattr(trainer.__dict__.get("save_checkpoint"), "_trainperf", False):
            del trainer.__dict__["save_checkpoint"]
        epoch_loop = self._epoch_loop
        if epoch_loop is not None:
            for name in ("_on_before_fetch", "_on_after_fetch"):
                if isinstance(epoch_loop.__dict__.get(name), _TimedFetch):
                    del epoch_loop.__dict__[name]
        self._epoch_loop = None

    # -- teardown -------------------------------------------------------------------------
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.listener.flush()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if self._flop_counter is not None:
            self._flop_counter.abandon()
            self._flop_counter = None
        self._unwrap(trainer)
        if self._observing:
            loop_hooks.unregister(self)
            self._observing = False
        self.listener.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """A fit that fails does not reach ``teardown``: undo everything here (the iterations before
        the failure are reported) and let the exception go on."""
        if getattr(getattr(trainer, "state", None), "fn", None) == "fit":
            self.teardown(trainer, pl_module, "fit")

    def summary(self) -> Any:
        """The listener's :meth:`~trainperf.PerformanceListener.summary` for the last fit."""
        return self.listener.summary()

    @property
    def history(self) -> Any:
        """The listener's recent records."""
        return self.listener.history


def _samples_reader(combined: Any) -> Callable[[Any], int | None]:
    """How to count a training batch's samples: the first tensor's rows, or, when a ``CombinedLoader``
    zips several loaders into one batch (a dict or list of their batches), the sum over them."""
    loaders = getattr(combined, "flattened", None) or []
    if len(loaders) < 2 or getattr(combined, "_mode", None) == "sequential":
        return batch_size

    def per_loader(batch: Any) -> int | None:
        parts = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else [batch]
        total = 0
        for part in parts:
            n = batch_size(part)
            if n is None:
                return None
            total += n
        return total

    return per_loader


def _ddp_of(trainer: Any) -> Any:
    """The trainer's ``DistributedDataParallel`` model, else ``None`` (FSDP, a single device)."""
    model = getattr(getattr(trainer, "strategy", None), "model", None)
    return model if isinstance(model, torch.nn.parallel.DistributedDataParallel) else None


def _lightning_flops(trainer: Any, pl_module: Any) -> float | None:
    """FLOPs per optimizer step from Lightning's own convention, a module's ``flops_per_batch`` (as
    ``ThroughputMonitor`` reads it: one batch's forward and backward), times the batches per step."""
    per_batch = getattr(pl_module, "flops_per_batch", None)
    if isinstance(per_batch, bool) or not isinstance(per_batch, (int, float)) or not 0 < per_batch < float("inf"):
        return None
    accumulate = getattr(trainer, "accumulate_grad_batches", 1)
    return float(per_batch) * (accumulate if isinstance(accumulate, int) and accumulate > 0 else 1)


def _number_format(trainer: Any, pl_module: Any, device: Any) -> str | None:
    """What a step computes in: Lightning's precision setting, else the parameters' dtype."""
    precision = str(getattr(trainer, "precision", ""))
    mixed = "bf16" if precision.startswith("bf16") else "fp16" if precision.startswith("16") else None
    return step_format(mixed, pl_module, device)
