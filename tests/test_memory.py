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


@pytest.mark.realtime
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


@pytest.mark.realtime
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


# --- the host's readings ---------------------------------------------------------------------------

def test_the_host_memory_reads_this_process_as_psutil_does_and_its_floor_below_it():
    import psutil

    from trainperf.core._host_memory import HostMemory

    memory = HostMemory(psutil.Process(), psutil.virtual_memory)
    rss, beside = memory.rss_mb(), _rss_mb()
    assert rss == pytest.approx(beside, abs=8.0)
    floor = memory.floor_mb(rss)
    assert 0.0 < floor <= rss
    assert memory.peak_mb() >= rss - 1.0
    assert 0.0 < memory.headroom_mb() <= psutil.virtual_memory().total / MB
    memory.close()
    memory.close()  # idempotent
    assert memory.rss_mb() == pytest.approx(_rss_mb(), abs=8.0)  # closed: read through psutil


def test_the_floor_leaves_out_what_the_c_allocator_keeps_free(monkeypatch):
    import psutil

    from trainperf.core import _host_memory

    monkeypatch.setattr(_host_memory, "_malloc_free_reader", lambda: lambda: 30 * 2**20)
    memory = _host_memory.HostMemory(psutil.Process())
    assert memory.floor_mb(100.0) == 70.0 and memory.floor_mb(10.0) == 0.0

    def broken():
        raise OSError("no")

    monkeypatch.setattr(_host_memory, "_malloc_free_reader", lambda: broken)
    assert _host_memory.HostMemory(psutil.Process()).floor_mb(100.0) == 100.0
    monkeypatch.setattr(_host_memory, "_malloc_free_reader", lambda: None)
    assert _host_memory.HostMemory(psutil.Process()).floor_mb(100.0) == 100.0
    other = _host_memory.HostMemory(SimpleNamespace(pid=-5, memory_info=lambda: SimpleNamespace(rss=64 * MB)))
    assert other.rss_mb() == 64.0 and other.floor_mb(64.0) == 64.0  # another process: no allocator of ours


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_the_headroom_is_the_cgroups_limit_when_it_is_below_the_machines_available_memory(tmp_path, monkeypatch,
                                                                                        version):
    from trainperf.core import _host_memory

    if version == "v2":
        folder = tmp_path / "job"
        folder.mkdir()
        (folder / "memory.max").write_text(f"{1000 * MB}\n")
        (folder / "memory.current").write_text(f"{600 * MB}\n")
        own = "0::/job\n"
    else:
        folder = tmp_path / "memory" / "job"
        folder.mkdir(parents=True)
        (folder / "memory.limit_in_bytes").write_text(f"{1000 * MB}\n")
        (folder / "memory.usage_in_bytes").write_text(f"{600 * MB}\n")
        own = "12:cpu,cpuacct:/job\n11:memory:/job\n"
    real_read = _host_memory._read
    monkeypatch.setattr(_host_memory, "_read", lambda path: own if path == "/proc/self/cgroup" else real_read(path))
    process = SimpleNamespace(pid=-5, memory_info=lambda: SimpleNamespace(rss=0))
    roomy = _host_memory.HostMemory(process, lambda: SimpleNamespace(available=9000 * MB), cgroup_root=str(tmp_path))
    assert roomy.headroom_mb() == 400.0
    tight = _host_memory.HostMemory(process, lambda: SimpleNamespace(available=100 * MB), cgroup_root=str(tmp_path))
    assert tight.headroom_mb() == 100.0
    (folder / ("memory.max" if version == "v2" else "memory.limit_in_bytes")).write_text("max\n" if version == "v2"
                                                                                         else f"{2**63 - 4096}\n")
    assert roomy.headroom_mb() == 9000.0  # no limit
    bare = _host_memory.HostMemory(process, None, cgroup_root=str(tmp_path / "none"))
    monkeypatch.setattr(_host_memory, "_read", lambda path: None)
    assert bare.headroom_mb() is None


def test_a_workers_own_memory_is_its_proportional_share(monkeypatch):
    import os

    import psutil

    from trainperf.core._host_memory import own_memory_mb

    mine = own_memory_mb(os.getpid(), psutil.Process())
    assert 0.0 < mine <= _rss_mb() + 1.0
    gone = SimpleNamespace(memory_info=lambda: (_ for _ in ()).throw(psutil.NoSuchProcess(999999)))
    assert own_memory_mb(999999999, gone) is None
    assert own_memory_mb(999999999, SimpleNamespace(memory_info=lambda: SimpleNamespace(rss=3 * MB))) == 3.0


def test_the_process_probe_reads_memory_at_every_report_and_the_workers_memory_seldom(clock, monkeypatch):
    from trainperf.core import _hardware

    class Process:
        pid = -5

        def __init__(self, pid, rss):
            self.pid, self.rss = pid, rss

        def cpu_percent(self, interval=None):
            return 10.0

        def memory_info(self):
            return SimpleNamespace(rss=self.rss * MB)

        def children(self, recursive=False):
            return [worker]

    worker = Process(77, 40)
    main = Process(-5, 100)
    reads = []
    monkeypatch.setattr(_hardware, "own_memory_mb", lambda pid, child: reads.append(pid) or 25.0)
    memory = SimpleNamespace(rss_mb=lambda: main.rss, floor_mb=lambda rss: rss - 10, peak_mb=lambda: 120.0,
                             headroom_mb=lambda: 5000.0)
    probe = _hardware.ProcessProbe(main, clock=clock, memory=memory, workers_memory_s=10.0, rescan_s=0.0)
    first = probe()
    assert first == {"cpu_pct": 10.0, "rss_headroom_mb": 5000.0, "workers_cpu_pct": 10.0,
                     "workers_memory_mb": 25.0, "rss_mb": 100.0, "rss_floor_mb": 90.0, "rss_peak_mb": 120.0}
    main.rss = 130
    clock.advance(0.2)  # too soon for the CPU: repeated; the resident memory is read anew
    assert probe()["rss_mb"] == 130.0 and probe()["rss_floor_mb"] == 120.0
    clock.advance(1.0)
    probe()
    assert reads == [77]  # the workers' memory: at most every 10 s
    clock.advance(10.0)
    probe()
    assert reads == [77, 77]


# --- the trend's lines, at their edges ------------------------------------------------------------

def _judge(floors, headroom=None, held=None, start=1, step=10):
    trend = FloorTrend("floor", "the device")
    result = None
    for i, floor in enumerate(floors):
        result = trend.add(start + step * i, float(floor), headroom,
                           held_mb=None if held is None else float(held[i]))
    return result


def test_a_rise_of_4_mb_over_the_readings_is_growth_and_less_is_not():
    assert _judge([100 + 0.8 * i for i in range(6)]) is not None  # 4.0 MB over the six readings
    assert _judge([100 + 0.79 * i for i in range(6)]) is None
    # the rise is the slope times the iterations the readings span: 4 MB over 50 iterations
    assert _judge([100 + 0.8 * i for i in range(6)], step=1000).mb_per_100 == pytest.approx(0.08)


def test_four_rising_steps_of_five_are_enough_and_three_are_not():
    assert _judge([100, 110, 120, 118, 130, 140]) is not None
    assert _judge([100, 110, 108, 120, 118, 140]) is None
    assert _judge([100, 110, 120, 120, 130, 140]) is None  # a repeat adds no reading: five is too few
    assert _judge([100, 100.005, 100.01, 110, 120, 130]) is None  # steps of 0.01 MB or less do not rise


def test_the_line_must_fit_nine_tenths_of_the_readings_variance():
    floors = [100, 101, 102, 103, 104, 160]  # rising every step, but one jump: R squared 0.55
    slope, fit = fit_line([(float(i), float(f)) for i, f in enumerate(floors)])
    assert fit < 0.9
    assert _judge(floors) is None
    assert _judge([100, 110, 121, 129, 140, 150]) is not None  # R squared 0.998


def test_fit_line_on_points_away_from_the_origin():
    slope, fit = fit_line([(10.0, 5.0), (20.0, 9.0), (30.0, 7.0), (40.0, 15.0)])
    # mean x 25, mean y 9; sxx 500, syy 56, sxy 140
    assert slope == pytest.approx(0.28) and fit == pytest.approx(140 * 140 / (500 * 56))
    assert fit_line([(1.0, 2.0), (1.0, 2.0)]) == (0.0, 0.0)


def test_the_resident_memory_beside_the_floor_sets_the_forecast_when_it_rises_faster():
    floors = [100 + 4 * i for i in range(6)]
    held = [300 + 6 * i for i in range(6)]
    growth = _judge(floors, headroom=600.0, held=held)
    assert growth.mb_per_100 == pytest.approx(40.0) and growth.held_per_100 == pytest.approx(60.0)
    assert growth.full_in == pytest.approx(600.0 / 0.6)
    assert growth.words() == ("floor +40 MB per 100 iterations (resident memory +60 MB: the allocator cannot give "
                              "back the gaps between what is kept); the device is full in about 1,000 iterations")
    same = _judge(floors, headroom=600.0, held=[300 + 4.3 * i for i in range(6)])  # under 1.1x: not said
    assert same.full_in == pytest.approx(600.0 / 0.43) and "resident memory" not in same.words()
    slower = _judge(floors, headroom=600.0, held=[300 + 2 * i for i in range(6)])
    assert slower.full_in == pytest.approx(600.0 / 0.4) and slower.held_per_100 == pytest.approx(20.0)
    trend = FloorTrend("floor", "the device")  # a reading without the memory beside it: none is fitted
    for i, floor in enumerate(floors):
        growth = trend.add(10 * i, float(floor), 600.0, held_mb=None if i == 3 else 300.0 + 6 * i)
    assert growth.held_per_100 is None and growth.full_in == pytest.approx(600.0 / 0.4)


def test_small_rates_and_near_forecasts_are_written_plainly():
    growth = Growth("floor", "the device", 4.5, 42.4, None)
    assert growth.words() == "floor +4.5 MB per 100 iterations; the device is full in about 42 iterations"
    assert Growth("floor", "the device", 12.4, 0.0, None).words().endswith("in about 0 iterations")
    assert Growth("floor", "the device", 0.0123, None, None).words() == "floor +0.012 MB per 100 iterations"


def test_no_headroom_left_is_full_now_and_a_floor_of_nothing_has_no_share():
    growth = _judge([100 + 5 * i for i in range(6)], headroom=-20.0)
    assert growth.full_in == 0.0 and growth.share == 100.0
    assert growth_verdict(growth, None).share == 100.0
    assert growth_verdict(Growth("f", "d", 1.0, None, None), None).share == 0.0


def test_fragmentation_at_its_lines():
    def notice(reserved, allocated):
        trend = ReservedTrend()
        trend.add(10, 2000.0, 1000.0)
        return trend.add(30, reserved, allocated)

    assert notice(2256.0, 1000.0) is not None  # 256 MB and 12.8%: fragmentation
    assert notice(2255.0, 1000.0) is None
    assert notice(2256.0, 1085.0) is not None  # the allocated peak grew by less than a third of 256 MB
    assert notice(2256.0, 1085.4) is None
    said = notice(2300.0, 1050.0)
    assert "grew by 300 MB over 20 iterations while the allocated peak grew by 50 MB" in said
    assert "reserved but not allocated" not in said
    shrunk = ReservedTrend()
    shrunk.add(10, 2000.0, 1000.0)
    assert "allocated peak grew by 0 MB" in shrunk.add(20, 2600.0, 900.0)
    assert ReservedTrend().add(10, None, 5.0) is None and ReservedTrend().add(10, 5.0, None) is None


def test_the_watch_follows_the_device_first_then_the_host_and_says_fragmentation_once():
    from trainperf.core._memory_watch import MemoryWatch

    said = []
    watch = MemoryWatch(said.append)
    assert watch.observe(1, {}, warmup=False) is None
    growth = None
    for i in range(8):
        growth = watch.observe(10 * i, {"cuda_allocated_floor_mb": 100.0 + 5 * i, "cuda_headroom_mb": 1000.0,
                                        "rss_mb": 500.0 + 9 * i, "rss_floor_mb": 400.0 + 8 * i,
                                        "cuda_reserved_max_mb": 2000.0 + 300 * i, "cuda_allocated_max_mb": 1000.0},
                               warmup=i == 0)
    assert growth.what == "allocated floor" and growth.mb_per_100 == pytest.approx(50.0)
    assert len(said) == 1 and "fragmentation" in said[0]
    host = MemoryWatch(said.append)
    for i in range(8):
        growth = host.observe(10 * i, {"rss_mb": 500.0 + 12 * i, "rss_floor_mb": 400.0 + 8 * i,
                                       "rss_headroom_mb": 900.0}, warmup=i == 0)
    assert growth.what == "resident memory in use" and growth.mb_per_100 == pytest.approx(80.0)
    assert growth.held_per_100 == pytest.approx(120.0) and growth.full_in == pytest.approx(900.0 / 1.2)
    plain = MemoryWatch(said.append)  # no floor of its own: the resident memory, nothing beside it
    for i in range(8):
        growth = plain.observe(10 * i, {"rss_mb": 500.0 + 12 * i}, warmup=i == 0)
    assert growth.mb_per_100 == pytest.approx(120.0) and growth.held_per_100 is None


def test_the_summary_says_the_runs_memory_peaks_least_headroom_errors_and_growth():
    from trainperf import GCStat, PerformanceRecord
    from trainperf.records import MemoryPeaks

    def record(i, **figures):
        return PerformanceRecord(iteration=10 * i, window_iterations=10, window_s=1.0, warmup=i == 1,
                                 timestamp=float(i), **figures)

    peaks = MemoryPeaks()
    peaks.add(record(1, cuda_allocated_max_mb=70000.0, cuda_allocated_max_pct=85.4, cuda_reserved_max_mb=75000.0,
                     cuda_reserved_max_pct=91.6, cuda_headroom_mb=11920.0, cuda_ooms=0, rss_mb=3000.0,
                     rss_peak_mb=3500.0, gc=(GCStat("cuda_alloc_retries", 2, None),)))
    peaks.add(record(2, cuda_allocated_max_mb=60000.0, cuda_allocated_max_pct=73.2, cuda_reserved_max_mb=76000.0,
                     cuda_reserved_max_pct=92.8, cuda_headroom_mb=21920.0, cuda_ooms=1, rss_mb=3100.0,
                     workers_memory_mb=800.0, gc=(GCStat("gen0", 5, 1.0), GCStat("cuda_alloc_retries", 1, None)),
                     verdict=Verdict("memory-growth", 80.0, "allocated floor +38 MB per 100 iterations")))
    peaks.add(record(3, rss_mb=3600.0, verdict=Verdict("fine", 1.0, "x")))
    assert peaks.to_dict() == {
        "allocated_mb": 70000.0, "allocated_pct": 85.4, "reserved_mb": 76000.0, "reserved_pct": 92.8,
        "headroom_mb": 11920.0, "ooms": 1, "retries": 3, "rss_peak_mb": 3600.0, "workers_mb": 800.0,
        "growth": "allocated floor +38 MB per 100 iterations"}
    assert peaks.lines() == [
        "  CUDA memory: allocated peak 70,000 MB (85% of the device), reserved peak 76,000 MB (93%); least headroom "
        "11,920 MB; 3 allocator retries, 1 out-of-memory errors caught",
        "  host memory: resident peak 3,600 MB, loader workers 800 MB",
        "  memory grew: allocated floor +38 MB per 100 iterations"]
    assert MemoryPeaks().lines() == []
    bare = MemoryPeaks()
    bare.add(record(1, cuda_allocated_max_mb=10.0))
    assert bare.lines() == ["  CUDA memory: allocated peak 10 MB"]


def test_a_listeners_summary_holds_its_memory(fake_cuda, clock):
    listener = fake_cuda.listener(10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _train(fake_cuda, clock, listener, 100, lambda i: (1000.0 + 0.38 * i, 6000.0 + (i == 5) * 3000.0, 9000.0))
    summary = listener.summary()
    assert summary.memory.allocated_mb == pytest.approx(1000.0 + 0.38 * 5 + 9000.0)  # the warm-up's peak counts
    assert summary.memory.growth.startswith("allocated floor +38 MB per 100 iterations")
    assert "CUDA memory: allocated peak 10,002 MB (12% of the device)" in str(summary)
    assert summary.to_dict()["memory"]["reserved_mb"] == 9000.0


def test_drops_between_rises_are_no_rising_steps():
    floors = [100, 120, 119, 140, 139, 160]  # a good line, the last a new high, but two steps of five drop
    assert fit_line([(float(i), float(f)) for i, f in enumerate(floors)])[1] > 0.9
    assert _judge(floors) is None
    assert _judge([100, 120, 119, 140, 160, 180]) is not None


def test_fit_line_with_small_spreads():
    assert fit_line([(0.0, 0.0), (1.0, 0.5), (2.0, 1.0)]) == pytest.approx((0.5, 1.0))  # syy 0.5
    assert fit_line([(0.0, 0.0), (1.0, 1.0)]) == pytest.approx((1.0, 1.0))  # sxx 0.5


def test_the_warm_up_sets_no_baseline_for_fragmentation():
    trend = ReservedTrend()
    trend.add(10, 1000.0, 1000.0, warmup=True)
    trend.add(20, 4000.0, 3000.0)
    assert trend.add(30, 4300.0, 3000.0) is None  # 300 MB is 7.5% of 4,000 MB


def test_steps_of_a_hundredth_of_a_mb_are_no_rise():
    floors = [100, 100.009, 100.018, 110, 120, 130, 140, 150]  # a good line, but two of seven steps are noise
    assert fit_line([(float(i), float(f)) for i, f in enumerate(floors)])[1] > 0.9
    assert _judge(floors) is None
    assert _judge([100, 100.02, 100.04, 110, 120, 130, 140, 150]) is not None


def test_the_rate_is_fitted_on_the_newest_ten_readings():
    floors = [100 + 10 * i + 0.5 * i * i for i in range(14)]
    points = [(1 + 10.0 * i, f) for i, f in enumerate(floors)]
    growth = _judge(floors)
    assert growth.mb_per_100 == pytest.approx(100.0 * fit_line(points[-10:])[0])
    assert growth.mb_per_100 != pytest.approx(100.0 * fit_line(points[-11:])[0])
    assert growth.mb_per_100 != pytest.approx(100.0 * fit_line(points[-9:])[0])
