"""The model's FLOPs per optimizer step, counted by ``torch.utils.flop_counter.FlopCounterMode`` over a
few real steps, one per new batch shape, and the device's dense peak for MFU.

The count covers what runs between the step's start and its end (every micro-batch's forward and
backward, and the optimizer); it reads shapes only, so it adds no device synchronisation. A counted
step runs slower under the counter: the first is the second optimizer step (the first pays for lazy
set-up), which lies in the warm-up window whenever the listener reports every two steps or more; a
later one is the first step of each new shape, until the FLOPs' dependence on the length is fitted
(a few steps per run, see :class:`~trainperf.core.ShapeFlops`). Operators the counter has no formula
for that compute (a custom operator, an attention kernel it does not know) are said once. A forward
pass that activation checkpointing re-runs inside the backward is counted apart (hardware FLOPs, not
the model's): it is left out of the FLOPs per step, and said once.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..core import PerformanceListener, ShapeFlops
from ..records import find_peak, number_format

__all__ = ["StepFlopCounter", "batch_shape", "device_format", "format_in_use", "step_format"]

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
    """Counts optimizer steps' FLOPs and gives them to ``listener`` with ``device``'s peak in ``fmt``,
    following the shape of the batches each step trains on.

    Adapters call :meth:`add_batch` (or :meth:`add_rows`) for each micro-batch a step trains on,
    :meth:`begin` when the step starts (after its first micro-batch was added, when it can be) and
    :meth:`end` when it has ended. A step is counted from the :data:`COUNTED_STEP`-th on when its first
    micro-batch has a shape no counted step began with, until the FLOPs' dependence on the length is
    known (see :class:`~trainperf.core.ShapeFlops`); every step gives the listener its shape, and each
    window's FLOPs per step are those of the shapes it trained on. Steps whose batches have no shape
    it can read are counted once, as one figure for every step. Nothing is counted when the listener
    was given ``flops_per_step`` or the adapter passes ``known`` FLOPs per step (a framework's own
    figure; the listener's option wins).
    """

    __slots__ = ("listener", "device", "fmt", "format_now", "shapes", "_steps", "_mode", "_following",
                 "_micro", "_tokens", "_squares", "_first", "_add_shape", "_said")

    def __init__(self, listener: PerformanceListener, device: torch.device | None, fmt: str | None,
                 known: float | None = None, *, format_now: Callable[[], str | None] | None = None) -> None:
        self.listener, self.device, self.fmt = listener, device, fmt
        self.format_now = format_now  # the number format read when the first counted step begins (autocast)
        self.shapes = ShapeFlops()
        self._steps = 0
        self._mode: Any = None
        self._following = True
        self._micro = self._tokens = self._squares = 0  # the step's micro-batches, sum of b*L, sum of b*L*L
        self._first: tuple[int, int] | None = None  # (rows, elements) of its first micro-batch
        self._add_shape = listener.add_step_shape
        self._said: set[str] = set()
        if listener.options.flops_per_step is not None or known is not None:
            self._following = False  # given (to the listener, or ``known`` by the framework): no count
            self._give(known)

    # hot path: a few integer operations per micro-batch, one dict update per step
    def add_batch(self, batch: Any) -> None:
        """A micro-batch of the step: its input's shape (see :func:`batch_shape`) is followed."""
        shape = batch_shape(batch)
        if shape is None:
            return
        rows, elements = shape  # add_rows, inline: once per micro-batch
        if not self._micro:
            self._first = shape
        self._micro += 1
        self._tokens += elements
        self._squares += elements * elements // rows

    def add_rows(self, rows: int, elements: int) -> None:
        """A micro-batch of ``rows`` rows and ``elements`` elements in all (``rows * L``)."""
        if not self._micro:
            self._first = (rows, elements)
        self._micro += 1
        self._tokens += elements
        self._squares += elements * elements // rows

    def begin(self, batch: Any = None) -> None:
        """A step starts; ``batch``: its first micro-batch, when not added before."""
        if batch is not None:
            self.add_batch(batch)
        self._steps += 1
        if self._steps >= COUNTED_STEP and self._following and self.shapes.wants(self._first):
            if self.format_now is not None and not self.shapes.counts:
                self.fmt = self.format_now()
            self._mode = _step_counter()
            self._mode.__enter__()

    @property
    def done(self) -> bool:
        """Whether later steps need no calls: the FLOPs were given, or the steps' shapes cannot be read
        and the one count is made."""
        return not self._following and self._mode is None

    def end(self) -> bool:
        """The step ended: a counted one's FLOPs are given, its shape added to the window. Returns
        :attr:`done`."""
        micro = self._micro
        shape = (micro, self._tokens, self._squares) if micro else None
        first = self._first
        if micro:
            self._micro = self._tokens = self._squares = 0
            self._first = None
        mode = self._mode
        if mode is not None:
            self._mode = None
            self._counted(mode, shape, first)
        elif shape is not None and self._following:
            self.shapes.passed(shape)
        if shape is not None and self._following:
            self._add_shape(shape)
            return False
        return self.done

    def _counted(self, mode: Any, shape: tuple[int, int, int] | None, first: tuple[int, int] | None) -> None:
        mode.__exit__(None, None, None)
        total = float(mode.get_total_flops())
        flops = total - mode.recomputed
        shapes = self.shapes
        first_count = not shapes.counts
        if shape is None:  # no shape to follow: this count stands for every step, as counted
            shapes.counts += 1
            self._following = False
        else:
            shapes.add(shape, flops, first)
        if first_count:
            self._give(flops, mode.recomputed)
        if mode.missed:
            calls = ", ".join(f"{n} call{'s' if n != 1 else ''} of {name}" for name, n in sorted(mode.missed.items()))
            self._say(f"the FLOP count misses {calls} (operators torch has no FLOP formula for): MFU "
                      "undercounts; pass flops_per_step= to give the step's FLOPs")
        elif total == 0.0:
            self._say("the FLOP count of a step is 0: its products run in kernels torch cannot count (a "
                      "custom kernel called outside torch's operators): MFU undercounts; pass flops_per_step= "
                      "to give the step's FLOPs")

    def _say(self, message: str) -> None:
        say = self.shapes.say
        if say is not None:
            say(message)
        elif message not in self._said:
            self._said.add(message)
            warnings.warn(f"trainperf: {message}", RuntimeWarning, stacklevel=3)

    def abandon(self) -> None:
        """Leave the counter if a step is being counted (training stopped inside it)."""
        mode, self._mode = self._mode, None
        if mode is not None:
            mode.__exit__(None, None, None)

    def _give(self, flops: float | None, recomputed: float = 0.0) -> None:
        device, fmt, by_shape = self.device, self.fmt, self.shapes
        if device is None or fmt is None or device.type == "meta":  # nothing to name, or no real device
            self.listener.set_flops(flops, recomputed=recomputed, by_shape=by_shape)
            return
        if device.type != "cuda":  # the table holds CUDA GPUs only: the CPU's MFU is left out, and said
            self.listener.set_flops(flops, None, device_name=device.type, number_format=fmt, recomputed=recomputed,
                                    by_shape=by_shape)
            return
        name = torch.cuda.get_device_name(device)
        self.listener.set_flops(flops, find_peak(name, fmt), device_name=name, number_format=fmt,
                                recomputed=recomputed, by_shape=by_shape)


_TENSOR = torch.Tensor


def batch_shape(batch: Any) -> tuple[int, int] | None:
    """``(rows, elements)`` of a batch's input, read from its shape (no device is waited for): a
    mapping's ``input_ids`` (else its first tensor), a tuple's or list's first tensor (the inputs of
    ``(inputs, targets)``), or a tensor itself. ``None`` when there is none, or it has no rows."""
    kind = type(batch)
    if kind is dict:  # a collator's dict: answered without the general search
        batch = batch.get("input_ids")
        if type(batch) is not _TENSOR:
            return _general_shape(batch) if batch is not None else None
    elif kind is not _TENSOR:
        return _general_shape(batch)
    shape = batch.shape
    if len(shape) == 2:  # token ids: (rows, length)
        rows, length = shape
        return (rows, rows * length) if rows else None
    return _rows_of(shape)


def _general_shape(batch: Any) -> tuple[int, int] | None:
    if isinstance(batch, Mapping):
        found = batch.get("input_ids")
        batch = found if isinstance(found, _TENSOR) else _first_tensor(batch.values())
    elif isinstance(batch, (tuple, list)):
        batch = _first_tensor(batch)
    if not isinstance(batch, _TENSOR):
        return None
    return _rows_of(batch.shape)


def _rows_of(shape: torch.Size) -> tuple[int, int] | None:
    if not shape or not shape[0]:
        return None
    return int(shape[0]), int(shape.numel())


def _first_tensor(items: Any) -> Any:
    for item in items:
        if isinstance(item, _TENSOR):
            return item
    return None


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
            self.missed: dict[str, int] = {}  # operators that compute with no formula: calls
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
            if func_packet not in self.flop_registry:
                name = str(func_packet)
                if computes(name):
                    self.missed[name] = self.missed.get(name, 0) + 1
                return out
            if self._forwards and func_packet in self.flop_registry and torch._C._current_graph_task_id() != -1:
                self.recomputed += float(self.flop_registry[func_packet](*args, **kwargs, out_val=out))
            return super()._count_flops(func_packet, out, args, kwargs)  # type: ignore[no-untyped-call]

    return StepCounter()


#: Namespaces of torch's own operators (a custom operator lives in its library's namespace).
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "c10d", "_c10d_functional", "_c10d_functional_autograd",
                               "profiler", "_dtensor", "higher_order", "inductor", "debugprims", "_quantized"})

#: Names of torch's operators that compute products (matrix, convolution, attention).
_PRODUCTS = re.compile(r"(^|_)(mm|bmm|addmm|addbmm|baddbmm|mv|addmv|dot|vdot|matmul|linear|gemm|einsum)($|_)"
                       r"|conv|attention")


def computes(name: str) -> bool:
    """Whether an operator the counter has no FLOP formula for (``"aten._int_mm"``, ``"mylib.fused_mlp"``)
    is one whose FLOPs a count leaves out: a custom operator (another library's namespace), or one of
    torch's that computes products (an attention kernel, an integer product)."""
    namespace, _, op = name.partition(".")
    if namespace not in _TORCH_NAMESPACES:
        return True
    return namespace == "aten" and _PRODUCTS.search(op) is not None
