"""Where one rank's iteration goes around DDP's collectives, timed on the host (on CUDA, on the
device), with no device sync.

Under ``DistributedDataParallel`` every rank waits for the slowest one inside the collectives, so
iteration times are equal and only the split tells the ranks apart. For one DDP model this times,
per iteration, on the listener's clock:

* ``forward``: the training forward pass of the wrapped module (autograd on), without DDP's
  buffer broadcast;
* ``backward``: from the end of that forward pass to the backward pass's last gradient (the loss,
  the backward pass, whatever the loop does in between), less the comm hooks' own time;
* ``comm``: the comm hooks' own time, launching the all-reduce (compression, a user's hook);
* ``wait``: time blocked in collectives: from the last gradient to the end of the backward pass
  (DDP waits there for every bucket's all-reduce), less the hooks launched in between, plus the
  buffer broadcast (BatchNorm). With gradient accumulation only the backward pass that runs the
  all-reduce (the one outside ``no_sync``) gives a wait: the micro-batches before it run no
  collective, and their forward and backward passes count toward the rank's own time;
* ``step``: from the end of the backward pass to the end of the optimizer step.

A training framework's own collectives (Lightning's stop-signal broadcast, the Hugging Face
Trainer's gathers) are timed by its adapter and given to :meth:`CollectiveTimer.add_wait`: they join
the wait of the next backward pass that runs the all-reduce, and are taken out of the ``backward``
or ``step`` they fell in.

The rank the others wait for is the one that waits least; its own phases say why (see
:mod:`trainperf.ranks._stragglers`). The timing is a hook on the parameter whose gradient comes last
(found in the first backward pass) and a callback queued on the autograd engine that runs after
DDP's own end-of-backward work: DDP keeps its own all-reduce, in C++ (a Python comm hook would cost
tens of microseconds per bucket). A comm hook the user registers after this (``register_comm_hook``,
a built-in one) runs inside one that times its launch. DDP takes one hook only: a Python hook
registered before the timing started cannot be wrapped, so its launches are seen where it makes them
(see :mod:`trainperf.torch._launches`); a C++ one's short time counts as ``wait``.

On CUDA with NCCL the host does not block in the all-reduce (the compute stream waits for the
communication stream), so a host-timed wait would say nothing. There the same boundaries record
CUDA events instead, and ``forward``, ``backward``, ``wait`` and ``step`` are the device's times
between them, read once the events have completed, a few iterations late (see
:mod:`trainperf.torch._device_phases`); ``comm`` stays the hooks' host time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import is_grad_enabled

from ._cuda import CudaEvents
from ._device_phases import BackwardPass, DevicePhases, EventSource
from ._launches import LaunchWatch

__all__ = ["CollectiveTimer", "find_ddp", "wrapper_on_stack"]

_ENGINE: Any = torch.autograd.Variable._execution_engine


def find_ddp(model: torch.nn.Module) -> Any:
    """The ``DistributedDataParallel`` that is ``model`` or wraps it (seen in the calling frames, as
    when ``model``'s forward runs inside DDP's), else ``None``."""
    ddp_type = torch.nn.parallel.DistributedDataParallel
    if isinstance(model, ddp_type):
        return model
    return wrapper_on_stack(model, ddp_type, sys._getframe(1))


def wrapper_on_stack(model: torch.nn.Module, wrapper_type: type, frame: Any) -> Any:
    """The instance of ``wrapper_type`` (a wrapper with a ``module``: DDP, FSDP1) whose method is
    running in ``frame`` or one of the 40 frames that called it, and that wraps ``model``; else ``None``."""
    for _ in range(40):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if isinstance(owner, wrapper_type) and _wraps(owner, model):
            return owner
        frame = frame.f_back
    return None


def _wraps(ddp: Any, model: torch.nn.Module) -> bool:
    inner = ddp.module
    if inner is model:
        return True
    return any(child is model for child in inner.children())  # Lightning's wrapper around the module


class CollectiveTimer:
    """Times one DDP model's iterations around its collectives; see the module's docstring.

    Args:
        ddp: the ``DistributedDataParallel`` model; ``None``: only the forward passes are timed.
        add_time: the listener's ``add_time(name, seconds)``.
        add_sample: the listener's ``add_sample(name, seconds)``, for the wait (once per iteration).
        clock: the listener's clock (its own time left out).
        untimed: why the collectives are not timed (the FSDP that shards the model, see
            :mod:`trainperf.torch._fsdp`), with ``ddp`` ``None``: then nothing is timed, and the
            adapters do not tap the forward pass either.
        events: where a DDP model on CUDA gets its device events (default: CUDA's, on the model's
            device); unused elsewhere.
    """

    def __init__(self, ddp: Any, add_time: Callable[[str, float], None], add_sample: Callable[[str, float], None],
                 clock: Callable[[], float], *, untimed: str | None = None,
                 events: EventSource | None = None) -> None:
        self.ddp = ddp
        self.untimed = untimed
        self.clock = clock
        self._add = add_time
        self._add_sample = add_sample
        self._broadcast = 0.0  # waits in the buffer broadcast and add_wait's since the last all-reduce
        self._held = 0.0  # add_wait's since the latest forward's or backward pass's end: not that phase's time
        self._forward_start: float | None = None
        self._forward_end: float | None = None
        self._syncs = True  # the backward pass of the latest training forward runs DDP's all-reduce
        self._launch_early = 0.0  # comm hooks' time before the last gradient, this backward pass
        self._launch_late = 0.0  # ... and after it
        self._last_ready: float | None = None
        self._left: float | None = None
        self._on = True
        self._user: tuple[Callable[..., Any], Any] | None = None
        self._sync_buffers: Any = None
        #: called when a backward pass under ``no_sync`` ended (a micro-batch before the step's last)
        self.micro_batch_done: Callable[[], None] | None = None
        # With NCCL on CUDA the host does not block in the collective (the device's stream waits):
        # a host-timed wait would say nothing, so the phases and the wait are read off device events.
        self.host_waits = ddp is not None and getattr(ddp, "device_type", "cpu") != "cuda"
        self.device_phases: DevicePhases | None = None
        if ddp is not None and not self.host_waits:
            source = events if events is not None else CudaEvents(getattr(ddp, "device", torch.device("cuda")))
            self.device_phases = DevicePhases(source, add_time, add_sample)
        self.mode = "none" if ddp is None else self._install_hook()
        # a Python comm hook DDP already holds: its launches are seen in torch.distributed's functions
        self._launches = LaunchWatch(clock) if self.mode != "none" and getattr(ddp, "_comm_hooks", None) else None
        if ddp is not None and hasattr(ddp, "_sync_buffers"):
            self._sync_buffers = ddp.__dict__.get("_sync_buffers")
            inner_sync = ddp._sync_buffers

            def sync_buffers(*args: Any, **kwargs: Any) -> Any:
                started = clock()
                try:
                    return inner_sync(*args, **kwargs)
                finally:
                    self._broadcast += clock() - started

            ddp.__dict__["_sync_buffers"] = sync_buffers

    # -- the forward pass (callbacks of the wrapped module's tap) ---------------------------------
    def before_forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if is_grad_enabled():  # an evaluation forward is not the training step's
            # under ``no_sync`` (gradient accumulation) DDP prepares no all-reduce for this backward pass
            self._syncs = self.ddp is None or bool(getattr(self.ddp, "require_backward_grad_sync", True))
            self._forward_start = self.clock()
            if self.device_phases is not None:
                self.device_phases.forward_start()

    def after_forward(self) -> None:
        started = self._forward_start
        if started is not None:
            self._forward_start = None
            self._forward_end = now = self.clock()
            self._held = 0.0
            device = self.device_phases
            if device is not None:
                device.forward_end()
            elif self._on:
                self._add("forward", now - started)

    # -- the gradients and the comm hook -------------------------------------------------------
    def _install_hook(self) -> str:
        """Mark the last gradient of the backward pass; wrap the comm hooks registered from now on."""
        ddp = self.ddp
        params = [p for p in ddp.module.parameters() if p.requires_grad]
        if not params or not hasattr(params[0], "register_post_accumulate_grad_hook"):
            return "none"
        # The first backward pass tells which parameter's gradient comes last; only it keeps a hook.
        self._order: list[int] = []
        self._handles = [p.register_post_accumulate_grad_hook(self._first_gradients(k)) for k, p in enumerate(params)]
        self._params = params
        ddp.__dict__["register_comm_hook"] = self._register_user_hook
        ddp.__dict__["_register_builtin_comm_hook"] = self._register_builtin
        return "gradient"

    def _first_gradients(self, k: int) -> Callable[[torch.Tensor], None]:
        def seen(param: torch.Tensor) -> None:
            self._order.append(k)
            if len(self._order) == 1:
                _ENGINE.queue_callback(self._keep_last)
            self._last_ready = self.clock()
            self._launch_late = 0.0  # hooks launched before this gradient were not after the last one
            if self._launches is not None:
                self._launches.arm()
            if self.device_phases is not None:  # each replaces the one before: the last one stays
                self.device_phases.last_gradient()

        return seen

    def _keep_last(self) -> None:
        """The first backward pass's gradients are in: from the next pass, only the last one is marked."""
        for handle in self._handles:
            handle.remove()
        self._handles = [self._params[self._order[-1]].register_post_accumulate_grad_hook(self._last_gradient)]
        self._params = []
        _ENGINE.queue_callback(self._on_backward_end)

    def _register_user_hook(self, state: object, hook: Callable[..., Any]) -> None:
        """DDP's ``register_comm_hook``, from the timer's start on: the user's hook runs inside one
        that times how long it takes to launch its collective."""
        ddp = self.ddp
        ddp._check_comm_hook(hook)
        if ddp.logger is not None:
            ddp.logger._set_comm_hook_name(hook.__qualname__)
        ddp._comm_hooks.append((hook, state))
        self._user = (hook, state)
        torch.distributed._register_comm_hook(ddp.reducer, None, self._comm_hook)  # type: ignore[attr-defined]

    def _register_builtin(self, comm_hook_type: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        kinds = torch.distributed.BuiltinCommHookType  # type: ignore[attr-defined]
        hooks = {kinds.ALLREDUCE: default_hooks.allreduce_hook, kinds.FP16_COMPRESS: default_hooks.fp16_compress_hook}
        if comm_hook_type not in hooks:
            raise ValueError(f"comm_hook_type must be ALLREDUCE or FP16_COMPRESS, got {comm_hook_type!r}")
        self._register_user_hook(self.ddp.process_group, hooks[comm_hook_type])

    def _comm_hook(self, state: object, bucket: Any) -> Any:
        clock = self.clock
        ready = clock()
        hook, user_state = self._user  # type: ignore[misc]
        future = hook(user_state, bucket)
        took = clock() - ready
        if self._last_ready is None:
            self._launch_early += took
        else:  # the last gradient is in: this launch delays the end of the backward pass
            self._launch_late += took
        return future

    def _last_gradient(self, param: torch.Tensor) -> None:
        self._last_ready = self.clock()
        self._launch_late = 0.0
        if self._launches is not None:
            self._launches.arm()
        if self.device_phases is not None:
            self.device_phases.last_gradient()
        _ENGINE.queue_callback(self._after_finalize)

    def _after_finalize(self) -> None:
        # Queued around the time DDP queues its own end-of-backward work (which waits for the
        # all-reduces); the engine runs callbacks queued by a callback too, so this one runs after it.
        _ENGINE.queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:
        now = self.clock()
        ready, early, late = self._last_ready, self._launch_early, self._launch_late
        self._last_ready, self._launch_early, self._launch_late = None, 0.0, 0.0
        if self._launches is not None:
            launched = self._launches.disarm()
            if ready is not None and launched is not None and launched > ready:
                late = max(late, launched - ready)  # the earlier hook's time to its last launch
        if ready is None or not self._on:
            return
        if early or late:
            self._add("comm", early + late)
        device = self.device_phases
        if device is not None:  # the device's times, read once its events have completed
            device.backward_end(BackwardPass(self._syncs, early, late, self._broadcast if self._syncs else 0.0))
            if self._syncs:
                self._broadcast = 0.0
            self._forward_end = None
            self._held = 0.0
            if not self._syncs and self.micro_batch_done is not None:
                self.micro_batch_done()
            return
        forward_end = self._forward_end
        if forward_end is not None and ready > forward_end:
            self._add("backward", max(0.0, ready - forward_end - early - self._held))
        self._forward_end = None
        self._left = now
        self._held = 0.0
        if not self._syncs:  # a micro-batch under no_sync: no collective ran, its wait comes later
            if self.micro_batch_done is not None:
                self.micro_batch_done()
            return
        if self.host_waits:
            self._add_sample("wait", max(0.0, now - ready - late) + self._broadcast)
        self._broadcast = 0.0

    def add_wait(self, seconds: float) -> None:
        """Time blocked in another collective (a training framework's own), as it happens: it joins the
        wait of the next backward pass that runs the all-reduce, and is not the time of the phase it fell
        in (``backward``, ``step``)."""
        self._broadcast += seconds
        if self._forward_end is not None or self._left is not None:
            self._held += seconds

    # -- the optimizer step ----------------------------------------------------------------------
    def on_step(self, now: float) -> None:
        """The iteration's optimizer step ended at ``now`` (the adapter's reading of the clock)."""
        device = self.device_phases
        if device is not None:
            device.step_end()
            return
        left = self._left
        if left is not None:
            self._left = None
            took = now - left - self._held
            if self._on and took > 0.0:
                self._add("step", took)

    def stop(self) -> None:
        """Stop adding times (the listener closed). The comm hook stays (DDP cannot drop it) and
        keeps calling the user's hook; the buffer broadcast gets DDP's own method back."""
        self._on = False
        device, self.device_phases = self.device_phases, None
        if device is not None:
            device.close()  # what the device has not reached is not waited for
        if self._launches is not None:
            self._launches.close()
        if self.ddp is not None and self._sync_buffers is None:
            self.ddp.__dict__.pop("_sync_buffers", None)
        for handle in getattr(self, "_handles", []):
            handle.remove()
