"""Real clocks, real sleeps: the figures agree with what the loop really did."""

from __future__ import annotations

import itertools
import statistics
import time

import pytest
import torch

from trainperf import PerformanceListener
from trainperf.torch import ListenerModule, timed

pytestmark = pytest.mark.realtime


class SleepyDataset(torch.utils.data.Dataset):
    """Sleeps ``delay`` per batch and keeps a stopwatch of each load (what the machine really took)."""

    def __init__(self, n, batch, delay):
        self.n, self.batch, self.delay = n, batch, delay
        self.loads: list[float] = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        started = time.perf_counter()
        time.sleep(self.delay)
        out = torch.randn(self.batch, 16), torch.randint(0, 4, (self.batch,))
        self.loads.append(time.perf_counter() - started)
        return out


class Net(ListenerModule, torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(x)


def sleepy_loader(n=25, delay=0.020, batch=16):
    return torch.utils.data.DataLoader(SleepyDataset(n, batch, delay), batch_size=None)


def etls(listener):
    out = [r.etl_ms for r in listener.history if not r.warmup]
    assert out, "no window past the warm-up"
    return out


def assert_data_wait_matches_the_stopwatch(listener, loader, skip=5):
    """The reported data wait after the warm-up window against the loads' own stopwatch: within 10%
    (the loader's own bookkeeping around each load is data wait too, and small)."""
    truth = 1000.0 * statistics.mean(loader.dataset.loads[skip:])
    reported = statistics.mean(etls(listener))
    assert truth <= reported * 1.02 and reported <= 1.10 * truth, (truth, etls(listener))


def test_loader_sleeping_20ms_reads_20ms_through_timed():
    model = Net()
    lst = PerformanceListener(5, sinks=[], verdict=False)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = sleepy_loader()
    for x, y in timed(loader, model):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    assert_data_wait_matches_the_stopwatch(lst, loader)


def test_loader_sleeping_20ms_reads_20ms_in_an_unchanged_loop():
    model = Net()
    lst = PerformanceListener(5, sinks=[], verdict=False)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = sleepy_loader()
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    assert_data_wait_matches_the_stopwatch(lst, loader)


def test_fit_with_sleepy_loader_reads_20ms_and_real_iteration_time():
    model = Net()
    lst = PerformanceListener(5, sinks=[], verdict=False)
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = sleepy_loader()
    started = time.perf_counter()
    model.fit(loader, opt, torch.nn.functional.cross_entropy)
    elapsed = time.perf_counter() - started
    assert_data_wait_matches_the_stopwatch(lst, loader)
    recs = [r for r in lst.history if not r.warmup]
    assert all(r.iteration_ms >= r.etl_ms for r in recs)
    # the windows add up to the loop's wall time (minus the warm-up window and set-up)
    assert sum(r.window_s for r in lst.history) == pytest.approx(elapsed, rel=0.1)


def test_gc_pause_time_is_measured_not_estimated():
    import gc

    junk = [[{} for _ in range(50)] for _ in range(20000)]  # built first: building it may collect on its own
    lst = PerformanceListener(1, sinks=[], report_gc=True, verdict=False)
    lst.start()

    started = time.perf_counter()
    gc.collect()
    pause_ms = 1000 * (time.perf_counter() - started)
    rec = lst.record_iteration(samples=1)
    del junk
    gen2 = {s.name: s for s in rec.gc}["gen2"]
    assert gen2.count >= 1
    # the pause as gc.callbacks see it: inside the collect() the stopwatch times, all but its call
    assert 0.8 * pause_ms <= gen2.ms <= pause_ms
    lst.close()


def test_unchanged_accumulation_loop_counts_every_micro_batch_load():
    """4 micro-batches of a 5 ms loader per step, no wrapper: about 20 ms of data wait per step."""
    from trainperf.torch import attach

    model = torch.nn.Linear(16, 4)
    lst = PerformanceListener(5, sinks=[], verdict=False)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = sleepy_loader(n=80, delay=0.005, batch=8)
    waits: list[float] = []  # a stopwatch around each fetch, in the same run
    started = time.perf_counter()
    batches = iter(loader)
    for i in itertools.count():
        before = time.perf_counter()
        try:
            x, y = next(batches)
        except StopIteration:
            break
        waits.append(time.perf_counter() - before)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if i % 4 == 3:
            opt.step()
            opt.zero_grad()
    elapsed = time.perf_counter() - started
    lst.close()
    recs = [r for r in lst.history if not r.warmup]
    assert lst.iteration == 20
    loads = 4 * 1000.0 * statistics.mean(loader.dataset.loads[20:])  # four loads per step, after the warm-up
    truth = 4 * 1000.0 * statistics.mean(waits[20:])  # what the loop waited for them, loader overhead included
    reported = statistics.mean(r.etl_ms for r in recs)
    # Every load counted: one load missed a step would be 25% short. On a loaded machine the loads'
    # own stopwatch has read up to 2.1% above the figure in a long session; 5% still tells.
    assert loads <= reported * 1.05, (loads, reported, [r.etl_ms for r in recs])
    assert truth <= reported * 1.05 and reported <= 1.10 * truth, (truth, reported)
    assert all(r.etl_source == "loader" and r.samples == 5 * 4 * 8 for r in recs)
    assert sum(r.window_s for r in lst.history) == pytest.approx(elapsed, rel=0.1)


class SleepyNet(torch.nn.Module):
    """A step that takes ``compute_s`` of real time."""

    def __init__(self, compute_s):
        super().__init__()
        self.compute_s = compute_s
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x):
        time.sleep(self.compute_s)
        return self.fc(x)


def test_speedup_if_data_free_matches_removing_the_loader_in_the_same_run():
    """On the CPU, the predicted gain of free data is within 10% of the gain measured by running
    the same loop over batches already in memory.

    One intra-op thread: with torch's thread pool, the loader's own tensor work wakes the pool and
    slows the next step by a few ms on this 2-core machine, a cost inside the step that removing
    the loader removes too, and that no measure of the data wait can see."""
    from trainperf.torch import attach

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _speedup_check(attach)
    finally:
        torch.set_num_threads(threads)


def _speedup_check(attach):
    def loop(batches, model, opt):
        started = time.perf_counter()
        n = 0
        for x, y in batches:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            n += 1
        return (time.perf_counter() - started) / n

    # Three rounds, each the loop with its loader then the same loop over batches in memory, back to back: a
    # loaded machine's slow spells fall on both sides of a round's ratio, and the median round is judged.
    predicted, measured = [], []
    for _ in range(3):
        model = SleepyNet(0.010)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        listener = PerformanceListener(5, sinks=[], report_hardware=False, verdict=False)
        attach(model, listener)
        with_loader = loop(sleepy_loader(n=30, delay=0.008), model, opt)
        listener.close()
        predicted.append(listener.summary().speedup_if_data_free)
        in_memory = list(sleepy_loader(n=30, delay=0.0))
        bare = SleepyNet(0.010)
        measured.append(with_loader / loop(in_memory, bare, torch.optim.SGD(bare.parameters(), lr=0.01)))
    assert statistics.median(measured) > 1.5, measured
    assert statistics.median(predicted) == pytest.approx(statistics.median(measured), rel=0.10), (predicted, measured)


def _work(i: int, kept: list) -> None:
    """About 3 ms of a step: a sleep, then some Python work that allocates (the collector has work to do)."""
    time.sleep(0.0025)
    kept.append([object() for _ in range(50)])
    del kept[:-200]
    end = time.perf_counter() + 0.0005
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("report_gc", [False, True])
def test_at_frequency_1_no_window_is_longer_than_the_stopwatch_around_its_iteration(report_gc):
    """Each window's iteration time against the user's stopwatch for that iteration: from the return of the
    previous ``record_iteration`` to this one's call (everything the loop did). No part of trainperf's call (the
    report, a warning it says, its writer, its first report) may land in a window: none is more than 10% or
    0.5 ms above."""
    from trainperf.sinks import MemorySink

    sink = MemorySink(400)
    listener = PerformanceListener(1, sinks=[sink], report_gc=report_gc)
    kept: list = []
    spans = []
    for i in range(300):
        started = time.perf_counter()
        _work(i, kept)
        ended = time.perf_counter()
        listener.record_iteration(samples=None if i < 50 else 8)  # "no batch size" said once, in a warning
        spans.append((started, ended, time.perf_counter()))
    listener.close()
    records = sink.records
    assert [r.iteration for r in records] == list(range(1, 301))
    above = []
    for r in records[1:]:  # the warm-up window began at the listener's construction, before any stopwatch
        i = r.iteration - 1
        stopwatch_ms = 1000.0 * (spans[i][1] - spans[i - 1][2])
        if r.iteration_ms - stopwatch_ms > max(0.5, 0.1 * stopwatch_ms):
            above.append((r.iteration, round(r.iteration_ms, 3), round(stopwatch_ms, 3)))
    assert not above, above
