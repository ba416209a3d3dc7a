"""Hooks that turn an unchanged PyTorch loop into listener calls.

One iteration is one optimizer step: a step of an optimizer that holds the model's parameters
closes it. What opens it is the first sign of training after the previous step: a
``torch.utils.data.DataLoader`` delivering a batch, or a forward pass with autograd on. Gradient
accumulation therefore counts every micro-batch in the step that consumes it.

The iteration's time splits three ways, so a window adds up:

* **data wait**: the time blocked in the DataLoader iterator's own ``next()`` (and in
  ``iter(loader)``, which starts its workers), on the training thread with autograd on, or in a
  loader wrapped with :func:`trainperf.torch.timed`;
* **other**: host time from the end of the previous step to the first sign of the next iteration
  (a fetch, a forward, an optimizer step): evaluation, logging, metric reads, ``loss.item()``
  after the step, checkpoints (``torch.save``/``torch.load`` on the training thread, also inside
  the iteration) and :func:`trainperf.span` blocks. Evaluation runs from a forward pass with autograd
  off, or a fetch with autograd off, between two steps to the next sign of training or span; its time
  and the spans' are also reported on their own (``eval_ms``, ``checkpoint_ms``, ``checkpoint_load_ms``);
* **compute**: the rest, from that first sign to the step's end, loader waits taken out: moving the
  batch, forwards (also no-grad ones such as a teacher's), backward, every optimizer step.

When no loader can be seen (an iterable that is not a DataLoader, not wrapped with ``timed``), the
data wait falls back to the gap between the previous step and the next forward pass, and the record
says so (``etl_source == "gap"``). Samples and batches then come from the forwards, a forward on
the same input tensor as an earlier one in the step counting once. Evaluation and checkpoints in
that gap are other time, not data wait. A distributed run times the iterable itself, under DDP also
between micro-batches (``no_sync``): every micro-batch's data wait counts. The arithmetic is a
:class:`~trainperf.core._accountant.StepAccountant`'s. Tokens are counted as the loader gives a batch.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, is_grad_enabled

from ..base import check_int
from ..core import PerformanceListener, StepAccountant, fetch_wait
from ..records import DeviceTimeline
from . import _checkpoint as checkpoints
from ._batch import batch_size, pair_size
from ._collective import CollectiveTimer
from ._flops import StepFlopCounter, format_in_use
from ._gap import GapSplitter
from ._registry import link_peers, owns, register_step_hook, tell_peers, unlink_peers
from ._setup import TrainingSetup
from ._tap import attachments_of, leave, seen_before, tap_of, untap
from .shared import process_rank, token_counter

__all__ = ["Attachment", "attach", "detach"]


class Attachment:
    """The link between one model and one listener; :meth:`detach` removes every hook it added.

    Args:
        model: the module whose forward passes open iterations.
        listener: the listener that receives one call per optimizer step.
        timeline_factory: builds the device timeline for the model's device (tests pass a fake);
            by default CUDA events on CUDA and the host clock alone elsewhere.
        start_iteration: the iterations done before, by a run resumed from a checkpoint: the first
            record's ``first_iteration`` is ``start_iteration + 1``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        listener: PerformanceListener,
        *,
        timeline_factory: Callable[[torch.device], DeviceTimeline] | None = None,
        start_iteration: int = 0,
    ) -> None:
        self._start_iteration: int = check_int("start_iteration", start_iteration)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(listener, PerformanceListener):
            raise TypeError(f"listener must be a PerformanceListener, got {listener!r}")
        if listener.closed:
            raise ValueError("listener is closed; create a new one")
        self.model = model
        self.listener = listener
        self._timeline_factory = timeline_factory
        self._timeline: DeviceTimeline | None = None  # the listener's, set when training starts
        self.clock, self.about_to_wait = listener.clock, listener.about_to_wait  # the loader's timing reads them
        # The same clock read inline on the two reads of every iteration (no extra Python call).
        self._uc = listener.clock_parts()
        self._gc_pauses = listener.gc_pauses  # a fetch's own collections are GC, not data wait
        self._account = StepAccountant(listener.record_step, add_time=listener.add_time,  # on the clock's own
                                       add_tokens=listener.count_tokens)  # differences: the iteration's arithmetic
        self._count_tokens = token_counter(listener)  # a batch's tokens, read as the loader gives it
        self._flop_counter: StepFlopCounter | None = None  # until training starts, and once done
        self._started = False
        self._taps_work = False  # a compiled model's forward is not seen: steps alone make iterations
        self.thread = threading.get_ident()  # loader timing counts fetches on this thread only
        self._step_depth = 0
        self._hooks: list[Any] = []  # handles of per-optimizer hooks
        self._peers: list[weakref.ref[Attachment]] = []  # attachments on other models, told of each step
        self._collective: CollectiveTimer | None = None  # a distributed run's forward and collective timing
        self._collective_pending = False
        self._gap: GapSplitter | None = None  # a distributed run's generator loop: data wait vs host work
        self._gap_data: float | None = None
        self._eval_at: float | None = None  # where the evaluation running between two steps began
        self._peer_busy = 0.0  # other listened models' steps before this iteration's first sign
        self._late_busy = 0.0  # this model's optimizer steps after the iteration closed, before its first sign
        self._late_end = -float("inf")  # where the last of them ended (any clock: readings may be negative)
        self._forward_seen = False  # the iteration's first forward with autograd on happened
        self._samples: int | None = 0  # without a loader: samples and micro-batches from the forwards
        self._micro = 0
        self._first_input: Tensor | None = None  # held until the step, to spot a repeated forward on it
        self._inputs: list[weakref.ref[Tensor]] = []  # the later ones, weakly
        # Which optimizers train this model, weakly keyed: an optimizer outlives many attachments.
        self._owned: weakref.WeakKeyDictionary[torch.optim.Optimizer, bool] = weakref.WeakKeyDictionary()
        self._last_owned: torch.optim.Optimizer | None = None  # the one optimizer checked by identity
        self._detached = False
        setup = self._setup = TrainingSetup(listener)  # what detach() undoes
        tap_of(model).callbacks.append(self._on_forward)
        setup.defer(lambda: untap(model, self._on_forward))
        setup.defer(register_step_hook(self).remove)
        setup.defer(self._forget_optimizers)
        setup.watch_loader(self)  # the advice and workers of the loader iterated (on_loader)
        checkpoints.register(self)  # torch.save and torch.load as spans of the listener
        setup.defer(lambda: checkpoints.unregister(self))
        setup.defer(listener.route_spans(self.on_span))
        link_peers(self)
        setup.defer(lambda: unlink_peers(self))
        attachments_of(model, create=True).append(self)
        setup.defer(lambda: leave(model, self))
        listener.on_close(self.detach)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            # timed from now: a comm hook registered after attach() runs inside the timing one
            self._collective = setup.time_collectives(model, model)

    # hot path ---------------------------------------------------------------
    def _on_forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not is_grad_enabled():  # evaluation between steps; inside a step (a target pass) or a span nothing
            if self._eval_at is None and self._started and self._account.began is None and not self.listener.in_span:
                self._eval_at = self.clock()
            return None
        if not self._forward_seen:  # the iteration's first forward
            uc = self._uc
            now = uc.raw() - uc.own.total - uc.offset.total  # self.clock(), inline
            self._forward_seen = True
            if not self._taps_work:
                self._taps_work = True
                if not self._started:
                    self._begin(now)
            if self._eval_at is not None:
                self._end_eval(now)
            if self._gap is not None:
                self._gap_data = self._gap.close()
                if not self._gap.loop_codes:
                    self._gap.learn_loop(sys._getframe(1))
            if self._collective_pending:  # the first training forward of a distributed run: DDP is on the stack
                self._collective_pending = False
                self._collective = self._setup.time_collectives(self.model)
                self._time_micro_batches()
            account = self._account
            if self._timeline is not None and not account.batches:  # no loader seen: it starts here
                self._timeline.begin()
            if self._flop_counter is not None:  # a step of a new shape is counted from here; without a
                self._flop_counter.begin(None if account.batches else args or kwargs)  # loader, on this input
            if account.began is None:  # earlier by other models' and late steps: compute, not other
                account.begin(now - self._peer_busy - self._late_busy)
        elif self._gap is not None:  # a later micro-batch: the iterable timed since the last one's backward
            data = self._gap.close()
            if data:
                self._account.fetch(data, batch=False)
        if self._account.batches:  # the loader's batches give samples and batches
            return None
        first = args[0] if args else None
        if type(first) is Tensor:  # the common case, without the general search
            if self._first_input is None:
                self._first_input = first
            elif first is self._first_input or seen_before(self._inputs, first):  # a closure re-run, a repeated pass
                return None
            shape = first.shape
            n: int | None = shape[0] if shape else batch_size(args)
        else:
            n = batch_size(args) if args else batch_size(kwargs)
            if isinstance(first, Tensor):  # a subclass
                if self._first_input is None:
                    self._first_input = first
                elif first is self._first_input or seen_before(self._inputs, first):
                    return None
        if self._micro and self._flop_counter is not None:  # a later micro-batch (the first is in begin)
            self._flop_counter.add_batch(args or kwargs)
        self._micro += 1
        samples = self._samples
        self._samples = None if n is None or samples is None else samples + n
        return None

    def on_fetch(self, started: float, ended: float, batch: Any) -> None:
        """A loader fetch from ``started`` to ``ended`` delivered ``batch`` (``None``: it started or
        ended an epoch: ``iter()`` starting workers, or the ``StopIteration`` of an exhausted loader)."""
        if not self._started:
            self._begin(started)
        if self._eval_at is not None:
            self._end_eval(started)
        account = self._account
        wait = fetch_wait(self._gc_pauses, started, ended)  # its collections count as GC, once
        if batch is None:
            # Not a sign that the next iteration started: what the loop does after the epoch's last
            # batch (evaluation, a checkpoint, printing) is its own host work, not the next step's.
            account.fetch(wait, batch=False)
            return
        if account.began is None:
            account.begin(started - self._peer_busy - self._late_busy)
        if not account.batches and self._timeline is not None:
            # The device's side of the iteration starts when its data is on the host: what the
            # device does after that (the copy to it, zero_grad) is work that free data still needs.
            self._timeline.begin()
        n = pair_size(batch)  # the common (inputs, targets) pair without the general search
        n = batch_size(batch) if n is None else n
        padded, real, loss = self._count_tokens(batch)
        account.fetch(wait, samples=n, tokens=real, padded=padded, loss=loss)
        if self._flop_counter is not None:
            self._flop_counter.add_batch(batch)

    def on_eval_fetch(self, started: float) -> None:
        """A loader fetch with autograd off began at ``started`` on the training thread: between
        steps, an evaluation loader's, whose time is evaluation's."""
        if self._eval_at is None and self._started and self._account.began is None and not self.listener.in_span:
            self._eval_at = started

    def on_span(self, kind: str, started: float, ended: float) -> None:
        """A span of the listener (``torch.save``, ``torch.load``, :func:`trainperf.span`) ran from
        ``started`` to ``ended``: other host time of the iteration, and its own figure."""
        if not self._started:  # before training (weights loaded): the first window's, a start-up part
            if ended > started:
                self.listener.add_time(kind, ended - started)
            return
        if self._eval_at is not None:  # an evaluation ends where the span after it starts
            self._end_eval(started)
        self._account.span(kind, ended - started, within=self._account.began is not None)

    def _end_eval(self, at: float) -> None:
        began, self._eval_at = self._eval_at, None
        if began is not None:
            self._account.span("eval", at - began)

    def on_loader(self, loader: Any, iterator: Any) -> None:
        """The training loop started iterating ``loader`` (a DataLoader): its settings back the
        advice, and its worker processes are the ones whose CPU use counts."""
        self._setup.use_loader(loader, iterator)

    def _on_nested_step_start(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._step_depth += 1

    def _on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not (optimizer is self._last_owned or owns(self, optimizer)):
            return
        if self._step_depth:  # an optimizer whose step() calls its base's: only the outer call counts
            self._step_depth -= 1
            if self._step_depth:
                return
        if not self._started:
            self._begin()
        account = self._account
        account.step()
        if account.began is not None or not self._taps_work:
            self._close()
        else:
            # A second optimizer's step after the iteration closed, before anything else happened (a
            # head stepped apart from its backbone): its time is the next iteration's compute, neither
            # the loop's other time nor the wait for the next batch that may follow it.
            now = self.clock()  # rare: no need for the inline read of the hot path
            boundary = account.boundary
            began = self._late_end if self._late_end > boundary else boundary
            self._late_busy += now - began
            self._late_end = now

    def on_scaler_update(self) -> None:
        """A ``GradScaler`` finished a step: one still open was skipped (inf/NaN gradients)."""
        if self._account.began is not None:
            self._account.step(skipped=True)
            self._close()

    def _close(self) -> None:
        uc = self._uc
        now = uc.raw() - uc.own.total - uc.offset.total  # self.clock(), inline
        if self._eval_at is not None:
            self._end_eval(now)
        account = self._account
        if self._peers:  # other listened models' loops: this step is their loop's training work too
            began = account.began
            late = self._late_busy
            # where this model's training began, as they see it: a late step's start, else its first sign
            start = account.boundary if late else now if began is None else began + self._peer_busy + late
            tell_peers(self, start, now)
        self._peer_busy = self._late_busy = 0.0
        self._forward_seen = False
        self._first_input = None
        samples, micro = self._samples, self._micro
        self._samples, self._micro = 0, 0
        if self._inputs:
            self._inputs = []
        if self._collective is not None:
            self._collective.on_step(now)
        if self._flop_counter is not None and self._flop_counter.end():  # done: no more calls
            self._flop_counter = None
        if account.batches:
            account.end(now)
            return
        # no loader seen: the gap before the first forward is the data wait, or what the iterable took of it
        data, self._gap_data = self._gap_data, None
        account.end_gap(now, samples=samples if micro else None, batches=micro or 1, data=data)
        if self._gap is not None:  # time the iterable until the next forward
            self._gap.open()

    # set-up -----------------------------------------------------------------
    def _begin(self, at: float | None = None) -> None:
        """Training has started: set the listener up for the model's device and start its clock."""
        self._started = True
        self.thread = threading.get_ident()
        setup = self._setup
        param = next(self.model.parameters(), None)
        if param is not None:
            self._flop_counter = setup.use_device(param.device, self._timeline_factory,
                                                  format_now=lambda: format_in_use(param), model=self.model)
        self._timeline = self.listener.timeline
        rank = process_rank()
        if rank is not None:
            joined = setup.join(rank)
            self._collective_pending = joined and self._collective is None
            if joined:
                gap = self._gap = GapSplitter(self.clock)
                setup.defer(gap.close)
                self._time_micro_batches()
        boundary = self.clock() if at is None else at
        self._account.restart(boundary)
        # the first fetch is in the first window; a resumed run counts on (start_iteration=, or the listener's own)
        self.listener.start(boundary, iteration=self._start_iteration or self.listener.iteration)

    def _time_micro_batches(self) -> None:
        """Without a loader, time the iterable from each backward pass under ``no_sync`` to the next
        forward too: every micro-batch's data wait counts, not only the first one's."""
        if self._collective is not None and self._gap is not None:
            self._collective.micro_batch_done = self._micro_batch_done

    def _micro_batch_done(self) -> None:
        if self._gap is not None and not self._account.batches:  # a loader's fetches are timed where they happen
            self._gap.open()

    # public -----------------------------------------------------------------
    def set_score(self, loss: Any) -> None:
        """Remember the loss of the current step; read (``.item()``) only on report iterations."""
        self.listener.set_score(loss)

    def detach(self) -> None:
        """Remove the forward and optimizer hooks (idempotent); the listener stays usable elsewhere."""
        if self._detached:
            return
        self._detached = True
        self._flop_counter = None
        self._setup.undo()  # the FLOP counter left, every hook removed

    def _forget_optimizers(self) -> None:
        for handle in self._hooks:  # the nested steps' pre-hooks
            handle.remove()
        self._hooks = []
        self._last_owned = None
        self._owned.clear()

    @property
    def detached(self) -> bool:
        return self._detached


def attach(
    model: torch.nn.Module,
    listener: PerformanceListener,
    *,
    timeline_factory: Callable[[torch.device], DeviceTimeline] | None = None,
    start_iteration: int = 0,
) -> Attachment:
    """Listen to ``model`` in an unchanged training loop; for models whose class you can't change.
    ``start_iteration``: the iterations done before, for a run resumed from a checkpoint (see
    :class:`Attachment`).

    Example:
        >>> import torch, trainperf
        >>> model = torch.nn.Linear(4, 1)
        >>> handle = trainperf.torch.attach(model, trainperf.PerformanceListener(10, sinks=[]))
        >>> # ... your loop, unchanged ...
        >>> handle.detach()                        # or listener.close()
    """
    return Attachment(model, listener, timeline_factory=timeline_factory, start_iteration=start_iteration)


def detach(model: torch.nn.Module) -> None:
    """Remove every listener attached to ``model``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {model!r}")
    for attachment in list(attachments_of(model)):
        attachment.detach()
