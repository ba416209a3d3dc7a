"""Unchanged loops on a fake asynchronous device: the truth is known to the microsecond.

The loader advances the host's fake clock by its load time; the model's forward queues its
device work on a :class:`FakeDevice` (and costs the host a little launch time); ``loss.item()``
is the device's ``synchronize``. The device timeline must give the device's exact idle time, the
verdict, and a ``speedup_if_data_free`` equal to the speedup measured by running the same loop
without its loader, on the same fake clock.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from clocked import ClockedData
from fake_device import FakeDevice, FakeTimeline
from trainperf import PerformanceListener
from trainperf.torch import attach

MS = 0.001
BATCH = 8
LAUNCH_S = 0.5 * MS  # the host's cost of launching one step's kernels


class DeviceNet(torch.nn.Module):
    """A forward that launches ``work_s`` of device work and costs the host ``launch_s``."""

    def __init__(self, clock, device: FakeDevice, work_s: float, launch_s: float = LAUNCH_S) -> None:
        super().__init__()
        self.clock, self.device, self.work_s, self.launch_s = clock, device, work_s, launch_s
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        self.clock.advance(self.launch_s)
        self.device.launch(self.work_s)
        return self.fc(x)


def run(clock, *, load_s, work_s, sync, n=60, frequency=10, loader=True, launch_s=LAUNCH_S, probe=None):
    """Train ``n`` steps; returns the listener (closed), the timeline, the device and the fake wall
    time of the whole run, up to the device's end of its work."""
    device = FakeDevice(clock, max_ahead_s=0.2)
    timeline = FakeTimeline(device)
    model = DeviceNet(clock, device, work_s, launch_s)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lst = PerformanceListener(frequency, sinks=[], clock=clock, history=None, report_hardware=False)
    if probe is not None:
        lst.add_probe(probe)
    attach(model, lst, timeline_factory=lambda dev: timeline)
    data = ClockedData(clock, load_s, n)
    batches = torch.utils.data.DataLoader(data, batch_size=None) if loader else [data[0]] * n
    started = clock.now
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for x, y in batches:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if sync:
                device.synchronize()  # loss.item()
        device.synchronize()
        ended = clock.now
        lst.close()
    assert timeline.calls["wait"] <= 1
    return lst, timeline, device, ended - started


def steady(lst):
    """The full windows past warm-up; a test of their figures must have some to check."""
    out = [r for r in lst.history if not r.warmup and r.window_iterations == 10]
    assert out, "no full window past the warm-up"
    return out


def measured_speedup(clock, **kw):
    _, _, _, with_loader = run(clock, **kw)
    _, _, _, without = run(clock, loader=False, **kw)
    return with_loader / without


def test_gpu_bound_with_the_loader_hidden_behind_the_gpu(clock):
    """12 ms of loading hidden behind 33 ms of GPU work: 12 ms of data wait, no device idle, not input-bound."""
    lst, timeline, device, _ = run(clock, load_s=12 * MS, work_s=33 * MS, sync=False)
    records = steady(lst)
    assert records
    for r in records:
        assert r.etl_ms == pytest.approx(12.0)
        assert r.device_idle_ms == pytest.approx(0.0, abs=1e-6)
        assert r.iteration_ms == pytest.approx(33.0)
        assert r.verdict.kind == "fine"
        assert r.speedup_if_data_free == pytest.approx(1.0)
        assert "data: 12 ms per batch, hidden behind 33 ms of GPU work" in r.verdict.reason
    assert measured_speedup(clock, load_s=12 * MS, work_s=33 * MS, sync=False) == pytest.approx(1.0, abs=0.01)
    assert device.user_syncs == 1  # the loop's own one, at its end: trainperf waited only at close


def test_input_bound_with_a_sync_in_the_loop_idle_is_the_fetch(clock):
    """``loss.item()`` after each step: the host waits for the GPU, then fetches; the GPU idles for the fetch."""
    lst, _, _, _ = run(clock, load_s=25 * MS, work_s=20 * MS, sync=True)
    records = steady(lst)
    for r in records:
        assert r.etl_ms == pytest.approx(25.0)  # the sync's wait is not data wait
        assert r.device_idle_ms == pytest.approx(25.0)
        assert r.device_idle_max_ms == pytest.approx(25.0)
        assert r.iteration_ms == pytest.approx(45.5)  # fetch, launch, work
        assert r.verdict.kind == "input-bound"
        assert r.speedup_if_data_free == pytest.approx(45.5 / 20.5)
    measured = measured_speedup(clock, load_s=25 * MS, work_s=20 * MS, sync=True)
    assert records[-1].speedup_if_data_free == pytest.approx(measured, rel=0.01)


def test_input_bound_without_a_sync_idle_is_what_the_gpu_could_not_hide(clock):
    """30 ms loading, 20 ms of GPU work, nothing synchronises: the GPU idles 10 ms a step (and
    0.5 ms inside it, while the forward's kernels are launched, which free data would not remove)."""
    lst, _, _, _ = run(clock, load_s=30 * MS, work_s=20 * MS, sync=False)
    records = steady(lst)
    for r in records:
        assert r.etl_ms == pytest.approx(30.0)
        assert r.device_idle_ms == pytest.approx(10.0)
        assert r.iteration_ms == pytest.approx(30.5)
        assert r.verdict.kind == "input-bound"
        assert r.speedup_if_data_free == pytest.approx(30.5 / 20.5)
    measured = measured_speedup(clock, load_s=30 * MS, work_s=20 * MS, sync=False)
    assert records[-1].speedup_if_data_free == pytest.approx(measured, rel=0.05)


def test_host_bound_launches_keep_a_tiny_gpu_step_waiting(clock):
    """No data wait, 0.1 ms of GPU work behind 2 ms of launches, NVML says 5% busy: host-bound."""
    lst, _, _, _ = run(
        clock, load_s=0.0, work_s=0.1 * MS, sync=False, launch_s=2 * MS, probe=lambda: {"gpu_utilization_pct": 5.0}
    )
    records = steady(lst)
    for r in records:
        assert r.verdict.kind == "host-bound"
        assert r.speedup_if_data_free == pytest.approx(1.0)
        assert r.gpu_utilization_pct == 5.0
    assert "torch.compile" in " ".join(lst.fixes_for("host-bound"))


def test_records_on_the_device_cover_consecutive_iterations(clock):
    lst, timeline, _, _ = run(clock, load_s=1 * MS, work_s=30 * MS, sync=False, n=45)
    spans = [(r.first_iteration, r.iteration) for r in lst.history]
    assert spans == [(1, 10), (11, 20), (21, 30), (31, 40), (41, 45)]
    assert timeline.calls["begin"] == timeline.calls["end"] == 45


def test_summary_says_the_gain_in_words_on_the_device(clock):
    hidden, _, _, _ = run(clock, load_s=12 * MS, work_s=33 * MS, sync=False)
    assert "data: 12 ms per batch, hidden behind 33 ms of GPU work" in str(hidden.summary())
    assert hidden.summary().speedup_if_data_free == pytest.approx(1.0)
    starved, _, _, _ = run(clock, load_s=25 * MS, work_s=20 * MS, sync=True)
    summary = starved.summary()
    assert summary.speedup_if_data_free == pytest.approx(45.5 / 20.5)
    assert "the GPU waited for data 55% of the time: free data would make this run 2.22x faster" in str(summary)
    assert summary.to_dict()["device_idle_s"] == pytest.approx(summary.device_wall_s * 25 / 45.5)


def test_summary_lists_host_bound_with_its_fixes(clock):
    lst, _, _, _ = run(
        clock, load_s=0.0, work_s=0.1 * MS, sync=False, launch_s=2 * MS, probe=lambda: {"gpu_utilization_pct": 5.0}
    )
    (bottleneck,) = lst.summary().bottlenecks
    assert bottleneck.kind == "host-bound" and bottleneck.share == pytest.approx(100.0)
    assert any("CUDA graph" in fix for fix in bottleneck.fixes)
