"""Memory window after window: a floor that grows is judged ``memory-growth`` with its rate and forecast;
varying shapes are not (reserved memory that grows alone is fragmentation, said once); the figures come
from host-side counters, never a device synchronisation."""

from __future__ import annotations

import functools
import random
import warnings
from types import SimpleNamespace

import pytest

from trainperf import PerformanceListener, Verdict
from trainperf.records import FloorTrend, ReservedTrend, growth_verdict
from trainperf.records._memory import MIN_READINGS, Growth, _about, fit_line

MB = 2**20


# --- the trend, from plain numbers ---------------------------------------------------------------

def test_a_floor_rising_steadily_is_judged_growing_from_the_sixth_reading_after_the_warm_up():
    trend = FloorTrend("allocated floor", "the device")
    assert trend.add(10, 100.0, 1000.0, warmup=True) is None
    judged = [trend.add(10 * i, 100.0 + 3.8 * i, 1000.0 - 3.8 * i) for i in range(1, 9)]
    assert MIN_READINGS == 6 and judged[:5] == [None] * 5
    growth = judged[5]  # i = 6: floor 122.8 MB, headroom 977.2 MB, at 0.38 MB per iteration
    assert growth is not None and growth.mb_per_100 == pytest.approx(38.0)
    assert growth.full_in == pytest.approx(977.2 / 0.38)
    assert growth.share == pytest.approx(100.0 * 122.8 / (122.8 + 977.2))
    assert growth.words() == "allocated floor +38 MB per 100 iterations; the device is full in about 2,600 iterations"
    assert all(g is not None for g in judged[5:])


def test_a_reading_below_an_earlier_high_is_no_growth_now():
    trend = FloorTrend("allocated floor", "the device")
    results = [trend.add(i, f, None) for i, f in enumerate([100, 110, 120, 130, 140, 150, 145, 152], start=1)]
    assert results[5] is not None and results[6] is None and results[7] is not None


def test_the_warm_up_window_and_repeated_readings_add_no_reading():
    """A probe read less often than reports repeats its figures: the first of equal readings was taken at
    its iteration, and the rate is the true one."""
    trend = FloorTrend("resident memory in use", "the machine's memory")
    trend.add(5, 50.0, None, warmup=True)
    growth = None
    for read in range(1, 8):  # a fresh read every third report, repeated twice
        value = 100.0 + 10.0 * read
        for repeat in range(3):
            growth = trend.add(30 * read + 10 * repeat, value, None)
    assert growth is not None and growth.mb_per_100 == pytest.approx(100.0 * 10.0 / 30.0)
    assert growth.full_in is None and growth.share is None
    assert "full" not in growth.words()


@pytest.mark.parametrize("floors", [
    [100, 100, 100, 100, 100, 100, 100],  # flat
    [100, 140, 140, 140, 140, 140, 140],  # one step up (a new largest batch), then flat
    [100, 90, 110, 95, 120, 100, 105],  # noise
    [100, 101, 102, 103, 100.5, 101.5, 102.5],  # rises by less than 4 MB over the readings
    [100, 130, 160, 190, 220, 160, 170, 180],  # grew, then most of it was given back
])
def test_no_growth_without_a_steady_rise(floors):
    trend = FloorTrend("allocated floor", "the device")
    results = [trend.add(10 * i, float(f), 500.0) for i, f in enumerate(floors, start=1)]
    assert results[-1] is None


def test_growth_ends_when_the_floor_stops_rising():
    trend = FloorTrend("allocated floor", "the device")
    results = [trend.add(i, 100.0 + 5 * i, None) for i in range(1, 9)]
    assert results[-1] is not None
    results = [trend.add(i, 140.0 - 0.5 * (i % 2), None) for i in range(9, 20)]
    assert results[-1] is None


def test_a_line_fit_gives_the_slope_and_how_well_it_fits():
    assert fit_line([(0, 1), (1, 3), (2, 5)]) == pytest.approx((2.0, 1.0))
    assert fit_line([(0, 1), (1, 1)]) == (0.0, 0.0)
    assert fit_line([(3, 1), (3, 2)]) == (0.0, 0.0)
    slope, fit = fit_line([(0, 0), (1, 2), (2, 1), (3, 3)])
    assert slope == pytest.approx(0.8) and fit == pytest.approx(0.64)


def test_forecasts_are_said_to_two_significant_figures():
    assert [_about(x) for x in (7.4, 99.6, 2437.0, 2450.0, 123456.0)] == ["7", "100", "2,400", "2,400", "120,000"]


def test_the_growth_verdict_says_the_time_verdict_it_outweighs():
    growth = Growth("allocated floor", "the device", 38.0, 2400.0, 61.26)
    verdict = growth_verdict(growth, Verdict("input-bound", 35.0, "35% of step waiting for data"))
    assert verdict.kind == "memory-growth" and verdict.share == 61.3
    assert verdict.reason.endswith("; the window is also input-bound (35% of step waiting for data)")
    assert growth_verdict(growth, Verdict("fine", 1.0, "x")).reason == growth.words()


def test_reserved_growth_alone_is_fragmentation_said_once():
    trend = ReservedTrend()
    assert trend.add(10, 4000.0, 3000.0, warmup=True) is None  # the warm-up sets no baseline
    assert trend.add(20, 4000.0, 3000.0, 1000.0, 10.0) is None
    assert trend.add(30, 4200.0, 3050.0) is None  # not yet 256 MB
    notice = trend.add(40, 4500.0, 3100.0, 1400.0, 31.0)
    assert notice is not None and "grew by 500 MB over 20 iterations" in notice and "expandable_segments:True" in notice
    assert "1,400 MB reserved but not allocated, 31% of the reserved memory in inactive split blocks" in notice
    assert trend.add(50, 9000.0, 3100.0) is None  # once


def test_reserved_growth_that_follows_the_allocated_peak_is_no_fragmentation():
    trend = ReservedTrend()
    trend.add(10, 4000.0, 3000.0)
    assert trend.add(20, 5000.0, 3900.0) is None
    big = ReservedTrend()  # 10% of a large reservation must be crossed too
    big.add(10, 60000.0, 50000.0)
    assert big.add(20, 65000.0, 50000.0) is None
    assert big.add(30, 66500.0, 50000.0) is not None


# --- on the CPU: the process's resident memory -----------------------------------------------------

def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / MB


def test_a_loop_that_keeps_each_steps_loss_with_its_graph_is_judged_memory_growth_at_its_rate():
    """The classic leak: each step's loss kept with its graph (and what the graph saved for the backward).
    Judged within 10 windows, at the rate that readings of the resident memory taken beside the listener
    give (a stopwatch for memory)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    kept = []
    listener = PerformanceListener(10, sinks=[], sink_thread=False)
    listener.start()
    beside: list[tuple[int, float]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(1, 151):
            x = torch.randn(256, 2048)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            kept.append(loss)  # keeps the graph, the batch and the hidden layer it saved: 4 MB a step
            listener.record_iteration(samples=256)
            if step % 10 == 0:
                beside.append((step, _rss_mb()))
    listener.close()
    records = list(listener.history)
    judged = [r for r in records[:10] if r.verdict is not None and r.verdict.kind == "memory-growth"]
    assert judged, [r.verdict for r in records[:10]]
    kept_per_100 = 100 * 2 * 256 * 2048 * 4 / MB  # the hand count: two 256 x 2048 float32 tensors a step
    resident_per_100 = 100.0 * fit_line([(float(s), m) for s, m in beside[1:]])[0]
    for record in judged + records[-1:]:
        assert record.verdict.kind == "memory-growth"
        assert record.memory_growth_mb == pytest.approx(kept_per_100, rel=0.1)
    last = records[-1]
    # the resident memory may rise faster (the allocator keeps gaps between what is kept): the forecast
    # takes the faster of the two
    fills = max(last.memory_growth_mb, resident_per_100)
    assert last.memory_full_in == pytest.approx(last.rss_headroom_mb / (fills / 100.0), rel=0.1)
    assert f"resident memory in use +{last.memory_growth_mb:,.0f} MB per 100 iterations" in last.verdict.reason
    said = [w for w in caught if "keeps more memory with every step" in str(w.message)]
    assert len(said) == 1 and "loss.item()" in str(said[0].message)
    summary = listener.summary()
    assert [b.kind for b in summary.bottlenecks] == ["memory-growth"]
    del kept


def test_a_loop_with_varying_shapes_and_no_leak_is_never_judged_growing_over_1000_iterations():
    import torch

    rng = random.Random(7)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    opt = torch.optim.Adam(model.parameters())
    listener = PerformanceListener(10, sinks=[], sink_thread=False)
    listener.start()
    for _ in range(1000):  # activations from 4 kB to 2 MB: either side of the C allocator's mmap threshold
        x = torch.randn(rng.randint(4, 128), rng.randint(1, 16), 64)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        listener.record_iteration(samples=x.shape[0], score=loss.item())
    listener.close()
    records = list(listener.history)
    assert len(records) == 100
    assert not [r for r in records if r.verdict.kind == "memory-growth" or r.memory_growth_mb is not None]
    assert all(r.rss_mb is not None and r.rss_peak_mb >= r.rss_mb - 1.0 for r in records)


# --- on CUDA, with the allocator's counters faked -------------------------------------------------

class FakeAllocator:
    """The caching allocator's nested counters as a test drives them (MB)."""

    def __init__(self) -> None:
        self.allocated = self.allocated_peak = 1000.0
        self.reserved = self.reserved_peak = 1200.0
        self.inactive = 50.0
        self.ooms = self.retries = 0
        self.reads = 0

    def step(self, floor: float, activations: float, reserved: float) -> None:
        self.allocated = floor
        self.allocated_peak = max(self.allocated_peak, floor + activations)
        self.reserved = reserved
        self.reserved_peak = max(self.reserved_peak, reserved)

    def nested(self, device):
        self.reads += 1
        return {"allocated_bytes": {"all": {"current": self.allocated * MB, "peak": self.allocated_peak * MB}},
                "reserved_bytes": {"all": {"current": self.reserved * MB, "peak": self.reserved_peak * MB}},
                "inactive_split_bytes": {"all": {"current": self.inactive * MB}},
                "num_ooms": self.ooms, "num_alloc_retries": self.retries}

    def reset(self, device):
        self.allocated_peak, self.reserved_peak = self.allocated, self.reserved


@pytest.fixture
def fake_cuda(monkeypatch, clock):
    import torch

    from fake_device import FakeDevice, FakeTimeline
    from trainperf.core import _readings
    from trainperf.torch import _cuda, _setup

    allocator = FakeAllocator()
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", allocator.nested)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", allocator.reset)
    capacity = SimpleNamespace(total_memory=80 * 1024 * MB)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: capacity)
    monkeypatch.setattr(_setup, "AllocatorCounters", functools.partial(_cuda.AllocatorCounters, clock=clock))
    monkeypatch.setattr(_setup, "nvml_probe", lambda device: None)
    monkeypatch.setattr(_readings, "process_probe", lambda workers=None: None)  # the device's memory alone
    device = FakeDevice(clock)

    def listener(every: int) -> PerformanceListener:
        made = PerformanceListener(every, clock=clock, sinks=[], sink_thread=False, report_hardware=True)
        _setup.use_model_device(made, torch.device("cuda", 0), lambda d: FakeTimeline(device))
        return made

    return SimpleNamespace(allocator=allocator, device=device, listener=listener)


def _train(fake, clock, listener, iterations, shape):
    """``shape(i)``: the step's (floor, activations, reserved) in MB; each step 0.25 s of device work."""
    listener.start()
    for i in range(1, iterations + 1):
        listener.timeline.begin()
        fake.allocator.step(*shape(i))
        fake.device.launch(0.2)
        clock.advance(0.25)
        listener.record_iteration(samples=8)
    listener.close()
    return list(listener.history)


def test_on_cuda_a_rising_allocated_floor_is_judged_with_its_rate_and_when_the_device_is_full(fake_cuda, clock):
    listener = fake_cuda.listener(10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = _train(fake_cuda, clock, listener, 120, lambda i: (1000.0 + 0.38 * i, 6000.0, 9000.0 + 0.38 * i))
    judged = [r for r in records if r.verdict.kind == "memory-growth"]
    assert judged and judged[0].iteration <= 100  # within 10 windows
    last = records[-1]
    assert last.memory_growth_mb == pytest.approx(38.0, rel=1e-6)
    capacity = 80 * 1024.0
    assert last.cuda_headroom_mb == pytest.approx(capacity - last.cuda_allocated_max_mb)
    assert last.memory_full_in == pytest.approx(last.cuda_headroom_mb / 0.38, rel=1e-6)
    assert last.verdict.reason.startswith("allocated floor +38 MB per 100 iterations; the device is full in about ")
    assert last.cuda_allocated_floor_mb == pytest.approx(1000.0 + 0.38 * 120)
    assert last.cuda_allocated_max_pct == pytest.approx(100.0 * last.cuda_allocated_max_mb / capacity)
    assert fake_cuda.device.user_syncs == 0 and listener.timeline.calls["wait"] == 0


def test_on_cuda_varying_shapes_never_make_growth_but_fragmentation_said_once(fake_cuda, clock):
    """Reserved memory grows with each new largest shape while the floor holds: 1,000 iterations, never
    ``memory-growth``; fragmentation is said once, with the allocator setting that helps."""
    rng = random.Random(3)
    listener = fake_cuda.listener(10)
    reserved = [9000.0]

    def shape(i):
        activations = rng.uniform(500.0, 8000.0)
        reserved[0] = min(60000.0, reserved[0] + rng.choice([0.0, 0.0, 0.0, rng.uniform(0.0, 400.0)]))
        return 1000.0, activations, reserved[0]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = _train(fake_cuda, clock, listener, 1000, shape)
    assert len(records) == 100
    assert not [r for r in records if r.verdict.kind == "memory-growth" or r.memory_growth_mb is not None]
    said = [str(w.message) for w in caught if "fragmentation" in str(w.message)]
    assert len(said) == 1 and "expandable_segments:True" in said[0]
    assert all(r.cuda_fragmentation_mb == pytest.approx(r.cuda_reserved_max_mb - 1000.0) for r in records[1:]
               if r.cuda_reserved_max_mb == pytest.approx(reserved[0]))


def test_on_cuda_the_allocators_ooms_are_counted_in_the_window_they_happened(fake_cuda, clock):
    fake_cuda.allocator.ooms = 2  # before training (a batch-size search): not the run's
    listener = fake_cuda.listener(4)

    def shape(i):
        if i in (6, 7, 13):
            fake_cuda.allocator.ooms += 1  # caught by the loop, which skips the batch
        return 1000.0, 100.0, 2000.0

    records = _train(fake_cuda, clock, listener, 16, shape)
    assert [r.cuda_ooms for r in records] == [0, 2, 0, 1]
