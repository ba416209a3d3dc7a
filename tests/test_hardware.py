"""Hardware probes: read on report iterations only, missing backends give None, never an error."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from trainperf import PerformanceListener
from trainperf.core._hardware import ProcessProbe, process_probe, read_probes, worker_tips


class FakeProcess:
    def __init__(self, pid, cpu, rss=0, children=()):
        self.pid, self.cpu, self.rss, self._children = pid, list(cpu), rss, list(children)
        self.scans = 0

    def cpu_percent(self, interval=None):
        return self.cpu.pop(0) if self.cpu else 0.0

    def memory_info(self):
        return SimpleNamespace(rss=self.rss)

    def children(self, recursive=False):
        self.scans += 1
        return list(self._children)


def test_process_probe_reads_cpu_rss_and_the_workers_mean_cpu(clock):
    workers = [FakeProcess(2, [0.0, 90.0]), FakeProcess(3, [0.0, 100.0])]
    main = FakeProcess(1, [0.0, 150.0], rss=512 * 1024 * 1024, children=workers)
    probe = ProcessProbe(main, clock=clock)
    assert probe() == {"cpu_pct": 150.0, "rss_mb": 512.0, "workers_cpu_pct": 95.0}


def test_process_probe_reads_at_most_once_a_second_and_repeats_its_last_reading(clock):
    main = FakeProcess(1, [0.0, 10.0, 20.0, 30.0])
    probe = ProcessProbe(main, clock=clock)
    assert probe()["cpu_pct"] == 10.0
    clock.advance(0.5)
    assert probe()["cpu_pct"] == 10.0
    clock.advance(0.5)
    assert probe()["cpu_pct"] == 20.0


def test_process_probe_looks_children_up_at_most_every_rescan_s(clock):
    main = FakeProcess(1, [0.0] * 10, children=[])
    probe = ProcessProbe(main, min_interval_s=0.0, rescan_s=5.0, clock=clock)
    probe()
    clock.advance(1.0)
    probe()
    assert main.scans == 1
    clock.advance(5.0)
    assert probe()["workers_cpu_pct"] is None
    assert main.scans == 2


def test_without_loader_workers_the_probe_never_lists_the_machines_processes(clock):
    """Listing the children walks every process of the machine: the first report's largest cost."""
    main = FakeProcess(1, [0.0] * 10, children=[FakeProcess(7, [50.0] * 10)])  # a subprocess, no worker
    workers: list[int] = []
    probe = ProcessProbe(main, min_interval_s=0.0, rescan_s=0.0, clock=clock, workers=lambda: workers)
    assert probe()["workers_cpu_pct"] is None and probe()["cpu_pct"] == 0.0
    assert main.scans == 0
    workers.append(7)  # the loader started a worker: it is looked up
    assert probe()["workers_cpu_pct"] == 50.0 and main.scans == 1


def test_without_psutil_there_is_no_probe_and_the_fields_are_none(monkeypatch, clock):
    monkeypatch.setitem(sys.modules, "psutil", None)
    assert process_probe() is None
    listener = PerformanceListener(1, sinks=[], clock=clock)
    clock.advance(0.01)
    record = listener.record_iteration(samples=1)
    assert (record.cpu_pct, record.rss_mb, record.workers_cpu_pct, record.gpu_utilization_pct) == (None,) * 4


def test_psutil_fills_the_host_fields_on_report_iterations_only(clock):
    pytest.importorskip("psutil")
    calls = []
    listener = PerformanceListener(3, sinks=[], clock=clock)
    listener.add_probe(lambda: calls.append(1) or {"gpu_utilization_pct": 40.0})
    records = []
    for _ in range(6):
        clock.advance(0.01)
        records.append(listener.record_iteration(samples=1))
    assert len(calls) == 2
    reported = [r for r in records if r is not None]
    assert [r.gpu_utilization_pct for r in reported] == [40.0, 40.0]
    assert all(r.rss_mb is not None and r.rss_mb > 0 and r.cpu_pct is not None for r in reported)


def test_a_failing_probe_is_left_out_and_said_once(clock):
    def broken():
        raise OSError("no such device")

    messages = []
    values = read_probes([broken, lambda: {"cpu_pct": 3}], messages.append)
    assert values == {"cpu_pct": 3.0}
    assert "no such device" in messages[0]
    listener = PerformanceListener(1, sinks=[], clock=clock, report_hardware=False)
    listener.add_probe(broken)
    with pytest.warns(RuntimeWarning, match="hardware probe"):
        clock.advance(0.01)
        listener.record_iteration(samples=1)


def test_a_probe_with_an_unknown_field_is_refused_by_name():
    messages = []
    assert read_probes([lambda: {"gpu_temp": 50}], messages.append) == {}
    assert "gpu_temp" in messages[0]


def test_workers_at_full_cpu_mean_decoding_idle_workers_mean_io():
    assert "decoding" in worker_tips(95.0)[0]
    assert "I/O" in worker_tips(3.0)[0]
    assert worker_tips(50.0) == [] and worker_tips(None) == []


def test_input_bound_advice_names_busy_workers_first(clock):
    listener = PerformanceListener(1, sinks=[], clock=clock, report_hardware=False)
    listener.add_probe(lambda: {"workers_cpu_pct": 99.0})
    clock.advance(0.01)
    listener.record_iteration(samples=1, etl=0.009)
    assert "decoding" in listener.fixes_for("input-bound")[0]
    assert "decoding" not in " ".join(listener.fixes_for("gc-bound"))


def test_nvml_probe_reads_utilisation_and_memory_from_nvml():
    torch = pytest.importorskip("torch")
    from trainperf.torch._nvml import NvmlProbe, nvml_probe

    fake = SimpleNamespace(
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=37),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=3 * 1024 * 1024),
    )
    assert NvmlProbe(fake, "h")() == {"gpu_utilization_pct": 37.0, "gpu_memory_used_mb": 3.0}

    def no_driver():
        raise RuntimeError("NVML Shared Library Not Found")

    assert nvml_probe(torch.device("cuda", 0), SimpleNamespace(nvmlInit=no_driver)) is None


def test_cuda_memory_figures_come_from_one_read_of_the_allocators_nested_counters(monkeypatch):
    """``torch.cuda.memory_stats`` flattens and sorts every counter in Python on each call (and
    ``max_memory_allocated`` calls it): a report reads the nested counters once per figure source."""
    import torch

    from trainperf.torch._cuda import alloc_retries_reader, memory_probe

    nested = {"allocated_bytes": {"all": {"peak": 3 * 2**20, "current": 2 * 2**20}},
              "reserved_bytes": {"all": {"peak": 8 * 2**20, "current": 6 * 2**20}},
              "inactive_split_bytes": {"all": {"current": 3 * 2**19}}, "num_alloc_retries": 2, "num_ooms": 1}
    reads, resets = [], []
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device: reads.append(device) or nested)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=40 * 2**20))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: resets.append(device))

    def flattening(*args, **kwargs):
        raise AssertionError("the flattened counters were read")

    for name in ("memory_stats", "max_memory_allocated", "max_memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, flattening)
    device = torch.device("cuda", 0)
    assert memory_probe(device)() == {
        "cuda_allocated_max_mb": 3.0, "cuda_reserved_max_mb": 8.0, "cuda_allocated_floor_mb": 2.0,
        "cuda_allocated_max_pct": 7.5, "cuda_reserved_max_pct": 20.0, "cuda_headroom_mb": 37.0,
        "cuda_fragmentation_mb": 4.0, "cuda_inactive_split_pct": 25.0, "cuda_ooms": 0.0,  # the one before: not its own
    }
    name, collector = alloc_retries_reader(device)
    assert (name, collector()) == ("cuda_alloc_retries", (2, None))
    assert reads == [device, device] and resets == [device]


def test_a_report_reads_the_allocators_counters_once_for_its_retries_and_its_peaks(monkeypatch):
    import torch

    from trainperf.torch._cuda import AllocatorCounters, alloc_retries_reader, memory_probe

    peaks = iter([3, 5, 7])
    reads = []

    def nested(device):
        reads.append(device)
        return {"allocated_bytes": {"all": {"peak": next(peaks) * 2**20}}, "num_alloc_retries": len(reads)}

    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", nested)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    device = torch.device("cuda", 0)
    counters = AllocatorCounters(device, min_interval_s=0.0)
    _, retries = alloc_retries_reader(device, counters)
    probe = memory_probe(device, counters)
    # a report: collectors first, then probes, on one read
    assert retries() == (1, None) and probe()["cuda_allocated_max_mb"] == 3.0 and len(reads) == 1
    # a read is taken once: a probe read again without a collector's read in between reads afresh
    assert probe()["cuda_allocated_max_mb"] == 5.0 and len(reads) == 2
    assert retries() == (3, None) and probe()["cuda_allocated_max_mb"] == 7.0 and len(reads) == 3


def test_the_allocators_counters_are_read_at_most_once_per_interval(monkeypatch, clock):
    """Between two reads the retries count stands still (counted at the next read, none lost) and
    the peaks repeat; the peaks are reset only when read."""
    import torch

    from trainperf.torch._cuda import AllocatorCounters, alloc_retries_reader, memory_probe

    state = {"peak": 3, "retries": 1}
    reads, resets = [], []

    def nested(device):
        reads.append(clock())
        return {"allocated_bytes": {"all": {"peak": state["peak"] * 2**20}}, "num_alloc_retries": state["retries"]}

    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", nested)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: resets.append(clock()))
    device = torch.device("cuda", 0)
    counters = AllocatorCounters(device, min_interval_s=1.0, clock=clock)
    _, retries = alloc_retries_reader(device, counters)
    probe = memory_probe(device, counters)
    assert retries() == (1, None) and probe()["cuda_allocated_max_mb"] == 3.0
    state.update(peak=5, retries=4)
    clock.advance(0.4)
    assert retries() == (1, None) and probe()["cuda_allocated_max_mb"] == 3.0  # too soon: nothing new
    assert probe()["cuda_allocated_max_mb"] == 3.0  # a probe alone, too soon, repeats as well
    clock.advance(0.6)
    assert retries() == (4, None) and probe()["cuda_allocated_max_mb"] == 5.0
    assert len(reads) == 2 and resets == reads
    clock.advance(1.0)
    assert probe()["cuda_allocated_max_mb"] == 5.0 and len(reads) == 3  # a probe with no collector reads itself
    # a collector read outside a report (the listener's start) leaves nothing for a later report's probe
    clock.advance(1.0)
    state.update(peak=7)
    retries()
    clock.advance(0.5)
    retries()
    assert probe()["cuda_allocated_max_mb"] == 5.0  # too soon: the last figures, not the stale read of 7
    assert len(resets) == 3  # and the peaks since that read were not reset unreported
    with pytest.raises(ValueError, match="min_interval_s"):
        AllocatorCounters(device, min_interval_s=-1.0)


def test_the_first_report_reads_the_peaks_though_the_counters_were_read_at_the_start(monkeypatch, clock):
    """The retries collector reads the counters twice as training starts (its baseline, then the
    listener's start): the memory probe, with no figures yet to repeat, still reads them at the
    first report, sooner than the interval; later reports repeat, as usual, until it has passed."""
    import torch

    from trainperf.torch._cuda import AllocatorCounters, alloc_retries_reader, memory_probe

    state = {"peak": 3}
    reads, resets = [], []

    def nested(device):
        reads.append(clock())
        return {"allocated_bytes": {"all": {"peak": state["peak"] * 2**20}}, "num_alloc_retries": 0}

    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", nested)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: resets.append(clock()))
    device = torch.device("cuda", 0)
    counters = AllocatorCounters(device, min_interval_s=1.0, clock=clock)
    _, retries = alloc_retries_reader(device, counters)
    probe = memory_probe(device, counters)
    retries()  # the collector's baseline, when it is added
    clock.advance(0.01)
    retries()  # the listener's start
    state.update(peak=5)
    clock.advance(0.2)
    assert retries() == (0, None) and probe()["cuda_allocated_max_mb"] == 5.0  # the first report
    assert len(reads) == 2 and resets == reads[-1:]
    state.update(peak=7)
    clock.advance(0.2)
    assert retries() == (0, None) and probe()["cuda_allocated_max_mb"] == 5.0  # too soon: repeated
    clock.advance(1.0)
    assert retries() == (0, None) and probe()["cuda_allocated_max_mb"] == 7.0 and len(reads) == 3


def test_on_cuda_every_record_carries_the_memory_peaks_from_the_first_window_on(monkeypatch, clock):
    """Windows shorter than the counters' interval: the first record has the peaks, the next ones
    repeat them (as documented), none is left without."""
    import functools

    import torch

    from fake_device import FakeDevice, FakeTimeline
    from trainperf.torch import _cuda, _setup

    nested = {"allocated_bytes": {"all": {"peak": 3 * 2**20}}, "reserved_bytes": {"all": {"peak": 4 * 2**20}}}
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device: nested)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: None)
    monkeypatch.setattr(_setup, "AllocatorCounters", functools.partial(_cuda.AllocatorCounters, clock=clock))
    monkeypatch.setattr(_setup, "nvml_probe", lambda device: None)
    device = FakeDevice(clock)
    listener = PerformanceListener(5, clock=clock, sinks=[], sink_thread=False, verdict=False)
    _setup.use_model_device(listener, torch.device("cuda", 0), lambda d: FakeTimeline(device))
    listener.start()
    for _ in range(20):  # 0.4 s in all, under the counters' 1 s interval
        listener.timeline.begin()
        device.launch(0.015)
        clock.advance(0.02)
        listener.record_iteration(samples=8)
    listener.close()
    records = list(listener.history)
    assert len(records) == 4
    assert [(r.cuda_allocated_max_mb, r.cuda_reserved_max_mb) for r in records] == [(3.0, 4.0)] * 4


def test_nvml_is_read_at_most_once_per_interval_and_repeats_its_last_reading(clock):
    pytest.importorskip("torch")
    from trainperf.torch._nvml import NvmlProbe

    rates = iter([10, 90])
    calls = []
    fake = SimpleNamespace(
        nvmlDeviceGetUtilizationRates=lambda h: calls.append(h) or SimpleNamespace(gpu=next(rates)),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=2**20),
    )
    probe = NvmlProbe(fake, "h", min_interval_s=1.0, clock=clock)
    assert probe()["gpu_utilization_pct"] == 10.0
    clock.advance(0.5)
    assert probe()["gpu_utilization_pct"] == 10.0 and len(calls) == 1
    clock.advance(0.5)
    assert probe()["gpu_utilization_pct"] == 90.0 and len(calls) == 2
    with pytest.raises(ValueError, match="min_interval_s"):
        NvmlProbe(fake, "h", min_interval_s=-1)


def test_cuda_timeline_looks_the_stream_up_again_only_when_it_changes(monkeypatch):
    import torch

    from trainperf.torch import _cuda

    handles = {"now": 11}
    looked_up = []
    monkeypatch.setattr(_cuda, "_raw_stream", lambda index: handles["now"])
    def current_stream(device):
        looked_up.append(handles["now"])
        return f"s{handles['now']}"

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    timeline = _cuda.CudaTimeline(torch.device("cuda", 0))
    assert [timeline.current_stream() for _ in range(3)] == ["s11"] * 3 and looked_up == [11]
    handles["now"] = 12  # inside a ``torch.cuda.stream(...)`` block
    assert timeline.current_stream() == "s12" and looked_up == [11, 12]
    handles["now"] = 11
    assert timeline.current_stream() == "s11" and looked_up == [11, 12, 11]


def test_cuda_events_record_on_the_current_stream_query_without_waiting_and_recycle(monkeypatch):
    import torch

    from trainperf.torch import _cuda

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

    recorded, completed = [], set()
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(_cuda, "_raw_stream", lambda index: 7)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: f"s7 on {device}")
    monkeypatch.setattr(_cuda, "_RECORD", lambda event, stream: recorded.append((event, stream)))
    monkeypatch.setattr(_cuda, "_QUERY", lambda event: event in completed)
    monkeypatch.setattr(_cuda, "_ELAPSED", lambda start, end: 12.5)  # milliseconds, as CUDA says
    events = _cuda.CudaEvents(torch.device("cuda", 1))
    a, b = events.record(), events.record()
    assert recorded == [(a, "s7 on cuda:1"), (b, "s7 on cuda:1")] and a is not b
    completed.add(a)
    assert events.done(a) and not events.done(b)
    assert events.elapsed_s(a, b) == pytest.approx(0.0125)
    events.release(a)
    assert events.record() is a  # from the pool, recorded again
    with pytest.raises(ValueError, match="device must be a CUDA torch.device"):
        _cuda.CudaEvents(torch.device("cpu"))
