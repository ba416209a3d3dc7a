"""``PerformanceCallback``: the listener for Lightning's ``Trainer``.

An iteration is one optimizer step, so gradient accumulation counts every micro-batch in the step
that consumes it; with manual optimization, one training batch. Its figures come from a
:class:`~trainperf.core._accountant.StepAccountant`: the callback only translates Lightning's hooks into
its events.

The step boundary is where the optimizer step itself ends (torch's optimizer step post-hook, for
the trainer's optimizers), a point no callback can move; with manual optimization, where
``training_step`` returns. A step a ``GradScaler`` skipped ends where the scaler updates; with no
step seen at all while ``trainer.global_step`` moved, the iteration ends in ``on_train_batch_end``.
What follows a step's end up to the next ``on_train_batch_start`` (every callback's
``on_train_batch_end``, logging, validation, checkpoints, the loop's own work, an epoch's edge) is
other host time of the next iteration; validation and checkpoint saving are also reported as
``eval_ms`` and ``checkpoint_ms``. The callback puts itself first among the trainer's callbacks, so
the order they were given in moves no time between the step and the host time around it.

A fit resumed with ``ckpt_path=`` counts its iterations on from the checkpoint's ``global_step``, and
its restore (reading the file, restoring the module, callbacks, loops, optimizers and schedulers, all
before training starts) is ``checkpoint_load``: a part of the first window's named times
(``checkpoint_load_ms``). A :func:`trainperf.span` during the fit goes through the same accounting
as a save.

Data wait: Lightning has no hook around fetching a batch. During an epoch the callback times the
training data fetcher's own ``next()`` on the dataloader iterator (through the profiler callables
that the training epoch loop hands to the fetcher), the same span Lightning's profiler reports as
``train_dataloader_next`` (for a loader without a length, Lightning fetches one batch ahead, so that
fetch returns the batch after the one about to run: its wait counts where it happened, its samples
and tokens in the iteration that trains on it). A ``DataLoader``'s ``iter()`` (which starts its
workers every epoch unless they persist) and any fetch outside that span (the fetch ahead made
while an epoch's iterator is created) are timed through the same loader hooks the plain-loop adapter
uses. Lightning creates the first epoch's iterator before ``on_train_start``: the first window
starts where that began, so it is the first step's data wait like any other.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..core import RunListeners, StepAccountant, check_options, fetch_wait
from ..records import DeviceTimeline
from ..sinks import LoggerSink
from ..torch import shared
from ..torch.shared import StepFlopCounter, TrainingSetup
from ._compat import callback_base
from ._trainer import ddp_of, fsdp_of, lightning_flops, number_format, samples_reader

if TYPE_CHECKING:
    from pytorch_lightning import Callback as _CallbackBase
else:
    _CallbackBase = callback_base()

__all__ = ["PerformanceCallback"]


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
        listener = self.listener
        # Lightning's own collective between steps is timed only in a distributed run, with a collective timer
        self._account = StepAccountant(listener.record_step, add_time=listener.add_time,
                                       add_wait=lambda seconds: self._collective.add_wait(seconds),
                                       add_tokens=listener.count_tokens)
        # the tokens of each batch fetched and not yet trained on, oldest first: Lightning fetches a
        # batch ahead, and the batch its hooks see is on the device (its mask unreadable without a wait)
        self._fetched_tokens: collections.deque[shared.TokenCounts] = collections.deque()
        self._count_tokens = shared.token_counter(listener)
        self._score = listener.options.report_score is True  # reading the loss is asked for, not assumed
        self._scaler: Any = None  # a GradScaler scales the loss that on_before_backward gets
        self._flop_counter: StepFlopCounter | None = None
        self._step_at_begin = 0  # trainer.global_step when the iteration began
        self._manual = False
        self._stepped = False  # an optimizer step was seen since the scaler's last update
        self._samples_of: Callable[[Any], int | None] = shared.batch_size
        self._fetch_started: float | None = None  # inside the fetcher's timed next()
        self._first_fetch: float | None = None  # when the first fetch began (read when training starts)
        self._training = False  # on_train_start came: spans go through the accountant
        self._eval_started: float | None = None
        self.thread = threading.get_ident()  # the loader hooks count fetches on this thread only
        self.clock: Callable[[], float] = self._clock
        self._setup = TrainingSetup(listener, close=True)  # what teardown undoes
        self._timeline: DeviceTimeline | None = None
        self._collective: Any = None  # a distributed run's forward and collective timing

    # -- set-up ---------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        if self.listener.closed:
            self.listener = self._runs.new()
            self._clock = self.listener.clock
        self._reset_state()
        self._setup.defer(self.listener.route_spans(self._on_span))
        self._wrap_restore(trainer)  # Lightning restores a checkpoint after this hook
        _go_first(trainer, self)
        if self.log_to_loggers and trainer.loggers:
            self.listener.add_sink(LoggerSink(trainer))
        # Lightning creates the first epoch's iterator (and, for a loader without a length, fetches
        # its first batch) before ``on_train_start``: the loader hooks time them from here on (on this
        # thread, with the listener's clock, as ``_reset_state`` set them), and the first window
        # starts where they began. The advice is read off the trainer's training loader when asked.
        self._setup.watch_loader(self, lambda: getattr(trainer, "train_dataloader", None))

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        listener, setup = self.listener, self._setup
        device = getattr(pl_module, "device", None)
        self._flop_counter = setup.use_device(device, self._timeline_factory, number_format(trainer, pl_module, device),
                                              lightning_flops(trainer, pl_module))
        self._timeline = listener.timeline
        # a no-op without an initialised process group
        if getattr(trainer, "world_size", 1) > 1 and setup.join(trainer.global_rank, pl_module, ddp_of(trainer),
                                                                 fsdp_of(trainer, pl_module)):
            self._collective = setup.collective
            self._wrap_loop_collective(trainer)
        # Manual optimization may step several optimizers per batch (a GAN): an iteration is a batch
        self._manual = not getattr(pl_module, "automatic_optimization", True)
        self._scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
        self._samples_of = samples_reader(getattr(trainer.fit_loop, "_combined_loader", None))
        # iterations end in torch's optimizer step post-hook, for the trainer's optimizers
        setup.hook_steps(getattr(trainer, "optimizers", None) or (), self._manual_step if self._manual else self._end)
        if self._manual:
            setup.wrap(pl_module, "training_step", self._ending_training_step)
        setup.wrap(trainer, "save_checkpoint", self._timed_save)
        self._wrap_fetch(trainer)
        self._training = True
        # a resumed fit counts on from the checkpoint's step (its loops are restored by now)
        step = getattr(trainer, "global_step", 0)
        listener.start(at=self._first_fetch, iteration=step if isinstance(step, int) and step > 0 else 0)
        # a fetch before now (the first epoch's iterator) is the first iteration's data wait
        self._account.boundary = self._clock() if self._first_fetch is None else self._first_fetch

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.listener.set_epoch(trainer.current_epoch)

    # -- hot path -------------------------------------------------------------------------
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        fetched = self._fetched_tokens
        account = self._account
        first = account.began is None
        # the batch about to run (its fetch's wait counted where it happened: maybe a step earlier)
        padded, real, loss = fetched.popleft() if fetched else shared.NOT_COUNTED
        account.fetch(0.0, samples=self._samples_of(batch), tokens=real, padded=padded, loss=loss)
        if self._flop_counter is not None:  # each micro-batch's shape, the first before the step's count begins
            self._flop_counter.add_batch(batch)
        if first:  # the iteration's first micro-batch
            account.begin(self._clock())
            self._step_at_begin = trainer.global_step
            if self._timeline is not None:  # the device's side of the iteration starts here
                self._timeline.begin()
            if self._flop_counter is not None:
                self._flop_counter.begin()

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._score:  # the accumulation-normalised loss, as on_train_batch_end's outputs["loss"]
            loss = loss.detach()
            scale = getattr(self._scaler, "_scale", None)  # 16-mixed hands over the scaled loss
            self.listener.set_score(loss if scale is None else loss / scale)

    def _manual_step(self) -> None:
        """With manual optimization, one of the trainer's optimizers finished a step (with automatic
        optimization, that step ends the iteration: :meth:`_end`)."""
        self._stepped = True
        self._account.step()

    def on_scaler_update(self) -> None:
        """A ``GradScaler`` finished a step: with no optimizer step seen, the scaler skipped it."""
        # (with automatic optimization, a step seen ended the iteration already)
        if not self._stepped and self._account.began is not None:
            self._account.step(skipped=True)
            if not self._manual:
                self._end()
        self._stepped = False

    def _ending_training_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def training_step(*args: Any, **kwargs: Any) -> Any:
            output = original(*args, **kwargs)
            if self._score:
                score = output.get("loss") if isinstance(output, Mapping) else output
                if score is not None:
                    self.listener.set_score(score)
            if self._account.began is not None:  # manual optimization: the batch's work ends here
                self._end()
            return output

        return training_step

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # the step ended the iteration already, unless none was seen: a step skipped or not hooked
        if self._account.began is not None and (self._manual or trainer.global_step != self._step_at_begin):
            self._end()

    def _end(self) -> None:
        now = self._clock()
        if self._collective is not None:
            self._collective.on_step(now)
        if self._flop_counter is not None and self._flop_counter.end():  # done: no more calls
            self._flop_counter = None
        self._account.end(now)

    # -- the loader hooks (DataLoader.iter() and fetches outside the fetcher's timed next()) --
    def about_to_wait(self) -> None:
        """A fetch begins: the listener's writer may write while the training thread waits."""
        self.listener.about_to_wait()

    def on_fetch(self, started: float, ended: float, batch: Any) -> None:
        if batch is not None:
            self._fetched_tokens.append(self._count_tokens(batch))
        if self._fetch_started is None:  # else the fetcher's own span times it
            if self._first_fetch is None:
                self._first_fetch = started
            self._add_fetch(started, ended)

    def _add_fetch(self, started: float, ended: float) -> None:
        # its collections are GC; the batch's counts go to the step that trains on it
        self._account.fetch(fetch_wait(self.listener.gc_pauses, started, ended), batch=False)

    def on_loader(self, loader: Any, iterator: Any) -> None:
        self._setup.use_loader(None, iterator)

    # -- evaluation and checkpoints: other host time, and figures of their own -------------
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:  # the sanity check is before training
            self._eval_started = self._clock()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._eval_started is not None:
            self._account.span("eval", self._clock() - self._eval_started)
            self._eval_started = None

    def _timed_save(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            with self.listener.span("checkpoint"):
                return original(*args, **kwargs)

        return save_checkpoint

    def _on_span(self, kind: str, started: float, ended: float) -> None:
        """A span of the listener (a save, the restore, :func:`trainperf.span`): before training, a part
        of the first window's named times; during it, other host time through the accountant."""
        if not self._training:
            if ended > started:
                self.listener.add_time(kind, ended - started)
            return
        self._account.span(kind, ended - started, within=self._account.began is not None)

    def _wrap_restore(self, trainer: Any) -> None:
        """Time the restore of a fit resumed with ``ckpt_path=`` as ``checkpoint_load``: the checkpoint
        connector's ``_restore_modules_and_callbacks`` (reading the file, the module's weights, the
        datamodule's and callbacks' states) and ``restore_training_state`` (precision, loops, optimizers,
        schedulers). Without a checkpoint both return at once, and nothing is timed."""
        connector = getattr(trainer, "_checkpoint_connector", None)

        def timed(loads: Callable[..., bool]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def make(original: Callable[..., Any]) -> Callable[..., Any]:
                def restore(*args: Any, **kwargs: Any) -> Any:
                    if not loads(*args, **kwargs):
                        return original(*args, **kwargs)
                    with self.listener.span("checkpoint_load"):
                        return original(*args, **kwargs)

                return restore

            return make

        self._setup.wrap(connector, "_restore_modules_and_callbacks",
                         timed(lambda checkpoint_path=None, *_, **__: bool(checkpoint_path)))
        self._setup.wrap(connector, "restore_training_state",
                         timed(lambda *_, **__: bool(getattr(connector, "_loaded_checkpoint", None))))

    # -- wrappers, each undone at teardown ------------------------------------------------
    def _wrap_fetch(self, trainer: Any) -> None:
        """Time the training fetcher's ``next()``: at each epoch's start, Lightning's training epoch loop
        hands its ``_on_before_fetch`` / ``_on_after_fetch`` to the fetcher as profiler callables; wrapped
        once here on the loop instance, the fetcher gets the timed ones every epoch."""
        epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        if epoch_loop is None or not all(hasattr(epoch_loop, n) for n in ("_on_before_fetch", "_on_after_fetch")):
            return

        def before(inner: Callable[[], None]) -> Callable[[], None]:
            def started() -> None:
                self._fetch_started = self._clock()
                inner()
            return started

        def after(inner: Callable[[], None]) -> Callable[[], None]:
            def ended() -> None:
                if self._fetch_started is not None:
                    self._add_fetch(self._fetch_started, self._clock())
                    self._fetch_started = None
                inner()
            return ended

        self._setup.wrap(epoch_loop, "_on_before_fetch", before)
        self._setup.wrap(epoch_loop, "_on_after_fetch", after)

    def _wrap_loop_collective(self, trainer: Any) -> None:
        """Time the collective Lightning's training loop runs before every batch (a broadcast of whether
        rank 0 got SIGTERM, Lightning 2.5 and later; before every micro-batch with accumulation): the
        ranks that wait there for a late rank are waiting, not doing host work or the step's."""
        epoch_loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        clock = self._clock

        def timed(original: Callable[..., Any]) -> Callable[..., Any]:
            def broadcast(*args: Any, **kwargs: Any) -> Any:
                began = clock()
                try:
                    return original(*args, **kwargs)
                finally:
                    self._account.wait(clock() - began)

            return broadcast

        self._setup.wrap(epoch_loop, "_broadcast_sigterm_tensor", timed)

    # -- teardown -------------------------------------------------------------------------
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.listener.flush()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":  # the FLOP counter left, hooks and wrappers removed, the listener closed
            self._flop_counter = None
            self._setup.undo()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """A fit that fails does not reach ``teardown``: undo everything here (the iterations before
        the failure are reported) and let the exception go on."""
        if getattr(getattr(trainer, "state", None), "fn", None) == "fit":
            self._setup.saw(exception)  # an out-of-memory error leaves its evidence
            self.teardown(trainer, pl_module, "fit")

    def summary(self) -> Any:
        """The listener's :meth:`~trainperf.PerformanceListener.summary` for the last fit."""
        return self.listener.summary()

    @property
    def history(self) -> Any:
        """The listener's recent records."""
        return self.listener.history


def _go_first(trainer: Any, callback: Any) -> None:
    """Put ``callback`` first among the trainer's callbacks, so that its hooks run before any other's
    whatever order they were given in: a callback listed before it moves no time between the step
    and the host time around it (its ``on_train_batch_start`` work is the step's, as it is when
    listed after). Lightning calls ``setup`` over the same list: the callbacks after this one in it
    keep their places, so each is still called once."""
    callbacks = getattr(trainer, "callbacks", None)
    if isinstance(callbacks, list) and callback in callbacks and callbacks[0] is not callback:
        callbacks.remove(callback)
        callbacks.insert(0, callback)
