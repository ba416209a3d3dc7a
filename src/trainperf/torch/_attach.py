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
  after the step;
* **compute**: the rest, from that first sign to the step's end, loader waits taken out: moving the
  batch, forwards (also no-grad ones such as a teacher's), backward, every optimizer step.

When no loader can be seen (an iterable that is not a DataLoader, not wrapped with ``timed``), the
data wait falls back to the gap between the previous step and the next forward pass, and the record
says so (``etl_source == "gap"``). Samples and batches then come from the forwards, a forward on
the same input tensor as an earlier one in the step counting once.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, is_grad_enabled
from torch.optim.optimizer import register_optimizer_step_post_hook

from ..core import PerformanceListener, fetch_wait
from ..records import DeviceTimeline
from . import _loop_hooks as loop_hooks
from ._advice import loader_advisor, on_cuda_of, worker_pids
from ._batch import batch_size
from ._collective import CollectiveTimer
from ._flops import StepFlopCounter, format_in_use
from ._gap import GapSplitter
from ._tap import attachments_of, tap_of, untap
from .shared import join_cluster, process_rank, time_collectives, token_counter, use_model_device

__all__ = ["Attachment", "attach", "detach"]


class Attachment:
    """The link between one model and one listener; :meth:`detach` removes every hook it added.

    Args:
        model: the module whose forward passes open iterations.
        listener: the listener that receives one call per optimizer step.
        timeline_factory: builds the device timeline for the model's device (tests pass a fake);
            by default CUDA events on CUDA and the host clock alone elsewhere.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        listener: PerformanceListener,
        *,
        timeline_factory: Callable[[torch.device], DeviceTimeline] | None = None,
    ) -> None:
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
        self.clock = listener.clock  # the listener's; loader timing reads it too
        # The same clock read inline on the two reads of every iteration (no extra Python call).
        self._uc = listener.clock_parts()
        self._gc_pauses = listener.gc_pauses  # a fetch's own collections are GC, not data wait
        self._record = listener.record_step  # the clock's own differences: nothing to check again
        self._count_tokens = token_counter(listener)  # a batch's real tokens, read as the loader gives it
        self._flop_counter: StepFlopCounter | None = None  # until training starts, and once counted
        self._started = False
        self._taps_work = False  # a compiled model's forward is not seen: steps alone make iterations
        self.thread = threading.get_ident()  # loader timing counts fetches on this thread only
        self._boundary = 0.0
        self._step_depth = 0
        self._hooks: list[Any] = []  # handles of per-optimizer hooks
        self._peers: list[weakref.ref[Attachment]] = []  # attachments on other models, told of each step
        self._collective: CollectiveTimer | None = None  # a distributed run's forward and collective timing
        self._collective_pending = False
        self._gap: GapSplitter | None = None  # a distributed run's generator loop: data wait vs host work
        self._gap_data: float | None = None
        self._reset_iteration()
        # Which optimizers train this model, weakly keyed: an optimizer outlives many attachments.
        self._owned: weakref.WeakKeyDictionary[torch.optim.Optimizer, bool] = weakref.WeakKeyDictionary()
        self._last_owned: torch.optim.Optimizer | None = None  # the one optimizer checked by identity
        tap_of(model).callbacks.append(self._on_forward)
        self._step_handle = _register_step_hook(self)
        loop_hooks.register(self)
        self._detached = False
        _link_peers(self)
        listener.on_close(self.detach)
        attachments_of(model, create=True).append(self)
        self._advisor: Callable[[str], list[str]] | None = None  # for the training loader, once iter() was seen
        self._worker_pids: frozenset[int] = frozenset()
        listener.add_advisor(self._advise)
        listener.set_loader_workers(lambda: self._worker_pids)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            # timed from now: a comm hook registered after attach() runs inside the timing one
            self._collective = time_collectives(listener, model, model)

    def _reset_iteration(self) -> None:
        self._open = False
        self._activity: float | None = None  # first sign of this iteration
        self._first_forward: float | None = None
        self._etl = 0.0
        self._idle_etl = 0.0  # loader time before the iteration's first sign: an epoch's end or start
        self._peer_busy = 0.0  # other listened models' steps before this iteration's first sign
        self._late_busy = 0.0  # this model's optimizer steps after the iteration closed, before its first sign
        self._late_end = -float("inf")  # where the last of them ended (any clock: readings may be negative)
        self._fetched = 0
        self._loader_samples: int | None = 0
        self._loader_tokens: int | None = 0
        self._samples: int | None = 0
        self._micro = 0
        self._first_input: Tensor | None = None  # held until the step, to spot a repeated forward on it
        self._inputs: list[weakref.ref[Tensor]] = []  # the later ones, weakly
        self._steps = 0

    # hot path ---------------------------------------------------------------
    def _on_forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not is_grad_enabled():
            return None
        if self._first_forward is None:  # the iteration's first forward
            uc = self._uc
            self._first_forward = now = uc.raw() - uc.own.total - uc.offset.total  # self.clock(), inline
            if not self._taps_work:
                self._taps_work = True
                if not self._started:
                    self._begin(now)
            if self._gap is not None:
                self._gap_data = self._gap.close()
                if not self._gap.loop_codes:
                    self._gap.learn_loop(sys._getframe(1))
            if self._collective_pending:  # the first training forward of a distributed run: DDP is on the stack
                self._collective_pending = False
                self._collective = time_collectives(self.listener, self.model)
            if self._timeline is not None and not self._fetched:  # no loader seen: it starts here
                self._timeline.begin()
            if self._flop_counter is not None:  # the second step's FLOPs are counted, from here
                self._flop_counter.begin()
            if self._activity is None:
                self._activity = now
            self._open = True
        if self._fetched:  # the loader's batches give samples and batches
            return None
        first = args[0] if args else None
        if type(first) is Tensor:  # the common case, without the general search
            if self._first_input is None:
                self._first_input = first
            elif first is self._first_input or self._seen(first):  # a closure re-evaluated, a repeated pass
                return None
            shape = first.shape
            n: int | None = shape[0] if shape else batch_size(args)
        else:
            n = batch_size(args) if args else batch_size(kwargs)
            if isinstance(first, Tensor):  # a subclass
                if self._first_input is None:
                    self._first_input = first
                elif first is self._first_input or self._seen(first):
                    return None
        self._micro += 1
        samples = self._samples
        self._samples = None if n is None or samples is None else samples + n
        return None

    def _seen(self, tensor: Tensor) -> bool:
        """Whether a later forward of this step had ``tensor`` as input already; remembers it if not."""
        for ref in self._inputs:
            if ref() is tensor:
                return True
        self._inputs.append(weakref.ref(tensor))
        return False

    def on_fetch(self, started: float, ended: float, batch: Any) -> None:
        """A loader fetch from ``started`` to ``ended`` delivered ``batch`` (``None``: it started or
        ended an epoch: ``iter()`` starting workers, or the ``StopIteration`` of an exhausted loader)."""
        if not self._started:
            self._begin(started)
        self._etl += fetch_wait(self._gc_pauses, started, ended)  # its collections count as GC, once
        if batch is None:
            # Not a sign that the next iteration started: what the loop does after the epoch's last
            # batch (evaluation, a checkpoint, printing) is its own host work, not the next step's.
            if self._activity is None:
                self._idle_etl += ended - started
            return
        if self._activity is None:
            self._activity = started
        self._open = True
        if not self._fetched and self._timeline is not None:
            # The device's side of the iteration starts when its data is on the host: what the
            # device does after that (the copy to it, zero_grad) is work that free data still needs.
            self._timeline.begin()
        self._fetched += 1
        n = _pair_size(batch)  # the common (inputs, targets) pair without the general search
        if n is None:
            n = batch_size(batch)
        self._loader_samples = None if n is None or self._loader_samples is None else self._loader_samples + n
        tokens = self._count_tokens(batch)
        self._loader_tokens = None if tokens is None or self._loader_tokens is None else self._loader_tokens + tokens

    def on_loader(self, loader: Any, iterator: Any) -> None:
        """The training loop started iterating ``loader`` (a DataLoader): its settings back the
        advice, and its worker processes are the ones whose CPU use counts."""
        self._advisor = loader_advisor(loader, on_cuda_of(self.listener))
        self._worker_pids = worker_pids(iterator)

    def _advise(self, kind: str) -> list[str]:
        return self._advisor(kind) if self._advisor is not None else []

    def _on_nested_step_start(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._step_depth += 1

    def _on_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not (optimizer is self._last_owned or self._owns(optimizer)):
            return
        if self._step_depth:  # an optimizer whose step() calls its base's: only the outer call counts
            self._step_depth -= 1
            if self._step_depth:
                return
        self._steps += 1
        if self._open or not self._taps_work:
            self._close(0)
        elif self._activity is None:
            # A second optimizer's step after the iteration closed, before anything else happened (a
            # head stepped apart from its backbone): its time is the next iteration's compute, neither
            # the loop's other time nor the wait for the next batch that may follow it.
            now = self.clock()  # rare: no need for the inline read of the hot path
            began = self._late_end if self._late_end > self._boundary else self._boundary
            self._late_busy += now - began
            self._late_end = now

    def on_scaler_update(self) -> None:
        """A ``GradScaler`` finished a step: one still open was skipped (inf/NaN gradients)."""
        if self._open:
            self._steps += 1
            self._close(1)

    def _close(self, skipped: int) -> None:
        if not self._started:
            self._begin()
        uc = self._uc
        now = uc.raw() - uc.own.total - uc.offset.total  # self.clock(), inline
        activity = self._activity
        fetched = self._fetched
        # where this model's training began, as the other listened models see it: a late step's start
        began = self._boundary if self._late_busy else activity
        busy = self._peer_busy + self._late_busy  # compute before this iteration's first sign
        if fetched:
            etl, started = self._etl, None
            other = activity - self._boundary - self._idle_etl - busy if activity is not None else 0.0
            if other < 0.0:
                other = 0.0
            samples, batches, tokens = self._loader_samples, fetched, self._loader_tokens
            self._etl, self._idle_etl, self._fetched, self._loader_samples = 0.0, 0.0, 0, 0
            self._loader_tokens = 0
        else:  # no loader seen: the gap before the first forward is the data wait
            etl, other = self._etl, 0.0  # an epoch's start (iter(loader)) may have been timed
            started = self._first_forward if self._first_forward is not None else activity
            if started is not None and busy:  # another model's or a late optimizer's step is compute, not the gap
                started -= busy
            data = self._gap_data
            if data is not None and started is not None:  # the iterable was timed: the rest is host time
                gap = max(0.0, started - self._boundary)
                etl = min(gap, etl + data)
                other, started = gap - etl, None
            samples, batches = (self._samples, self._micro) if self._micro else (None, 1)
            tokens = None
            self._etl = self._idle_etl = 0.0
        self._peer_busy = self._late_busy = 0.0
        steps = self._steps
        # reset for the next iteration (what the common path changed, without a method call)
        self._open = False
        self._activity = self._first_forward = self._first_input = None
        self._samples, self._micro, self._steps = 0, 0, 0
        if self._inputs:
            self._inputs = []
        self._boundary = now
        if self._collective is not None:
            self._collective.on_step(now)
        peers = self._peers
        if peers:  # other listened models' loops: this step is their loop's training work too
            self._tell_peers(began if began is not None else now)
        self._gap_data = None
        counter = self._flop_counter
        if counter is not None:
            counter.end()
            if counter.done:
                self._flop_counter = None
        self._record(now, samples, batches, etl, started, other, steps, skipped, tokens)
        if self._gap is not None and not fetched:  # no loader: time the iterable until the next forward
            self._gap.open()

    def _tell_peers(self, began: float) -> None:
        """This model trained from ``began`` to now, its ``_boundary`` (a GAN's discriminator, a second
        model in the same loop). For a listened model between its steps, that is training work, not its
        loop's other host time (nor a data wait that is a gap): it counts as its next iteration's compute."""
        now = self._boundary
        for ref in self._peers:
            peer = ref()
            if peer is None or peer._detached or peer._activity is not None or peer.thread != self.thread:
                continue
            start = began if began > peer._boundary else peer._boundary
            if now > start:
                peer._peer_busy += now - start

    # set-up -----------------------------------------------------------------
    def _begin(self, at: float | None = None) -> None:
        """Training has started: set the listener up for the model's device and start its clock."""
        self._started = True
        self.thread = threading.get_ident()
        param = next(self.model.parameters(), None)
        if param is not None:
            use_model_device(self.listener, param.device, self._timeline_factory)
            self._flop_counter = StepFlopCounter(self.listener, param.device, None,
                                                 format_now=lambda: format_in_use(param))
        self._timeline = self.listener.timeline
        rank = process_rank()
        if rank is not None:
            self.listener.set_rank(rank)
            joined = join_cluster(self.listener)
            self._collective_pending = joined and self._collective is None
            if joined:
                self._gap = GapSplitter(self.clock)
        self.listener.set_etl_source("loader")
        if param is not None and param.device.type == "cpu":
            self.listener.set_step_threads(torch.get_num_threads())
        self._boundary = self.clock() if at is None else at
        self.listener.start(self._boundary)  # the first fetch, when one began training, is in the first window

    def _owns(self, optimizer: torch.optim.Optimizer) -> bool:
        owned = self._owned.get(optimizer)
        if owned is None:
            ours = {id(p) for p in self.model.parameters()}
            owned = any(id(p) in ours for group in optimizer.param_groups for p in group["params"])
            self._owned[optimizer] = owned
            levels = _hooked_step_levels(optimizer) if owned else 1
            if levels > 1:  # seen first in the innermost post-hook: the outer ones of this step follow
                self._step_depth = levels
                self._hooks.append(optimizer.register_step_pre_hook(self._on_nested_step_start))
        if owned:
            self._last_owned = optimizer
        return owned

    # public -----------------------------------------------------------------
    def set_score(self, loss: Any) -> None:
        """Remember the loss of the current step; read (``.item()``) only on report iterations."""
        self.listener.set_score(loss)

    def detach(self) -> None:
        """Remove the forward and optimizer hooks (idempotent); the listener stays usable elsewhere."""
        if self._detached:
            return
        self._detached = True
        if self._flop_counter is not None:
            self._flop_counter.abandon()
            self._flop_counter = None
        if self._gap is not None:
            self._gap.close()
        untap(self.model, self._on_forward)
        self._step_handle.remove()
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        loop_hooks.unregister(self)
        _unlink_peers(self)
        self._last_owned = None
        self._owned.clear()
        attachments = attachments_of(self.model)
        if self in attachments:
            attachments.remove(self)

    @property
    def detached(self) -> bool:
        return self._detached


_all: list[weakref.ref[Attachment]] = []


def _link_peers(attachment: Attachment) -> None:
    """Tell every live attachment on another model about ``attachment``, and the other way round
    (forgetting the attachments dropped since)."""
    _all[:] = [ref for ref in _all if (a := ref()) is not None and not a._detached]
    for ref in _all:
        live = ref()
        if live is not None:
            live._peers = [p for p in live._peers if (q := p()) is not None and not q._detached]
    for ref in _all:
        other = ref()
        if other is not None and other.model is not attachment.model:
            other._peers.append(weakref.ref(attachment))
            attachment._peers.append(ref)
    _all.append(weakref.ref(attachment))


def _unlink_peers(attachment: Attachment) -> None:
    for ref in _all:
        other = ref()
        if other is not None:
            other._peers = [p for p in other._peers if (q := p()) is not None and q is not attachment]
    _all[:] = [ref for ref in _all if ref() not in (None, attachment)]
    attachment._peers = []


def _pair_size(batch: Any) -> int | None:
    """The rows of a tensor, or of an ``(inputs, targets)`` pair of tensors whose rows agree;
    ``None`` for anything else (then :func:`batch_size` decides)."""
    kind = type(batch)
    if kind is Tensor:
        shape = batch.shape
        return shape[0] if shape else None
    if (kind is tuple or kind is list) and len(batch) == 2:
        a, b = batch
        if type(a) is Tensor and type(b) is Tensor:
            sa, sb = a.shape, b.shape
            if sa and sb and sa[0] == sb[0]:
                return int(sa[0])
    return None


class _WeakStepHook:
    """torch's global step hook for one attachment, holding it weakly: a model and listener dropped
    without ``close()`` are not kept alive by torch's hook table. The hook of a dropped attachment
    does nothing and is removed at the next :func:`attach` (not while torch runs the hooks)."""

    __slots__ = ("ref", "handle")

    def __init__(self, attachment: Attachment) -> None:
        self.ref = weakref.ref(attachment)
        self.handle: Any = None

    @property
    def dead(self) -> bool:
        return self.ref() is None


_step_hooks: list[_WeakStepHook] = []


def _register_step_hook(attachment: Attachment) -> Any:
    """Register ``attachment``'s step hook, removing those of attachments dropped since."""
    for dead in [h for h in _step_hooks if h.dead]:
        dead.handle.remove()
        _step_hooks.remove(dead)
    hook = _WeakStepHook(attachment)
    ref = hook.ref

    def on_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:  # a closure: cheaper to call
        target = ref()
        if target is not None:
            target._on_step(optimizer, args, kwargs)

    on_step.attachment = ref  # type: ignore[attr-defined]  # which attachment a hook in torch's table serves
    hook.handle = register_optimizer_step_post_hook(on_step)
    _step_hooks.append(hook)
    return hook.handle


def _hooked_step_levels(optimizer: torch.optim.Optimizer) -> int:
    """How many times one ``optimizer.step()`` runs torch's step hooks: torch wraps the ``step`` of
    each optimizer class it builds, so a subclass whose ``step`` calls its base's runs them twice."""
    return sum(getattr(c.__dict__.get("step"), "hooked", False) for c in type(optimizer).__mro__) or 1


def attach(
    model: torch.nn.Module,
    listener: PerformanceListener,
    *,
    timeline_factory: Callable[[torch.device], DeviceTimeline] | None = None,
) -> Attachment:
    """Listen to ``model`` in an unchanged training loop; for models whose class you can't change.

    Example:
        >>> import torch, trainperf
        >>> model = torch.nn.Linear(4, 1)
        >>> handle = trainperf.torch.attach(model, trainperf.PerformanceListener(10, sinks=[]))
        >>> # ... your loop, unchanged ...
        >>> handle.detach()                        # or listener.close()
    """
    return Attachment(model, listener, timeline_factory=timeline_factory)


def detach(model: torch.nn.Module) -> None:
    """Remove every listener attached to ``model``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {model!r}")
    for attachment in list(attachments_of(model)):
        attachment.detach()
