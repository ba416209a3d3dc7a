"""Which FLOPs per step and which peak a listener's MFU uses: what the user gave wins over what an
adapter counted, and what cannot be known is said once, with the way to give it."""

from __future__ import annotations

from collections.abc import Callable

from ..records import Peak
from ._options import ListenerOptions
from ._pending import StepFlops

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

    Example:
        >>> notes = []
        >>> step_flops(ListenerOptions(), notes.append, 2e9, None, device_name="Mystery GPU",
        ...            number_format="bf16")
        StepFlops(per_step=2000000000.0, peak=None)
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
    return None if flops is None and peak is None else StepFlops(flops, peak)
