"""The model's FLOPs per optimizer step, counted by ``torch.utils.flop_counter.FlopCounterMode`` over one
real step, and the device's dense peak for MFU.

The count covers what runs between the step's start and its end (every micro-batch's forward and
backward, and the optimizer); it reads shapes only, so it adds no device synchronisation. The counted
step runs slower under the counter: it is the second optimizer step (the first pays for lazy set-up),
which lies in the warm-up window whenever the listener reports every two steps or more. A forward
pass that activation checkpointing re-runs inside the backward is counted apart (hardware FLOPs, not
the model's): it is left out of the FLOPs per step, and said once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core import PerformanceListener
from ..records import find_peak, number_format

__all__ = ["StepFlopCounter", "device_format", "format_in_use", "step_format"]

#: The optimizer step whose FLOPs are counted (1-based).
COUNTED_STEP = 2


def format_in_use(param: torch.Tensor) -> str | None:
    """The number format a step computes in now: autocast's dtype when autocast is on for the
    parameter's device, else the parameter's dtype (see :func:`device_format`)."""
    device = param.device
    if torch.is_autocast_enabled(device.type):
        return device_format(torch.get_autocast_dtype(device.type), device)
    return device_format(param.dtype, device)


def step_format(mixed: str | None, model: Any, device: torch.device | None) -> str | None:
    """The number format of a framework's step: its mixed precision (``"bf16"``, ``"fp16"``) when
    set, else the model's parameters' dtype on ``device`` (see :func:`device_format`)."""
    if device is None:
        return None
    if mixed is not None:
        return mixed
    try:
        dtype = next(model.parameters()).dtype
    except (AttributeError, StopIteration, TypeError):
        return None
    return device_format(dtype, device)


def device_format(dtype: Any, device: torch.device) -> str | None:
    """The number format a step computes in: ``dtype`` (an autocast or parameter dtype), with float32
    matrix products on CUDA in TF32 when torch allows it (``torch.set_float32_matmul_precision`` other
    than ``"highest"``)."""
    fmt = number_format(dtype)
    if fmt == "fp32" and device.type == "cuda" and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return fmt


class StepFlopCounter:
    """Counts one optimizer step's FLOPs and gives them to ``listener`` with ``device``'s peak in ``fmt``.

    Adapters call :meth:`begin` when a step starts and :meth:`end` when it has ended; only the
    :data:`COUNTED_STEP`-th is counted, and none when the listener was given ``flops_per_step`` or the
    adapter passes ``known`` FLOPs per step (a framework's own figure; the listener's option wins).
    """

    __slots__ = ("listener", "device", "fmt", "format_now", "_steps", "_mode")

    def __init__(self, listener: PerformanceListener, device: torch.device | None, fmt: str | None,
                 known: float | None = None, *, format_now: Callable[[], str | None] | None = None) -> None:
        self.listener, self.device, self.fmt = listener, device, fmt
        self.format_now = format_now  # the number format read when the counted step begins (autocast)
        self._steps = 0
        self._mode: Any = None
        if listener.options.flops_per_step is not None or known is not None:
            self._steps = COUNTED_STEP  # given (to the listener, or ``known`` by the framework): no count
            self._give(known)

    def begin(self) -> None:
        self._steps += 1
        if self._steps == COUNTED_STEP:
            if self.format_now is not None:
                self.fmt = self.format_now()
            self._mode = _step_counter()
            self._mode.__enter__()

    @property
    def done(self) -> bool:
        """Whether the step was counted (or the FLOPs were given): later steps need no calls."""
        return self._steps >= COUNTED_STEP and self._mode is None

    def end(self) -> None:
        mode, self._mode = self._mode, None
        if mode is None:
            return
        mode.__exit__(None, None, None)
        total = float(mode.get_total_flops())
        self._give(total - mode.recomputed, mode.recomputed)

    def abandon(self) -> None:
        """Leave the counter if a step is being counted (training stopped inside it)."""
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)

    def _give(self, flops: float | None, recomputed: float = 0.0) -> None:
        device, fmt = self.device, self.fmt
        if device is None or fmt is None or device.type == "meta":  # nothing to name, or no real device
            self.listener.set_flops(flops, recomputed=recomputed)
            return
        if device.type != "cuda":  # the table holds CUDA GPUs only: the CPU's MFU is left out, and said
            self.listener.set_flops(flops, None, device_name=device.type, number_format=fmt, recomputed=recomputed)
            return
        name = torch.cuda.get_device_name(device)
        self.listener.set_flops(flops, find_peak(name, fmt), device_name=name, number_format=fmt,
                                recomputed=recomputed)


def _step_counter() -> Any:
    """A ``FlopCounterMode`` that also keeps apart the FLOPs of forward passes re-run inside the
    backward (activation checkpointing: hardware FLOPs, not the model's): the operations that run
    while a module's forward is active and the autograd engine is executing a backward. The module
    hooks it needs are removed when it exits."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
    from torch.utils.flop_counter import FlopCounterMode

    class StepCounter(FlopCounterMode):
        def __init__(self) -> None:
            super().__init__(display=False)
            self.recomputed = 0.0
            self._forwards = 0
            self._handles: list[Any] = []

        def __enter__(self) -> Any:
            self._handles = [register_module_forward_pre_hook(self._forward_begins),
                             register_module_forward_hook(self._forward_ends, always_call=True)]
            return super().__enter__()  # type: ignore[no-untyped-call]

        def __exit__(self, *args: Any) -> None:
            try:
                super().__exit__(*args)  # type: ignore[no-untyped-call]
            finally:
                for handle in self._handles:
                    handle.remove()
                self._handles = []

        def _forward_begins(self, module: Any, args: Any) -> None:
            self._forwards += 1

        def _forward_ends(self, module: Any, args: Any, out: Any) -> None:
            self._forwards = max(0, self._forwards - 1)

        def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
            if self._forwards and func_packet in self.flop_registry and torch._C._current_graph_task_id() != -1:
                self.recomputed += float(self.flop_registry[func_packet](*args, **kwargs, out_val=out))
            return super()._count_flops(func_packet, out, args, kwargs)  # type: ignore[no-untyped-call]

    return StepCounter()
