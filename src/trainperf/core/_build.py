"""The record builder: a closed window's host side (and, on an asynchronous device, its device side)
in, a :class:`~trainperf.PerformanceRecord` out. Pure: it reads nothing but its arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..records import (
    CpuLoad,
    DeviceWindow,
    Growth,
    PerformanceRecord,
    build_record,
    growth_verdict,
    judge,
    judge_device,
    judge_padding,
    padding_share,
    percentile,
    real_mfu,
    safe_rate,
    speedup,
)
from ._flop_policy import window_flops
from ._options import ListenerOptions
from ._pending import HostWindow

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class BuiltRecord:
    """A window's record, what free data and GC-free training would have removed from it (the data wait
    and the GC pauses; on a device, the device's idle time for them), and the kind of its time verdict
    (the record's, unless memory growth outweighs it)."""

    record: PerformanceRecord
    data_free_s: float
    gc_free_s: float
    time_kind: str | None = None


def read_score(score: Any) -> float | None:
    """The loss as a float (``float()`` of a tensor that has reached the host), ``None`` when unreadable."""
    if score is None:
        return None
    try:
        return float(score)
    except (TypeError, ValueError, RuntimeError):
        return None


def build_window_record(
    host: HostWindow,
    device: DeviceWindow | None,
    options: ListenerOptions,
    *,
    host_name: str = "",
    pid: int = 0,
    previous: str | None = None,
    cpu: CpuLoad | None = None,
    growth: Growth | None = None,
) -> BuiltRecord:
    """Build the record of a window.

    Args:
        host: what the host measured of the window.
        device: what the device did in it, on an asynchronous device (CUDA); ``None`` on the host clock.
        options: what the record holds (the listener's ``report_*`` switches, its verdict and lines).
        host_name: the machine the record describes; ``pid`` its process.
        previous: the verdict kind of the window before (hysteresis).
        cpu: the window's CPU use (host clock only), for ``cpu-contention``.
        growth: a floor of memory judged growing after this window: the verdict is ``memory-growth``.
    """
    figures = host.figures
    n = figures.iterations
    window_s = figures.window_s
    etl_s = figures.etl_s
    gc_s = host.gc_s
    hardware = host.hardware
    durations: tuple[float, ...] | list[float] = figures.durations
    if device is None:
        data_free_s, gc_free_s, base_s = etl_s, gc_s, window_s
        verdict = judge(
            window_s, etl_s, gc_s, figures.other_s, options.thresholds, iterations=n,
            previous=previous, cpu=cpu,
        ) if options.verdict else None
    else:
        durations = sorted(device.durations)
        base_s = device.window_s
        data_free_s = device.data_idle_s(figures.etls)
        gc_free_s = min(gc_s, max(0.0, device.idle_s - data_free_s))
        verdict = judge_device(
            base_s, device.idle_s, data_free_s, etl_s, gc_s, figures.other_s, iterations=n,
            utilization=hardware.get("gpu_utilization_pct"), thresholds=options.thresholds,
            previous=previous,
        ) if options.verdict else None
    padding = padding_share(host.tokens, host.tokens_padded)
    if padding:  # the step's time on pad tokens, against the same time the other shares are of
        step_s = figures.compute_s if device is None else base_s - device.idle_s
        verdict = judge_padding(verdict, padding, step_s, base_s, iterations=n, previous=previous)
    time_kind = verdict.kind if verdict is not None else None
    if growth is not None and verdict is not None:
        verdict = growth_verdict(growth, verdict)
    mean_s = sum(durations) / n
    flops = host.flops
    per_step = window_flops(flops, host.shapes, n, figures.steps)
    tflops = mfu = None
    if flops is not None and per_step is not None and window_s > 0.0:
        rate = per_step * figures.steps / window_s
        tflops = rate / 1e12
        mfu = rate / flops.peak.flops if flops.peak is not None else None
    # By position, in the schema's order (each value is named after it; a test holds the names to the
    # schema): the report's cost on the training thread is mostly this call. The goodput is the job's
    # so far, which the publisher's account sets.
    ms = 1000.0
    hw = hardware.get
    record = build_record(
        host.iteration,  # iteration
        n,  # window_iterations
        window_s,  # window_s
        host.warmup,  # warmup
        host.timestamp,  # timestamp
        ms * etl_s / n if options.report_etl else None,  # etl_ms
        ms * figures.etl_max_s if options.report_etl else None,  # etl_max_ms
        ms * mean_s if options.report_time else None,  # iteration_ms
        ms * percentile(durations, 50) if options.report_iteration else None,  # iteration_p50_ms
        ms * percentile(durations, 95) if options.report_iteration else None,  # iteration_p95_ms
        ms * durations[-1] if options.report_iteration else None,  # iteration_max_ms
        figures.samples_per_sec if options.report_sample else None,  # samples_per_sec
        figures.batches_per_sec if options.report_batch else None,  # batches_per_sec
        safe_rate(host.tokens, window_s) if host.tokens is not None else None,  # tokens_per_sec
        tflops,  # tflops_per_sec
        mfu,  # mfu
        real_mfu(mfu, padding),  # mfu_real
        read_score(host.score) if options.report_score is not False else None,  # score
        host.gc,  # gc
        host_name,  # host
        pid,  # pid
        host.rank,  # rank
        host.device,  # device
        host.epoch,  # epoch
        figures.samples,  # samples
        figures.batches,  # batches
        host.tokens,  # tokens
        host.tokens_padded,  # tokens_padded
        host.tokens_loss,  # tokens_loss
        padding,  # padding_share
        per_step,  # flops_per_step
        flops.peak.describe() if flops is not None and flops.peak is not None else None,  # peak
        ms * etl_s,  # etl_total_ms
        ms * gc_s if options.report_gc else None,  # gc_total_ms
        ms * figures.compute_s / n,  # compute_ms
        ms * figures.other_s / n,  # other_ms
        figures.steps,  # optimizer_steps
        figures.skipped,  # skipped_steps
        host.etl_source,  # etl_source
        ms * host.overhead_s,  # overhead_ms
        host.first_iteration,  # first_iteration
        ms * device.idle_mean_s if device is not None else None,  # device_idle_ms
        ms * device.idle_max_s if device is not None else None,  # device_idle_max_ms
        speedup(base_s, data_free_s),  # speedup_if_data_free
        speedup(base_s, gc_free_s),  # speedup_if_gc_free
        None,  # goodput
        hw("cuda_allocated_max_mb"),  # cuda_allocated_max_mb
        hw("cuda_reserved_max_mb"),  # cuda_reserved_max_mb
        hw("cuda_allocated_floor_mb"),  # cuda_allocated_floor_mb
        hw("cuda_allocated_max_pct"),  # cuda_allocated_max_pct
        hw("cuda_reserved_max_pct"),  # cuda_reserved_max_pct
        hw("cuda_headroom_mb"),  # cuda_headroom_mb
        hw("cuda_fragmentation_mb"),  # cuda_fragmentation_mb
        hw("cuda_inactive_split_pct"),  # cuda_inactive_split_pct
        _whole(hw("cuda_ooms")),  # cuda_ooms
        hw("gpu_utilization_pct"),  # gpu_utilization_pct
        hw("gpu_memory_used_mb"),  # gpu_memory_used_mb
        hw("cpu_pct"),  # cpu_pct
        hw("workers_cpu_pct"),  # workers_cpu_pct
        hw("rss_mb"),  # rss_mb
        hw("rss_floor_mb"),  # rss_floor_mb
        hw("rss_peak_mb"),  # rss_peak_mb
        hw("rss_headroom_mb"),  # rss_headroom_mb
        hw("workers_memory_mb"),  # workers_memory_mb
        growth.mb_per_100 if growth is not None else None,  # memory_growth_mb
        growth.full_in if growth is not None else None,  # memory_full_in
        host.capture,  # capture
        verdict,  # verdict
        dict(host.times),  # extra
    )
    return BuiltRecord(record, data_free_s, gc_free_s, time_kind)


def _whole(value: float | None) -> int | None:
    return int(value) if value is not None else None
