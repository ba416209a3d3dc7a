"""Which FLOPs per step and which peak a listener's MFU uses: what the user gave wins over what an
adapter counted, and what cannot be known is said once, with the way to give it."""

from __future__ import annotations

from collections.abc import Callable

from ..records import Peak
from ._options import ListenerOptions
from ._pending import StepFlops
from ._step_flops import ShapeFlops, StepShape

__all__: list[str] = []


def step_flops(
    options: ListenerOptions,
    say_once: Callable[[str], None],
    per_step: float | None,
    peak: Peak | None,
    *,
    device_name: str | None = None,
    number_format: str | None = None,
    recomputed: float = 0.0,
    note: Callable[[str], None] | None = None,
    by_shape: ShapeFlops | None = None,
) -> StepFlops | None:
    """The FLOPs and peak for later records (``None``: neither is known).

    Args:
        options: the listener's options; ``flops_per_step=`` and ``peak_flops=`` win.
        say_once: says a note once per listener.
        per_step: the FLOPs an adapter counted for one optimizer step.
        peak: the device's peak from the table, if it has one.
        device_name, number_format: the device and number format an adapter saw (a device with no
            known peak is said).
        recomputed: FLOPs activation checkpointing re-runs per step (left out of the model's).
        note: says a note once as a log line, not a warning (``say_once`` when not given): a CPU's
            missing peak, which no one acts on.
        by_shape: the FLOPs of each step shape counted so far (left out when FLOPs are given).

    Example:
        >>> notes = []
        >>> step_flops(ListenerOptions(), notes.append, 2e9, None, device_name="Mystery GPU",
        ...            number_format="bf16")
        StepFlops(per_step=2000000000.0, peak=None, by_shape=None)
        >>> notes[0].startswith("no dense peak is known for 'Mystery GPU' in bf16")
        True
    """
    given, given_peak = options.flops_per_step, options.peak_flops
    if given_peak is not None:
        peak = Peak(given_peak, "", "", "given")
    elif peak is None and device_name is not None:
        say = note if note is not None and device_name == "cpu" else say_once
        say(f"no dense peak is known for {device_name!r} in {number_format}: MFU is left out (pass "
                 "peak_flops= to give one)")
    flops = given if given is not None else per_step
    if recomputed > 0 and given is None and flops is not None:
        say_once(f"activation checkpointing re-runs {recomputed:.4g} FLOPs per step: left out of the model's "
                 f"{flops:.4g} that MFU counts (hardware FLOPs {flops + recomputed:.4g})")
    return None if flops is None and peak is None else StepFlops(flops, peak, None if given is not None else by_shape)


def window_flops(flops: StepFlops | None, shapes: dict[StepShape, int], iterations: int, steps: int) -> float | None:
    """A window's FLOPs per optimizer step: the FLOPs of each iteration's step shape, summed over the
    window's ``iterations`` and divided by its ``steps``; an iteration whose shape is not known (or
    not countable yet) does ``flops.per_step``, the first count or the given figure. Without shapes
    (given FLOPs, an adapter that does not follow them) it is ``flops.per_step``, as counted.

    Example:
        >>> from ._step_flops import ShapeFlops
        >>> by_shape = ShapeFlops()
        >>> by_shape.add((1, 64, 4096), 1e9, 64); by_shape.add((1, 512, 262144), 9e9, 512)
        >>> window_flops(StepFlops(9e9, None, by_shape), {(1, 64, 4096): 3, (1, 512, 262144): 1}, 4, 4)
        3000000000.0
    """
    if flops is None:
        return None
    per_step, by_shape = flops.per_step, flops.by_shape
    if by_shape is None or not shapes or steps <= 0:
        return per_step
    if len(shapes) == 1:  # one shape (a fixed-shape run): its count, exactly
        ((shape, n),) = shapes.items()
        one = by_shape.flops(shape)
        if one is not None and n == iterations == steps:
            return one
    total, known = 0.0, 0
    for shape, n in shapes.items():
        one = by_shape.flops(shape)
        if one is None:
            continue
        total += one * n
        known += n
    if known < iterations:
        if per_step is None:
            return None
        total += per_step * (iterations - known)
    return total / steps
