"""The Hugging Face ``Trainer`` callback: one iteration per optimizer step, its data wait timed at the
base ``DataLoader``'s ``next()`` on the training thread, its samples and real tokens counted on the
host as the loader delivers them.

The Trainer fetches every micro-batch of a step (``get_batch_samples``) before ``on_step_begin``, and
accelerate's ``DataLoaderShard`` fetches one batch ahead. The callback times the base loader's fetches
made inside that call (the copy to the device and the count of items for the loss are the Trainer's
own host work: ``other``), counts each fetched batch's samples and tokens in fetch order, and gives
a step the batches it trained on: as many as ``get_batch_samples`` returned, oldest first (a resumed
run's skipped batches are not fetched through it). Evaluation, logging and saving between steps are
``other``; an evaluation's fetches are not data wait. The figures reach the Trainer's own logs (so TensorBoard,
W&B and the rest get them at the Trainer's step): the callback moves itself ahead of the reporting
callbacks, which would otherwise run before it.
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from .._check import check_bool
from .._record import PerformanceRecord
from .._runs import RunListeners, check_options
from ..sinks._metrics import scalar_metrics
from ..torch import _loop_hooks as loop_hooks
from ..torch._flops import StepFlopCounter, step_format
from ..torch.shared import batch_size, join_cluster, token_counter, use_model_device

__all__ = ["PerformanceCallback"]

#: How far up the call stack the Trainer is looked for when the callback is set up.
_FRAMES = 8


class PerformanceCallback(TrainerCallback):
    """Reports data wait, iteration time, throughput and tokens/sec of a Hugging Face ``Trainer``.

    Args:
        frequency: report every this many optimizer steps.
        log_to_trainer: add the newest record's figures (``trainperf/etl_ms``, ``trainperf/tokens_per_sec``,
            ...) to each of the Trainer's logs.
        **options: the :class:`~trainperf.PerformanceListener` options (``sinks``, ``run_dir``, ``tokens``, ...).

    Attributes:
        listener: the :class:`~trainperf.PerformanceListener` (a new one for each ``train()`` after a
            finished one).
    """

    def __init__(self, frequency: int = 1, *, log_to_trainer: bool = True, **options: Any) -> None:
        check_options(options)
        self.log_to_trainer = check_bool("log_to_trainer", log_to_trainer)
        # The user's sinks serve every train(): each one's listener gets them lent (see _runs).
        self._runs = RunListeners(self, frequency, options)
        self.listener = self._runs.new()
        self._logged: PerformanceRecord | None = None
        self._trainer: Any = None
        self._reset()

    def _reset(self) -> None:
        listener = self.listener
        self.clock: Callable[[], float] = listener.clock
        self.thread = threading.get_ident()
        self._count_tokens = token_counter(listener)
        self._fetched: collections.deque[tuple[int | None, int | None]] = collections.deque()  # (samples, tokens)
        self._in_step_fetch = False  # inside the Trainer's get_batch_samples
        self._step_batches: list[tuple[int | None, int | None]] | None = None
        self._micro = 0
        self._etl = 0.0
        self._boundary = 0.0  # where the previous step ended
        self._started = 0.0
        self._other = 0.0
        self._observing = False
        self._flops: StepFlopCounter | None = None

    # -- set-up ----------------------------------------------------------------------------
    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._find_trainer(sys._getframe(1))

    def _find_trainer(self, frame: Any) -> None:
        """Find the Trainer and its callback handler up the stack (the event's caller): the callback
        goes first among the handler's callbacks, so its figures are in the logs the reporting
        callbacks get, and it sees the batches each step fetches."""
        for _ in range(_FRAMES):
            if frame is None:
                return
            owner = frame.f_locals.get("self")
            callbacks = getattr(owner, "callbacks", None)
            if isinstance(callbacks, list) and self in callbacks and callbacks[0] is not self:
                callbacks.remove(self)
                callbacks.insert(0, self)
            if callable(getattr(owner, "get_batch_samples", None)) and hasattr(owner, "callback_handler"):
                self._wrap_batch_samples(owner)
                return
            frame = frame.f_back

    def _wrap_batch_samples(self, trainer: Any) -> None:
        if self._trainer is trainer:
            return
        self._trainer = trainer
        original = trainer.get_batch_samples

        def get_batch_samples(epoch_iterator: Any, num_batches: int, device: Any) -> Any:
            self._in_step_fetch = True
            try:
                batches, items = original(epoch_iterator, num_batches, device)
            finally:
                self._in_step_fetch = False
            self._take(len(batches))
            return batches, items

        trainer.get_batch_samples = get_batch_samples

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.listener.closed:  # a second train()
            self.listener = self._runs.new()
        self._reset()
        listener = self.listener
        device = _device_of(model)
        if device is not None:
            use_model_device(listener, device)
        self._flops = StepFlopCounter(listener, device, _number_format(args, model, device))
        if getattr(args, "world_size", 1) > 1:
            listener.set_rank(getattr(args, "process_index", None))
            join_cluster(listener)  # a no-op without an initialised process group
        listener.set_etl_source("loader")
        loop_hooks.register(self)
        self._observing = True
        listener.start()
        self._boundary = self.clock()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        epoch = getattr(state, "epoch", None)
        self.listener.set_epoch(int(epoch) if epoch is not None else None)

    # -- the loader hooks ------------------------------------------------------------------
    def on_fetch(self, started: float, ended: float, batch: Any) -> None:
        if self._trainer is not None and not self._in_step_fetch:
            return  # an evaluation's fetch, or one outside the steps: not the training's data wait
        self._etl += ended - started
        if batch is not None:
            self._fetched.append((batch_size(batch), self._count_tokens(batch)))

    def on_loader(self, loader: Any, iterator: Any) -> None:
        return None

    def on_scaler_update(self) -> None:
        return None

    def _take(self, n: int) -> None:
        """The step trained on ``n`` batches: the oldest fetched (one fetched ahead stays for the next)."""
        fetched = self._fetched
        self._step_batches = [fetched.popleft() for _ in range(min(n, len(fetched)))]

    # -- the step ----------------------------------------------------------------------------
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._started = now = self.clock()
        self._micro = 1
        timeline = self.listener.timeline
        if timeline is not None:
            timeline.begin()
        self._other = max(0.0, now - self._boundary - self._etl)
        if self._flops is not None:
            self._flops.begin()

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._micro += 1

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        batches = self._step_batches
        if batches is None:  # no Trainer found: the oldest batches fetched, one per micro-batch
            fetched = self._fetched
            batches = [fetched.popleft() for _ in range(min(self._micro, len(fetched)))]
        samples: int | None = 0
        tokens: int | None = 0
        for n, t in batches:
            samples = None if n is None or samples is None else samples + n
            tokens = None if t is None or tokens is None else tokens + t
        if len(batches) != self._micro:
            samples = tokens = None
        self._step_batches = None
        if self._flops is not None:
            self._flops.end()
        etl, self._etl = self._etl, 0.0
        self.listener.record_iteration(samples, self._micro, etl, None, None, self._other, 1, 0, tokens)
        self._boundary = self.clock()  # trainperf's own time since is not on this clock

    # -- logs and the end --------------------------------------------------------------------
    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not self.log_to_trainer or logs is None or not len(self.listener.history):
            return
        newest = self.listener.history[-1]
        if newest is not self._logged:  # each record once, in the first log after it
            self._logged = newest
            logs.update(scalar_metrics(newest))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._flops is not None:
            self._flops.abandon()
        if self._observing:
            loop_hooks.unregister(self)
            self._observing = False
        self.listener.close()

    def close(self) -> None:
        """Close the listener, remove the loader hooks (a training that ended has done both) and close
        the sinks given to the callback (each training leaves them open for the next). Idempotent;
        it also happens when the callback is collected or the interpreter exits."""
        self._stop()
        self._runs.close()


def _number_format(args: Any, model: Any, device: Any) -> str | None:
    """What the step computes in: the Trainer's mixed precision, else the parameters' dtype."""
    mixed = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    return step_format(mixed, model, device)


def _device_of(model: Any) -> Any:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return None
