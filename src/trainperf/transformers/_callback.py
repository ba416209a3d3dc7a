"""The Hugging Face ``Trainer`` callback: one iteration per optimizer step, its data wait timed at each
``next()`` on the epoch's iterator on the training thread, its samples and real tokens counted on the
host as the loader delivers them.

The Trainer fetches every micro-batch of a step (``get_batch_samples``) before ``on_step_begin``, and
accelerate's ``DataLoaderShard`` fetches one batch ahead, moves each batch and keeps its state around
the base loader's fetch. The callback times each ``next()`` that call makes on the epoch's iterator
whole (the loop waits for all of it; without the Trainer found, the base loader's fetches), counts
each batch's samples and tokens as the base loader gives it (on the host), and gives a step the
batches it trained on: as many as ``get_batch_samples`` returned, oldest first. A rank's wait in
the Trainer's own collectives on the training thread (its count of tokens across ranks inside that
call, the gather of the loss when it logs, ...) is collective wait, between steps or inside one. The
iteration's step begins at ``on_step_begin`` and ends where the optimizer step ends (torch's
optimizer step hook), whatever the order of the callbacks; a :class:`~trainperf.core.StepAccountant`
does the arithmetic. Evaluation, logging and saving between steps are ``other`` (evaluation and
checkpoints are also reported on their own, ``eval_ms`` and ``checkpoint_ms``); an evaluation's
fetches are not data wait. A training resumed with ``resume_from_checkpoint=`` counts its iterations
on from the checkpoint's ``global_step``, and its loads (before ``on_train_begin``) are
``checkpoint_load``, a part of the job's start-up in its goodput account. The figures reach the Trainer's own
logs (so TensorBoard, W&B and the rest get them at the Trainer's step): the callback moves itself
ahead of the reporting callbacks, which would otherwise run before it. Each record is also a dict of
its own in the Trainer's ``state.log_history``, at its step. However ``train()`` ends, the training's
listener is closed (the last window reported) and everything installed for it undone; an exception is
named in the run directory's meta data (see :func:`~trainperf.transformers._trainer.watch_training`).
"""

from __future__ import annotations

import collections
import sys
import threading
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

from ..base import check_bool
from ..core import RunListeners, StepAccountant, check_options, fetch_wait
from ..ranks import RunDirSink
from ..records import PerformanceRecord
from ..sinks import scalar_metrics
from ..torch.shared import (
    CollectiveTimer,
    StepFlopCounter,
    TokenCounts,
    TrainingSetup,
    batch_shape,
    batch_size,
    step_format,
    token_counter,
)
from ._trainer import collective_model, find_trainer, unwatch_training, watch_training, wrap_loads, wrap_steps

__all__ = ["PerformanceCallback"]


class PerformanceCallback(TrainerCallback):
    """Reports data wait, iteration time, throughput and tokens/sec of a Hugging Face ``Trainer``.

    Args:
        frequency: report every this many optimizer steps.
        log_to_trainer: add the newest record's figures (``trainperf/etl_ms``, ``trainperf/tokens_per_sec``,
            ...) to each of the Trainer's logs, and each record's to ``state.log_history`` (a dict of its
            own, with ``step``).
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
        self._logged: PerformanceRecord | None = None  # the newest record added to one of the Trainer's logs
        self._trainer: Any = None
        self._state: Any = None  # the training's TrainerState, whose log_history gets the records
        watch_training(self)  # however train() ends, this callback hears of it (until close())
        self._reset()

    def _reset(self) -> None:
        listener = self.listener
        self.clock: Callable[[], float] = listener.clock
        self.thread = threading.get_ident()
        self.account = StepAccountant(listener.record_step, at=0.0, add_time=listener.add_time,
                                      add_wait=self._collective_wait, add_tokens=listener.count_tokens)
        self._count_tokens = token_counter(listener)
        # (samples, tokens, (rows, elements) of the input) of each batch fetched
        self._fetched: collections.deque[tuple[int | None, TokenCounts, tuple[int, int] | None]] = collections.deque()
        self._etl = 0.0  # data wait fetched, not yet handed to the accountant
        self.in_step_fetch = False  # inside the Trainer's get_batch_samples
        self.whole_fetch = False  # inside one of its fetches from the epoch's iterator, timed whole
        self._batches: int | None = None  # what get_batch_samples gave the current step
        self._micro = 0  # micro-batches seen by the step events (without the Trainer)
        self._observing = False
        self._flops: StepFlopCounter | None = None
        self._collective: CollectiveTimer | None = None
        self._setup = TrainingSetup(listener, close=True)  # one training's, undone with its end
        self._in_history: PerformanceRecord | None = None  # the newest record in the log history
        self._prepared = False  # train() began and _prepare ran: on_train_begin keeps its listener

    # -- set-up ----------------------------------------------------------------------------
    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._use_trainer(find_trainer(sys._getframe(1)))

    def _use_trainer(self, trainer: Any) -> None:
        """Go first among the Trainer's callbacks (so the figures are in the logs the reporting callbacks
        get, and the step begins before the others' ``on_step_begin``)."""
        if trainer is None or trainer is self._trainer:
            return
        self._trainer = trainer
        callbacks = getattr(getattr(trainer, "callback_handler", None), "callbacks", None)
        if isinstance(callbacks, list) and self in callbacks and callbacks[0] is not self:
            callbacks.remove(self)
            callbacks.insert(0, self)

    def training_starting(self, trainer: Any) -> None:
        """``train()`` of this callback's Trainer begins, before it loads a checkpoint to resume from: this
        training's listener is set up, and the Trainer's loads are timed (``checkpoint_load``)."""
        self._use_trainer(trainer)
        self._prepare()
        wrap_loads(trainer, self.listener, self._setup)

    def _prepare(self) -> None:
        if self._observing:  # a train() that ended without the Trainer's training loop wrapped
            self._stop()
        if self.listener.closed:  # a second train()
            self.listener = self._runs.new()
        self._reset()
        self._setup.defer(self.listener.route_spans(self._on_span))
        self._prepared = True

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        if self._trainer is None:  # added after the Trainer was built: on_init_end never came
            self._use_trainer(find_trainer(sys._getframe(1)))
        if not self._prepared:  # train() was not seen starting (the class's train wrapped again since)
            self._prepare()
        self._prepared = False
        self._state = state
        listener, setup, trainer = self.listener, self._setup, self._trainer
        device = _device_of(model)
        self._flops = setup.use_device(device, None, _number_format(args, model, device))
        if getattr(args, "world_size", 1) > 1:
            timed, ddp, fsdp = collective_model(trainer, model)
            setup.join(getattr(args, "process_index", None), timed, ddp, fsdp)  # a no-op without a process group
            self._collective = setup.collective
        setup.watch_loader(self)
        setup.use_loader(getattr(train_dataloader, "base_dataloader", train_dataloader))  # accelerate's shard wraps it
        # the step ends where the optimizer's step (or accelerate's wrapper's inner one) ends
        setup.hook_steps((o for o in (optimizer, getattr(optimizer, "optimizer", None)) if o is not None), self._end)
        if trainer is not None:
            wrap_steps(trainer, self, setup)
        self._observing = True
        listener.start(iteration=getattr(state, "global_step", 0) or 0)  # a resumed run counts on
        self.account.restart(self.clock())

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        epoch = getattr(state, "epoch", None)
        self.listener.set_epoch(int(epoch) if epoch is not None else None)

    # -- the loader hooks ------------------------------------------------------------------
    def about_to_wait(self) -> None:
        """A fetch begins: the listener's writer may write while the training thread waits."""
        self.listener.about_to_wait()

    def on_fetch(self, started: float, ended: float, batch: Any) -> None:
        if self._trainer is not None and not self.in_step_fetch:
            return  # an evaluation's fetch, or one outside the steps: not the training's data wait
        if not self.whole_fetch:  # inside a fetch from the epoch's iterator, that one is timed whole
            self.fetched(started, ended)
        if batch is not None:  # counted on the host, as the base loader gives it (no device sync)
            self._fetched.append((batch_size(batch), self._count_tokens(batch), batch_shape(batch)))

    def fetched(self, started: float, ended: float) -> None:
        """The step waited for data from ``started`` to ``ended`` (a fetch, or the epoch's end)."""
        self._etl += fetch_wait(self.listener.gc_pauses, started, ended)  # its collections count as GC

    def on_loader(self, loader: Any, iterator: Any) -> None:
        if self._trainer is None or self.in_step_fetch:  # the training loader (accelerate starts it lazily)
            self._setup.use_loader(loader, iterator)

    def on_scaler_update(self) -> None:
        if self._observing and self.account.open:  # the step hook did not run: the scaler skipped the step
            self._end(skipped=True)

    # -- what the Trainer's wrappers report (see _trainer) -----------------------------------
    def took(self, batches: int) -> None:
        """The step trains on ``batches`` batches: the oldest fetched (one fetched ahead stays for the next)."""
        self._batches = batches
        self._hand_over(batches)

    def waited(self, seconds: float) -> None:
        """Seconds blocked in one of the Trainer's own collectives (the count of tokens across ranks, the
        gather of the loss when it logs): collective wait, between steps or inside one."""
        if self._observing:
            self.account.wait(seconds)

    def _collective_wait(self, seconds: float) -> None:
        if self._collective is not None:  # a distributed run: the wait of the next all-reduce holds it
            self._collective.add_wait(seconds)

    def _on_span(self, kind: str, started: float, ended: float) -> None:
        """A span of the listener (evaluation, a save, a load, :func:`trainperf.span`): during the training,
        other host time through the accountant; before ``on_train_begin`` (the loads of a resumed
        training), a part of the first window's named times."""
        if self._observing:
            self.account.span(kind, ended - started, within=self.account.began is not None)
        elif ended > started:
            self.listener.add_time(kind, ended - started)

    def training_ended(self, error: BaseException | None = None) -> None:
        """``train()`` ended, with ``error`` or normally: the training's listener closes (reporting the
        last window), everything installed for it is undone, and an error is named in the run
        directory's ``meta.json`` (``end_reason``)."""
        if error is not None and not self.listener.closed:
            self._setup.saw(error)  # an out-of-memory error leaves its evidence
            reason = ended_by(error)
            for sink in self.listener.sinks:
                if isinstance(sink, RunDirSink):
                    sink.set_end_reason(reason)
        self._stop()

    def _hand_over(self, batches: int) -> None:
        etl, self._etl = self._etl, 0.0
        account, fetched = self.account, self._fetched
        if etl:
            account.fetch(etl, batch=False)
        counter = self._flops
        for _ in range(min(batches, len(fetched))):
            samples, (padded, real, loss), shape = fetched.popleft()
            account.fetch(0.0, samples=samples, tokens=real, padded=padded, loss=loss)
            if counter is not None and shape is not None:
                counter.add_rows(*shape)

    # -- the step ----------------------------------------------------------------------------
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = self.clock()
        if self._batches is None:  # no Trainer found: the fetches so far waited before this step
            self._hand_over(0)
        self.account.begin(now)
        self._micro = 1
        timeline = self.listener.timeline
        if timeline is not None:
            timeline.begin()
        if self._flops is not None:
            self._flops.begin()

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._micro += 1

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        history = self.listener.history.records
        if history and history[-1] is not self._in_history and self.log_to_trainer:  # a report since the last step
            self._add_to_log_history()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._observing and self.account.open:  # no torch optimizer step seen (DeepSpeed, a skipped one)
            accelerator = getattr(self._trainer, "accelerator", None)
            self._end(skipped=bool(getattr(accelerator, "optimizer_step_was_skipped", False)))

    def _end(self, skipped: bool = False) -> None:
        """The iteration's optimizer step ended now (nothing when no step is open)."""
        if not self.account.open:
            return
        now = self.clock()
        if self._collective is not None:
            self._collective.on_step(now)
        batches = self._batches
        if batches is None:  # no Trainer found: the oldest batches fetched, one per micro-batch
            batches = self._micro
            self._hand_over(batches)
        if self._flops is not None:
            self._flops.end()
        self._batches = None
        self._micro = 0
        if skipped:
            self.account.step(skipped=True)
        self.account.end(now, batches=batches)

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

    def _add_to_log_history(self) -> None:
        """Each record not yet in the Trainer's ``state.log_history``, as a dict of its own as the
        Trainer's logs are there: its figures (``trainperf/<field>``) and ``step``, the Trainer's step
        at the window's end (the record's iteration: the count goes on from the Trainer's step)."""
        history = self.listener.history.records
        log_history = getattr(self._state, "log_history", None)
        if not self.log_to_trainer or not isinstance(log_history, list):
            return
        if not history or history[-1] is self._in_history:
            return
        new: list[PerformanceRecord] = []
        for record in reversed(history):
            if record is self._in_history:
                break
            new.append(record)
        self._in_history = history[-1]
        log_history.extend({**scalar_metrics(record), "step": record.iteration} for record in reversed(new))

    def _stop(self) -> None:
        """Undo one training's hooks and wrappers and close its listener (idempotent); the windows the
        close reported join the log history."""
        self._observing = self._prepared = False
        self._flops = None
        self._setup.undo()
        self._add_to_log_history()

    def close(self) -> None:
        """Close the listener, remove the loader hooks (a training that ended has done both), stop
        watching the Trainer's ``train()`` and close the sinks given to the callback (each training
        leaves them open for the next). Idempotent; it also happens when the callback is collected or
        the interpreter exits."""
        self._stop()
        unwatch_training(self)
        self._runs.close()


def ended_by(error: BaseException) -> str:
    """What the run directory says ended a training: the exception's type and message
    (``RuntimeError: CUDA out of memory``), its type alone without one (``KeyboardInterrupt``)."""
    name = type(error).__qualname__
    message = str(error)
    return f"{name}: {message}" if message else name


def _number_format(args: Any, model: Any, device: Any) -> str | None:
    """What the step computes in: the Trainer's mixed precision, else the parameters' dtype."""
    mixed = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    return step_format(mixed, model, device)


def _device_of(model: Any) -> Any:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return None
