"""Where one rank's iteration goes around DDP's collectives, timed on the host, with no device sync.

Under ``DistributedDataParallel`` every rank waits for the slowest one inside the collectives, so
iteration times are equal and only the split tells the ranks apart. For one DDP model this times,
per iteration, on the listener's clock:

* ``forward``: the training forward pass of the wrapped module (autograd on), without DDP's
  buffer broadcast;
* ``backward``: from the end of that forward pass to the last gradient bucket being ready (the
  loss, the backward pass, whatever the loop does in between), less the comm hooks' own time;
* ``comm``: the comm hooks' own time, launching the all-reduce (compression, a user's hook);
* ``wait``: time blocked in collectives: from the last bucket's launch to the end of the backward
  pass (DDP waits there for every bucket's all-reduce), plus the buffer broadcast (BatchNorm);
* ``step``: from the end of the backward pass to the end of the optimizer step.

The rank the others wait for is the one that waits least; its own phases say why (see
:mod:`trainperf._stragglers`). The timing is a comm hook that calls the user's hook (or DDP's
default all-reduce) and a callback queued on the autograd engine that runs after DDP's own
end-of-backward work. A hook the user registers after this (``register_comm_hook``, a built-in
one) is wrapped the same way. When a hook was registered before, DDP takes no second one: the
last gradient's arrival is then timed on the module's first parameter instead, and the hooks'
own time counts as ``wait``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import is_grad_enabled

__all__ = ["CollectiveTimer", "find_ddp"]

_ENGINE: Any = torch.autograd.Variable._execution_engine


def find_ddp(model: torch.nn.Module) -> Any:
    """The ``DistributedDataParallel`` that is ``model`` or wraps it (seen in the calling frames, as
    when ``model``'s forward runs inside DDP's), else ``None``."""
    ddp_type = torch.nn.parallel.DistributedDataParallel
    if isinstance(model, ddp_type):
        return model
    frame: Any = sys._getframe(1)
    for _ in range(40):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if isinstance(owner, ddp_type) and _wraps(owner, model):
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
    """

    def __init__(self, ddp: Any, add_time: Callable[[str, float], None], add_sample: Callable[[str, float], None],
                 clock: Callable[[], float]) -> None:
        self.ddp = ddp
        self.clock = clock
        self._add = add_time
        self._add_sample = add_sample
        self._broadcast = 0.0  # waits in the buffer broadcast since the last backward pass
        self._forward_start: float | None = None
        self._forward_end: float | None = None
        self._launch = 0.0
        self._last_ready: float | None = None
        self._last_launched = 0.0
        self._left: float | None = None
        self._on = True
        self._user: tuple[Callable[..., Any], Any] | None = None
        self._sync_buffers: Any = None
        self.mode = "none" if ddp is None else self._install_hook()
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
            self._forward_start = self.clock()

    def after_forward(self) -> None:
        started = self._forward_start
        if started is not None:
            self._forward_start = None
            self._forward_end = now = self.clock()
            if self._on:
                self._add("forward", now - started)

    # -- the comm hook -------------------------------------------------------------------------
    def _install_hook(self) -> str:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp = self.ddp
        self._user = (default_hooks.allreduce_hook, ddp.process_group)
        try:
            torch.distributed._register_comm_hook(ddp.reducer, None, self._comm_hook)  # type: ignore[attr-defined]
        except RuntimeError:  # the user's hook came first: DDP takes no second one
            param = next((p for p in ddp.module.parameters() if p.requires_grad), None)
            if param is None or not hasattr(param, "register_post_accumulate_grad_hook"):
                return "none"
            self._grad_handle = param.register_post_accumulate_grad_hook(self._last_gradient)
            return "gradient"
        ddp.__dict__["register_comm_hook"] = self._register_user_hook
        ddp.__dict__["_register_builtin_comm_hook"] = self._register_builtin
        return "hook"

    def _register_user_hook(self, state: object, hook: Callable[..., Any]) -> None:
        """DDP's ``register_comm_hook`` once this timer's hook is in: the user's hook runs inside it."""
        ddp = self.ddp
        ddp._check_comm_hook(hook)
        if ddp.logger is not None:
            ddp.logger._set_comm_hook_name(hook.__qualname__)
        ddp._comm_hooks.append((hook, state))
        self._user = (hook, state)

    def _register_builtin(self, comm_hook_type: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        kinds = torch.distributed.BuiltinCommHookType  # type: ignore[attr-defined]
        hooks = {kinds.ALLREDUCE: default_hooks.allreduce_hook, kinds.FP16_COMPRESS: default_hooks.fp16_compress_hook}
        if comm_hook_type not in hooks:
            raise ValueError(f"comm_hook_type must be ALLREDUCE or FP16_COMPRESS, got {comm_hook_type!r}")
        self._user = (hooks[comm_hook_type], self.ddp.process_group)

    def _comm_hook(self, state: object, bucket: Any) -> Any:
        clock = self.clock
        ready = clock()
        hook, user_state = self._user  # type: ignore[misc]
        future = hook(user_state, bucket)
        launched = clock()
        self._launch += launched - ready
        if bucket.is_last():
            self._last_ready, self._last_launched = ready, launched
            _ENGINE.queue_callback(self._after_finalize)
        return future

    def _last_gradient(self, param: torch.Tensor) -> None:
        self._last_ready = self._last_launched = self.clock()
        _ENGINE.queue_callback(self._after_finalize)

    def _after_finalize(self) -> None:
        # Queued before DDP's own end-of-backward callback (which waits for the all-reduces); the
        # engine runs callbacks queued by a callback too, so this one runs after it.
        _ENGINE.queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:
        now = self.clock()
        ready, launch = self._last_ready, self._launch
        self._last_ready, self._launch = None, 0.0
        if ready is None or not self._on:
            return
        add = self._add
        forward_end = self._forward_end
        if forward_end is not None and ready > forward_end:
            own_launch = self._last_launched - ready
            add("backward", max(0.0, ready - forward_end - (launch - own_launch)))
        if launch:
            add("comm", launch)
        self._add_sample("wait", max(0.0, now - self._last_launched) + self._broadcast)
        self._broadcast = 0.0
        self._forward_end = None
        self._left = now

    # -- the optimizer step ----------------------------------------------------------------------
    def on_step(self, now: float) -> None:
        """The iteration's optimizer step ended at ``now`` (the adapter's reading of the clock)."""
        left = self._left
        if left is not None:
            self._left = None
            if self._on and now > left:
                self._add("step", now - left)

    def stop(self) -> None:
        """Stop adding times (the listener closed). The comm hook stays (DDP cannot drop it) and
        keeps calling the user's hook; the buffer broadcast gets DDP's own method back."""
        self._on = False
        if self.ddp is not None and self._sync_buffers is None:
            self.ddp.__dict__.pop("_sync_buffers", None)
        handle = getattr(self, "_grad_handle", None)
        if handle is not None:
            handle.remove()
