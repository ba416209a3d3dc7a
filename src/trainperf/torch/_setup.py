"""One training's set-up on a listener, shared by every adapter, and its undoing in one call.

An adapter sets a listener up once per training: the model's device (device clock, probes, the FLOP
counter, the CPU's step threads), the rank and the link to the other ranks (with DDP's collectives
timed), the loader hooks and the training loader's workers and advice, torch's optimizer step hook
for the training's optimizers, and methods wrapped on framework instances. :class:`TrainingSetup`
does each of these and remembers how to undo it; :meth:`Teardown.undo` undoes everything, newest
first, on every exit path. Nothing here runs per iteration, except the filter of the step hook
that the adapter's own hook had.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

from ..core import PerformanceListener
from ..records import DeviceTimeline
from . import _loop_hooks as loop_hooks
from ._advice import loader_advisor, on_cuda_of, worker_pids
from ._cluster import Cluster
from ._collective import CollectiveTimer, find_ddp
from ._cuda import AllocatorCounters, CudaTimeline, alloc_retries_reader, memory_probe
from ._flops import StepFlopCounter
from ._fsdp import find_fsdp, say_untimed
from ._memory_history import MemoryHistory
from ._nvml import nvml_probe
from ._oom import OomWatch
from ._registry import hooked_step_levels
from ._tap import ForwardTap, tap_of, untap

__all__ = ["Teardown", "TrainingSetup", "join_cluster", "time_collectives", "use_model_device"]


class Teardown:
    """What undoes a set-up: steps run newest first by :meth:`undo`, and methods wrapped on instances."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], object]] = []

    def defer(self, step: Callable[[], object]) -> None:
        """Run ``step`` at :meth:`undo` (before the steps deferred earlier)."""
        self._steps.append(step)

    def wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> bool:
        """Replace ``owner.name`` on the instance with ``make(owner.name)`` until :meth:`undo`, which gives
        the instance back its own attribute if it had one. Nothing when ``owner`` is ``None`` or has no
        such method; whether it was wrapped."""
        if owner is None or not callable(getattr(owner, name, None)):
            return False
        own = vars(owner)
        had, before = name in own, own.get(name)
        wrapper = make(getattr(owner, name))
        setattr(owner, name, wrapper)

        def unwrap() -> None:
            if vars(owner).get(name) is not wrapper:
                return  # wrapped again since: ours stays inside, and does nothing once the training stops
            if had:
                setattr(owner, name, before)
            else:
                delattr(owner, name)

        self.defer(unwrap)
        return True

    def undo(self) -> None:
        """Run every deferred step once, newest first, each even when another failed (said afterwards as
        a ``RuntimeWarning``; an interrupt is raised again once all have run). Idempotent."""
        steps, self._steps = self._steps, []
        interrupted: BaseException | None = None
        for step in reversed(steps):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - the other steps still run
                name = getattr(step, "__qualname__", repr(step))
                warnings.warn(f"trainperf: undoing the set-up, {name} failed: {exc!r}", RuntimeWarning, stacklevel=2)
            except BaseException as exc:  # a KeyboardInterrupt: the rest is undone first
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted


class TrainingSetup(Teardown):
    """One training's set-up on ``listener``; :meth:`undo` undoes all of it (and closes the listener
    last, with ``close=True``).

    Attributes:
        counter: the FLOP counter of :meth:`use_device` (abandoned at :meth:`undo`), else ``None``.
        collective: the collective timing of :meth:`join` or :meth:`time_collectives`, else ``None``.
    """

    def __init__(self, listener: PerformanceListener, *, close: bool = False) -> None:
        super().__init__()
        self.listener = listener
        self.counter: StepFlopCounter | None = None
        self.collective: CollectiveTimer | None = None
        self.oom: OomWatch | None = None
        self._advisor: Callable[[str], list[str]] | None = None
        self._loader_of: Callable[[], Any] | None = None
        self._pids: frozenset[int] = frozenset()
        if close:
            self.defer(listener.close)  # the first deferred: the last undone

    def use_device(self, device: Any, timeline_factory: Callable[[Any], DeviceTimeline] | None = None,
                   fmt: str | None = None, known: float | None = None, *,
                   format_now: Callable[[], str | None] | None = None, model: Any = None) -> StepFlopCounter:
        """The model trains on ``device`` (``None``: unknown): the device clock and probes, the step's FLOP
        counter (see :class:`StepFlopCounter` for ``fmt``, ``known`` and ``format_now``), on the CPU the
        threads the step computes with, and the watch for out-of-memory errors (:attr:`oom`; with the
        allocator's history on CUDA), which also sees the errors ``model``'s forward passes raise."""
        listener = self.listener
        history = None
        if getattr(device, "type", None) == "cuda":
            if device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
            history = MemoryHistory(listener, device, getattr(listener.options, "memory_history", "never"))
        if device is not None:
            use_model_device(listener, device, timeline_factory, history)
        if self.oom is None:
            watch = self.oom = OomWatch(listener, device, history)
            watch.start()
            self.defer(watch.stop)
            if model is not None:
                self._see_forward_errors(tap_of(model), watch.saw)
        counter = self.counter = StepFlopCounter(listener, device, fmt, known, format_now=format_now)
        self.defer(counter.abandon)
        if getattr(device, "type", None) == "cpu":
            listener.set_step_threads(torch.get_num_threads())
        return counter

    def _see_forward_errors(self, tap: ForwardTap, saw: Callable[[BaseException], None]) -> None:
        tap.errors = [*tap.errors, saw]  # a new list: a forward may be running
        self.defer(lambda: setattr(tap, "errors", [e for e in tap.errors if e is not saw]))

    def saw(self, error: BaseException) -> None:
        """``error`` ended the training (an adapter saw it go by): an out-of-memory error leaves its
        evidence (see :class:`OomWatch`). The caller raises it on, unchanged."""
        if self.oom is not None:
            self.oom.saw(error)

    def join(self, rank: int | None, model: torch.nn.Module | None = None, ddp: Any = None,
             fsdp: str | None = None) -> bool:
        """This process is ``rank`` of a multi-rank run: link the listener to the other ranks and, when
        they are linked and a ``model`` is given, time its forwards and its DDP's collectives (kept as
        :attr:`collective`; under FSDP, ``fsdp`` saying how, nothing: see :func:`time_collectives`).
        Whether the ranks are linked (never without a process group)."""
        self.listener.set_rank(rank)
        joined = join_cluster(self.listener)
        if joined and model is not None:
            self.time_collectives(model, ddp, fsdp)
        return joined

    def time_collectives(self, model: torch.nn.Module, ddp: Any = None, fsdp: str | None = None) -> CollectiveTimer:
        """Time ``model``'s forwards and its DDP's collectives (see :func:`time_collectives`) until the
        listener closes."""
        self.collective = time_collectives(self.listener, model, ddp, fsdp)
        return self.collective

    def watch_loader(self, observer: loop_hooks.LoopObserver, loader_of: Callable[[], Any] | None = None) -> None:
        """Tell ``observer`` of the DataLoader fetches and scaler updates (the loop hooks) until :meth:`undo`;
        the records' data wait is the loader's, their workers those of the loader given to :meth:`use_loader`,
        and their advice read off it (or off ``loader_of()``, the framework's training loader when advising)."""
        loop_hooks.register(observer)
        self.defer(lambda: loop_hooks.unregister(observer))
        self._loader_of = loader_of
        self.listener.add_advisor(self._advise)
        self.listener.set_loader_workers(lambda: self._pids)
        self.listener.set_etl_source("loader")

    def use_loader(self, loader: Any, iterator: Any = None) -> None:
        """``loader`` is the training loader (its settings back the advice); ``iterator``, when given, one
        of its iterators, whose worker processes are the ones whose CPU use counts."""
        if loader is not None:
            self._advisor = loader_advisor(loader, on_cuda_of(self.listener))
        if iterator is not None:
            self._pids = worker_pids(iterator)

    def _advise(self, kind: str) -> list[str]:
        if self._loader_of is not None:
            return loader_advisor(self._loader_of(), on_cuda_of(self.listener))(kind)
        return self._advisor(kind) if self._advisor is not None else []

    def hook_steps(self, optimizers: Iterable[torch.optim.Optimizer], on_step: Callable[[], object]) -> None:
        """Call ``on_step()`` where a step of one of ``optimizers`` ends (torch's global step post-hook),
        until :meth:`undo`. An optimizer whose ``step`` calls its base's runs the hooks once per level:
        only the outer call counts."""
        ours = tuple(optimizers)
        depth = 0

        def stepped(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            nonlocal depth
            if optimizer not in ours:
                return
            if depth:  # an inner call of a nested step: the outer one ends it
                depth -= 1
                if depth:
                    return
            on_step()

        def nested(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            nonlocal depth
            depth += 1

        self.defer(register_optimizer_step_post_hook(stepped).remove)
        for optimizer in ours:
            if hooked_step_levels(optimizer) > 1:  # seen first in the innermost post-hook
                self.defer(optimizer.register_step_pre_hook(nested).remove)


def use_model_device(
    listener: PerformanceListener,
    device: torch.device,
    timeline_factory: Callable[[torch.device], DeviceTimeline] | None = None,
    history: MemoryHistory | None = None,
) -> None:
    """Set ``listener`` up for a model on ``device``.

    On CUDA the records carry the device index, iteration times and the device's idle time come
    from CUDA events (a :class:`CudaTimeline`, or ``timeline_factory``'s), the caching allocator's
    retries are reported beside Python's GC, and, unless the listener has ``report_hardware=False``,
    its memory peaks and NVML's utilisation with every record. Elsewhere only a given
    ``timeline_factory`` is used.

    Args:
        listener: the listener to set up.
        device: the device of the model's parameters.
        timeline_factory: builds the device timeline (tests pass a fake).
        history: the allocator's history on CUDA, which the memory probe starts when memory runs short.
    """
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        listener.use_device(device.index, (timeline_factory or CudaTimeline)(device))
        counters = AllocatorCounters(device)  # one read per report serves both
        listener.add_collector(*alloc_retries_reader(device, counters))
        if listener.options.report_hardware:
            probe = memory_probe(device, counters)
            listener.add_probe(history.watch(probe) if history is not None else probe)
            nvml = nvml_probe(device)
            if nvml is not None:
                listener.add_probe(nvml)
    elif timeline_factory is not None:
        listener.set_timeline(timeline_factory(device))


def join_cluster(listener: PerformanceListener) -> bool:
    """In a ``torch.distributed`` run of more than one process, link ``listener`` to the other ranks
    (see :class:`trainperf.torch._cluster.Cluster`); whether the run is one. Once per listener; a
    rank without a listener, or one that links late, never blocks the others."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return False
    if not any(isinstance(sink, Cluster) for sink in listener.sinks):
        options = listener.options
        cluster = Cluster(listener, rank=dist.get_rank(), world=dist.get_world_size(), every=options.cluster_every,
                          timeout_s=options.cluster_timeout_s, wall_clock=listener.wall_clock)
        listener.add_sink(cluster)
    return True


def time_collectives(listener: PerformanceListener, model: torch.nn.Module, ddp: Any = None,
                     fsdp: str | None = None) -> CollectiveTimer:
    """Time ``model``'s training forward passes and, when it runs under ``ddp`` (a
    ``DistributedDataParallel``, found when ``model``'s forward is running inside it), the
    collectives around them (see :class:`trainperf.torch._collective.CollectiveTimer`). The timing
    stops when the listener closes.

    Under FSDP (``fsdp`` says how, as :func:`trainperf.torch._fsdp.find_fsdp` names it; found in
    ``model`` and the calling frames when not given) nothing is timed, the forward pass neither: it
    holds FSDP's all-gather, where the others wait for a late rank. That is said once (a warning,
    and the run directory's meta data), and the timer returned times nothing (its ``untimed`` says why).
    """
    if ddp is None:
        ddp = find_ddp(model)
    if ddp is not None:
        fsdp = None
    elif fsdp is None:
        fsdp = find_fsdp(model)
    if fsdp is not None:
        say_untimed(listener, fsdp)
        return CollectiveTimer(None, listener.add_time, listener.add_sample, listener.clock, untimed=fsdp)
    inner: torch.nn.Module = ddp.module if ddp is not None and model is ddp else model  # type: ignore[assignment]
    timer = CollectiveTimer(ddp, listener.add_time, listener.add_sample, listener.clock)
    tap = tap_of(inner)
    before, after = timer.before_forward, timer.after_forward
    # new lists, not changed in place: this may run from one of the tap's own callbacks
    tap.callbacks = [before, *tap.callbacks]
    tap.after = [*tap.after, after]

    def untime() -> None:
        timer.stop()
        tap.after = [a for a in tap.after if a != after]
        untap(inner, before)  # the last one out gives the model its own forward back

    listener.on_close(untime)
    return timer
