"""Where the time goes: each share and verdict against a fake clock that the loop advances by known
amounts, in the loop shapes people write. ``etl + compute + other + GC == iteration`` in every window,
and trainperf's own time is in none of them."""

from __future__ import annotations

import warnings

import pytest
import torch

from clocked import BATCH, ClockedData, CostlyNet
from trainperf import BottleneckWarning, PerformanceListener
from trainperf.records._verdict import CpuLoad, judge
from trainperf.torch import ListenerModule, attach, timed


def loader(clock, load_s=0.002, n=40, **kw):
    return torch.utils.data.DataLoader(ClockedData(clock, load_s, n), batch_size=None, **kw)


class ListenedNet(ListenerModule, CostlyNet):
    """The net with ``set_listeners`` and ``fit``."""


def step(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def slow_sink(clock, seconds=0.05):
    def sink(record):
        clock.advance(seconds)  # a slow disk or network logger

    return sink


def listener(clock, frequency=10, **kw):
    kw.setdefault("sinks", [])
    kw.setdefault("sink_thread", False)  # a sink here advances the test's clock: it must run in the report
    return PerformanceListener(frequency, clock=clock, history=None, **kw)


def windows(lst):
    """The windows past warm-up; a test of their figures must have some to check."""
    out = [r for r in lst.history if not r.warmup]
    assert out, "no window past the warm-up"
    return out


def assert_adds_up(record):
    gc_ms = (record.gc_total_ms or 0.0) / record.window_iterations
    total = record.etl_ms + record.compute_ms + record.other_ms + gc_ms
    assert total == pytest.approx(record.iteration_ms, abs=1e-6)


def assert_split(lst, etl_ms, compute_ms, other_ms=0.0, verdict="fine"):
    records = windows(lst)
    assert records
    for r in records:
        assert_adds_up(r)
        assert r.etl_ms == pytest.approx(etl_ms, abs=1e-6)
        assert r.compute_ms == pytest.approx(compute_ms, abs=1e-6)
        assert r.other_ms == pytest.approx(other_ms, abs=1e-6)
        assert r.verdict.kind == verdict


# -- 1. trainperf's own time -------------------------------------------------------------------------
def test_a_slow_sink_is_in_no_share_with_attach(clock):
    """A 50 ms sink at frequency 10: every window 2 ms data, 8 ms compute, 0 other, fine; overhead 50 ms."""
    model = CostlyNet(clock)
    lst = listener(clock, sinks=[slow_sink(clock)])
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader(clock, n=60):
        step(model, opt, x, y)
    lst.close()
    assert_split(lst, 2.0, 8.0)
    assert all(r.overhead_ms == pytest.approx(50.0) for r in windows(lst)[1:])
    summary = lst.summary()
    assert summary.etl_pct + summary.compute_pct + summary.other_pct + summary.gc_pct == pytest.approx(100.0)


def test_a_slow_sink_is_in_no_share_with_timed_and_listener_module(clock):
    model = ListenedNet(clock)
    lst = listener(clock, sinks=[slow_sink(clock)])
    model.set_listeners(lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in timed(loader(clock, n=60), model):
        step(model, opt, x, y)
    lst.close()
    assert_split(lst, 2.0, 8.0)


def test_a_slow_sink_is_in_no_share_in_fit(clock):
    model = ListenedNet(clock)
    lst = listener(clock, sinks=[slow_sink(clock)])
    model.set_listeners(lst)
    model.fit(loader(clock, n=60), torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.functional.cross_entropy)
    lst.close()
    assert_split(lst, 2.0, 8.0)


def test_two_listeners_on_one_model_keep_each_others_reports_out(clock):
    model = CostlyNet(clock)
    first = listener(clock, sinks=[slow_sink(clock, 0.03)])
    second = listener(clock, frequency=7, sinks=[slow_sink(clock, 0.07)])
    attach(model, first)
    attach(model, second)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader(clock, n=71):
        step(model, opt, x, y)
    first.close()
    second.close()
    assert_split(first, 2.0, 8.0)
    assert_split(second, 2.0, 8.0)


def test_a_run_directory_and_a_slow_sink_stay_out_of_the_first_windows(clock, tmp_path):
    model = CostlyNet(clock)
    lst = listener(clock, sinks=[slow_sink(clock)], run_dir=tmp_path / "run")
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader(clock, n=40):
        step(model, opt, x, y)
    lst.close()
    assert_split(lst, 2.0, 8.0)


def test_loop_work_between_steps_is_other_and_the_report_is_not(clock):
    """5 ms of logging after each step is other time, with a slow sink beside it."""
    model = CostlyNet(clock)
    lst = listener(clock, sinks=[slow_sink(clock)])
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader(clock, n=60):
        step(model, opt, x, y)
        clock.advance(0.005)
    lst.close()
    assert_split(lst, 2.0, 8.0, 5.0, verdict="loop-bound")


# -- 2. GC once ----------------------------------------------------------------------------------------
def gc_pause(lst, clock, seconds):
    lst._readings.gc("start", {})
    clock.advance(seconds)
    lst._readings.gc("stop", {"generation": 2})


def test_gc_between_steps_is_gc_once_not_other_too(clock):
    """A 9 ms gc.collect() after every 1 ms step: GC 90%, other 0, compute 10%, the shares add to 100%."""
    lst = listener(clock, frequency=5, report_gc=True)
    lst.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BottleneckWarning)
        for _ in range(30):
            gc_pause(lst, clock, 0.009)  # between the steps: before the step's start
            started = clock()
            clock.advance(0.001)
            lst.record_iteration(8, started=started)
    lst.close()
    for r in windows(lst):
        assert_adds_up(r)
        assert r.other_ms == pytest.approx(0.0) and r.etl_ms == pytest.approx(0.0)
        assert r.compute_ms == pytest.approx(1.0)
        assert r.verdict.kind == "gc-bound"
    s = lst.summary()
    assert s.gc_pct == pytest.approx(90.0) and s.other_pct == pytest.approx(0.0)
    assert s.compute_pct == pytest.approx(10.0)
    assert s.etl_pct + s.compute_pct + s.other_pct + s.gc_pct == pytest.approx(100.0)


def test_gc_in_the_loops_other_time_leaves_the_rest_of_it_as_other(clock):
    """5 ms of logging after each step, 2 ms of it a collection: other 3 ms, GC 2 ms, compute 4 ms."""
    lst = listener(clock, frequency=5, report_gc=True)
    lst.start()
    for _ in range(20):
        gc_pause(lst, clock, 0.002)  # the other time comes first in an iteration: after the previous step
        clock.advance(0.003)
        clock.advance(0.004)  # the step
        lst.record_iteration(8, other=0.005)
    lst.close()
    for r in windows(lst):
        assert_adds_up(r)
        assert r.other_ms == pytest.approx(3.0) and r.compute_ms == pytest.approx(4.0)
        assert r.gc_total_ms / r.window_iterations == pytest.approx(2.0)


def test_gc_inside_the_step_comes_out_of_compute(clock):
    lst = listener(clock, frequency=5, report_gc=True)
    lst.start()
    for _ in range(20):
        clock.advance(0.001)  # data
        clock.advance(0.003)
        gc_pause(lst, clock, 0.001)
        clock.advance(0.003)
        lst.record_iteration(8, etl=0.001)
    lst.close()
    for r in windows(lst):
        assert_adds_up(r)
        assert (r.etl_ms, r.compute_ms, r.other_ms) == pytest.approx((1.0, 6.0, 0.0))


# -- 3. an epoch's edge ------------------------------------------------------------------------------
def test_evaluation_after_an_epoch_is_other_time_not_compute(clock):
    """0.6 s of evaluation and a print after each 10-batch epoch: other, not compute."""
    model = CostlyNet(clock)
    lst = listener(clock, frequency=10)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = loader(clock, n=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BottleneckWarning)
        for _ in range(4):
            for x, y in data:
                step(model, opt, x, y)
            with torch.no_grad():
                model(torch.ones(BATCH, 4))  # evaluation forward: not training
            clock.advance(0.6)  # the rest of the evaluation, a checkpoint, print(loss.item())
    lst.close()
    records = windows(lst)
    total_other = sum(r.other_ms * r.window_iterations for r in records)
    total_compute = sum(r.compute_ms * r.window_iterations for r in records)
    assert total_other == pytest.approx(3 * 608.0, rel=1e-6)  # the eval forward (8 ms) is loop work too
    assert total_compute == pytest.approx(8.0 * 30, rel=1e-6)
    for r in records:
        assert_adds_up(r)


# -- 4. samples of list batches ------------------------------------------------------------------------
class Sequences(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.ones(3 + i % 7)


class SeqNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, seqs):
        return torch.stack([s.sum() for s in seqs]) * self.w


@pytest.mark.parametrize("use_timed", [False, True])
def test_a_list_of_variable_length_sequences_counts_its_length(use_timed):
    model = SeqNet()
    lst = PerformanceListener(2, sinks=[], history=None)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(Sequences(), batch_size=32, collate_fn=list)
    for seqs in timed(data, model) if use_timed else data:
        opt.zero_grad()
        model(seqs).sum().backward()
        opt.step()
    lst.close()
    assert [r.samples for r in lst.history] == [64]


def test_a_detection_style_batch_counts_its_images():
    from trainperf.torch import batch_size

    batch = [(torch.ones(3, 20 + i, 30), {"boxes": torch.ones(i + 1, 4)}) for i in range(5)]
    assert batch_size(tuple(zip(*batch, strict=True))) == 5
    assert batch_size([torch.ones(3 + i) for i in range(32)]) == 32
    assert batch_size({"input_ids": torch.ones(4, 9), "labels": torch.ones(4, 9)}) == 4
    assert batch_size([torch.ones(128)] * 32) is None  # 32 samples or 32 fields: cannot be known


# -- 5. two models -----------------------------------------------------------------------------------
def test_another_listened_models_step_is_not_this_models_other_time(clock):
    gen, disc = CostlyNet(clock, 0.006), CostlyNet(clock, 0.004)
    lst_gen, lst_disc = listener(clock), listener(clock)
    attach(gen, lst_gen)
    attach(disc, lst_disc)
    opt_gen = torch.optim.SGD(gen.parameters(), lr=0.1)
    opt_disc = torch.optim.SGD(disc.parameters(), lr=0.1)
    for x, y in loader(clock, n=50):
        step(disc, opt_disc, x, y)
        step(gen, opt_gen, x, y)
    lst_gen.close()
    lst_disc.close()
    for lst in (lst_gen, lst_disc):
        for r in windows(lst):
            assert_adds_up(r)
            assert r.other_ms == pytest.approx(0.0)
            assert r.iteration_ms == pytest.approx(12.0)
            assert r.verdict.kind == "fine"


# -- 6. advice that fits the machine -------------------------------------------------------------------
def test_attach_over_a_loader_without_workers_names_num_workers_and_no_pin_memory_on_the_cpu(clock):
    model = CostlyNet(clock, 0.001)
    lst = listener(clock)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BottleneckWarning)
        for x, y in loader(clock, load_s=0.02, n=50):
            step(model, opt, x, y)
    lst.close()
    assert windows(lst)[-1].verdict.kind == "input-bound"
    fixes = lst.fixes_for("input-bound")
    assert any("num_workers=0" in fix for fix in fixes)
    assert not any("pin_memory" in fix for fix in fixes)
    assert len(fixes) == len(set(fixes))


def test_only_the_loaders_workers_count_as_workers():
    from trainperf.core._hardware import ProcessProbe

    class Proc:
        def __init__(self, pid, children=()):
            self.pid, self._children = pid, list(children)

        def cpu_percent(self, interval=None):
            return 50.0

        def memory_info(self):
            return type("M", (), {"rss": 0})()

        def children(self, recursive=False):
            return list(self._children)

    main = Proc(1, [Proc(2), Proc(3)])  # 2: a loader worker, 3: a subprocess
    assert ProcessProbe(main, min_interval_s=0, workers=lambda: {2})()["workers_cpu_pct"] == 50.0
    assert ProcessProbe(main, min_interval_s=0, workers=frozenset)()["workers_cpu_pct"] is None


# -- 7. material and persistent ---------------------------------------------------------------------
def test_microseconds_of_data_wait_are_not_input_bound():
    verdict = judge(window_s=10 * 15e-6, etl_s=10 * 7e-6, gc_s=0.0, iterations=10)
    assert verdict.kind == "fine"
    assert judge(window_s=10 * 0.002, etl_s=10 * 0.001, gc_s=0.0, iterations=10).kind == "input-bound"


def test_a_bad_verdict_holds_until_its_share_falls_well_below_the_line():
    assert judge(1.0, 0.17, 0.0, iterations=10).kind == "fine"
    assert judge(1.0, 0.17, 0.0, iterations=10, previous="input-bound").kind == "input-bound"
    assert judge(1.0, 0.15, 0.0, iterations=10, previous="input-bound").kind == "fine"


def test_a_one_off_slow_window_does_not_warn_and_is_no_bottleneck_of_the_run(clock):
    lst = listener(clock, frequency=5)
    lst.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error", BottleneckWarning)
        for i in range(100):
            etl = 0.02 if 30 <= i < 35 else 0.0  # one window of slow data, 9% of the run
            clock.advance(etl + 0.01)
            lst.record_iteration(8, etl=etl)
    lst.close()
    kinds = [r.verdict.kind for r in windows(lst)]
    assert kinds.count("input-bound") == 1
    assert [b.kind for b in lst.summary().bottlenecks] == []


def test_a_persistent_bottleneck_warns_once_on_its_third_window(clock):
    lst = listener(clock, frequency=5)
    lst.start()
    with pytest.warns(BottleneckWarning) as caught:
        for _ in range(40):
            clock.advance(0.02)
            lst.record_iteration(8, etl=0.01)
            if lst.iteration == 15:  # warm-up and two bad windows so far
                assert not [w for w in caught if w.category is BottleneckWarning]
    lst.close()
    assert len([w for w in caught if w.category is BottleneckWarning]) == 1
    assert [b.kind for b in lst.summary().bottlenecks] == ["input-bound"]


# -- 8. CPU contention ----------------------------------------------------------------------------------
def test_loader_workers_filling_the_cores_is_cpu_contention_with_its_fix():
    busy = CpuLoad(process_pct=100.0, workers_pct=95.0, cores=2)
    verdict = judge(1.0, 0.01, 0.0, iterations=10, cpu=busy)
    assert verdict.kind == "cpu-contention" and "2 cores" in verdict.reason
    assert judge(1.0, 0.01, 0.0, iterations=10, cpu=CpuLoad(100.0, 20.0, 2)).kind == "fine"
    assert judge(1.0, 0.01, 0.0, iterations=10, cpu=CpuLoad(100.0, 95.0, 8)).kind == "fine"
    from trainperf.records._advice import DEFAULT_FIXES

    assert any("set_num_threads" in fix for fix in DEFAULT_FIXES["cpu-contention"])


def test_the_listener_judges_contention_from_its_probe_and_its_loaders_workers(clock, monkeypatch):
    import trainperf.core._readings

    monkeypatch.setattr(trainperf.core._readings, "usable_cores", lambda: 2)
    lst = listener(clock, frequency=5, report_hardware=False)
    lst.add_probe(lambda: {"cpu_pct": 100.0, "workers_cpu_pct": 45.0})
    lst.set_loader_workers(lambda: {11, 12})
    lst.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BottleneckWarning)
        for _ in range(20):
            clock.advance(0.01)
            lst.record_iteration(8)
    lst.close()
    assert {r.verdict.kind for r in windows(lst)} == {"cpu-contention"}
    assert any("fewer loader workers" in fix for fix in lst.summary().recommendations)


def test_contention_needs_a_starved_step_when_the_steps_threads_are_known():
    """Two threads computing 90% of the window need 180% of a core: 100% is starved, 175% is not."""
    starved = CpuLoad(process_pct=100.0, workers_pct=95.0, cores=2, step_threads=2, compute_pct=90.0)
    fed = CpuLoad(process_pct=175.0, workers_pct=60.0, cores=2, step_threads=2, compute_pct=90.0)
    assert starved.contended and "needed 180%" in starved.reason()
    assert not fed.contended
    assert judge(1.0, 0.01, 0.0, iterations=10, cpu=fed).kind == "fine"


# -- trainperf's own time, beyond the common shapes ------------------------------------------------------
def test_a_collection_set_off_by_a_report_is_trainperfs_time_not_the_users(clock):
    holder = {}

    def collecting_sink(record):
        gc_pause(holder["lst"], clock, 0.03)  # the sink allocates and the collector runs

    lst = holder["lst"] = listener(clock, frequency=5, report_gc=True, sinks=[collecting_sink])
    lst.start()
    for _ in range(20):
        clock.advance(0.010)
        lst.record_iteration(8)
    lst.close()
    for r in windows(lst):
        assert (r.compute_ms, r.gc_total_ms, r.verdict.kind) == (pytest.approx(10.0), 0.0, "fine")
        assert r.overhead_ms == pytest.approx(30.0)


def test_a_collection_in_excluded_time_is_left_out_with_it(clock):
    lst = listener(clock, frequency=5, report_gc=True)
    lst.start()
    for i in range(20):
        clock.advance(0.010)
        lst.record_iteration(8)
        if i == 7:  # validation with a collection in it, left out
            before = lst.clock()
            clock.advance(0.06)
            gc_pause(lst, clock, 0.04)
            lst.exclude(lst.clock() - before)
    lst.close()
    for r in windows(lst):
        assert_adds_up(r)
        assert (r.compute_ms, r.gc_total_ms) == (pytest.approx(10.0), 0.0)
        assert [s.count for s in r.gc] == [0, 0, 0]


def test_a_collection_inside_a_loader_fetch_is_gc_not_data_wait_nor_compute(clock):
    holder = {}

    class Collecting(ClockedData):
        def __getitem__(self, i):
            out = super().__getitem__(i)
            gc_pause(holder["lst"], clock, 0.003)
            return out

    model = CostlyNet(clock)
    lst = holder["lst"] = listener(clock, report_gc=True)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in torch.utils.data.DataLoader(Collecting(clock, 0.002, 40), batch_size=None):
        step(model, opt, x, y)
    lst.close()
    for r in windows(lst):
        assert_adds_up(r)
        assert (r.etl_ms, r.compute_ms, r.gc_total_ms / r.window_iterations) == pytest.approx((2.0, 8.0, 3.0))


def test_a_report_on_another_thread_does_not_move_this_threads_clock():
    import threading
    import time

    def slow(record):
        time.sleep(0.2)

    other = PerformanceListener(1, sinks=[slow], history=None, sink_thread=False)
    mine = PerformanceListener(1, sinks=[], history=None)
    mine.start()
    before = mine.clock()
    worker = threading.Thread(target=lambda: other.record_iteration(1))
    worker.start()
    worker.join()
    after = mine.clock()
    assert after - before >= 0.19  # the other thread's report did not stop this thread's clock
    other.close()
    mine.close()


def test_logging_after_two_models_steps_is_other_time_for_both(clock):
    gen, disc = CostlyNet(clock, 0.006), CostlyNet(clock, 0.004)
    lst_gen, lst_disc = listener(clock), listener(clock)
    attach(gen, lst_gen)
    attach(disc, lst_disc)
    opt_gen = torch.optim.SGD(gen.parameters(), lr=0.1)
    opt_disc = torch.optim.SGD(disc.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BottleneckWarning)
        for x, y in loader(clock, n=50):
            step(disc, opt_disc, x, y)
            step(gen, opt_gen, x, y)
            clock.advance(0.020)  # logging after both steps
    lst_gen.close()
    lst_disc.close()
    for lst in (lst_gen, lst_disc):
        for r in windows(lst):
            assert_adds_up(r)
            assert (r.etl_ms, r.compute_ms, r.other_ms) == pytest.approx((2.0, 10.0, 20.0))
            assert r.verdict.kind == "loop-bound"


def test_started_read_before_another_listeners_report_keeps_its_data_wait(clock):
    a = listener(clock, frequency=2, sinks=[slow_sink(clock, 0.05)])
    b = listener(clock, frequency=3)
    a.start()
    b.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BottleneckWarning)
        for _ in range(24):
            clock.advance(0.004)  # data
            started = clock()  # the raw clock, as record_iteration documents
            clock.advance(0.010)
            a.record_iteration(8)  # a's report (every other step) runs between b's start and b's record
            b.record_iteration(8, started=started)
    a.close()
    b.close()
    for r in windows(b):
        assert (r.etl_ms, r.compute_ms) == pytest.approx((4.0, 10.0))


def test_timed_gives_each_listener_its_own_clock(clock):
    model = CostlyNet(clock)
    a, b = listener(clock), listener(clock)
    attach(model, a)
    attach(model, b)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BottleneckWarning)
        for i, (x, y) in enumerate(timed(loader(clock, n=60), model)):
            step(model, opt, x, y)
            if i == 13:  # one second left out of a only: b keeps it as other time
                before = a.clock()
                clock.advance(1.0)
                a.exclude(a.clock() - before)
    a.close()
    b.close()
    assert [(r.etl_ms, r.compute_ms, r.other_ms) for r in windows(a)] == [pytest.approx((2.0, 8.0, 0.0))] * 5
    first, *rest = windows(b)
    assert (first.etl_ms, first.compute_ms, first.other_ms) == pytest.approx((2.0, 8.0, 100.0))
    assert all((r.etl_ms, r.compute_ms, r.other_ms) == pytest.approx((2.0, 8.0, 0.0)) for r in rest)


def test_closed_listeners_leave_no_ledger_and_any_callable_is_a_clock():
    from dataclasses import dataclass

    from trainperf.core._own_time import ledgers_in_use

    @dataclass
    class Clock:  # eq=True makes it unhashable
        now: float = 0.0

        def __call__(self) -> float:
            return self.now

    import gc

    gc.collect()  # listeners other tests dropped without closing release their ledgers now, not below
    gc.disable()
    try:
        before = ledgers_in_use()
        listeners = [PerformanceListener(1, sinks=[], clock=Clock()) for _ in range(50)]
        assert ledgers_in_use() == before + 50
        for lst in listeners:
            lst.close()
        assert ledgers_in_use() == before
    finally:
        gc.enable()


def test_own_time_on_a_device_removes_only_the_devices_idle_gap(clock):
    """A 50 ms sink while the device works off 10 ms: the device's iterations stay about 11 ms."""
    from fake_device import FakeDevice, FakeTimeline

    def run(sink_s):
        c = type(clock)()
        device = FakeDevice(c, max_ahead_s=1.0)
        timeline = FakeTimeline(device)
        lst = PerformanceListener(5, sinks=[slow_sink(c, sink_s)] if sink_s else [], clock=c, history=None,
                                  sink_thread=False,
                                  report_hardware=False)
        lst.set_timeline(timeline)
        lst.start()
        for _ in range(40):
            c.advance(0.001)
            timeline.begin()
            device.launch(0.010)
            lst.record_iteration(samples=8, etl=0.001)
            device.synchronize()
        lst.close()
        return [r.iteration_ms for r in windows(lst)]

    assert run(0.0) == pytest.approx([11.0] * 7)
    assert all(10.0 <= ms <= 11.0 for ms in run(0.05))


def test_more_batch_shapes():
    from trainperf.torch import batch_size

    seq2seq = (torch.ones(32, 128), torch.ones(32, 128), torch.ones(32, 40), torch.ones(32, 40))
    assert batch_size(seq2seq) == 32
    assert batch_size([torch.ones(3, 20, 30), torch.ones(3, 24, 18)]) == 2
    assert batch_size([torch.ones(1, 28, 28 + i) for i in range(5)]) == 5


@pytest.mark.realtime
def test_the_loaders_workers_are_the_ones_that_count():
    seen = []
    model = torch.nn.Linear(4, 2)
    lst = PerformanceListener(1000, sinks=[], history=None, report_hardware=False)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(8, 4)), batch_size=4, num_workers=1)
    for (x,) in data:
        seen.append(set(lst._readings.loader_workers()))
        model(x).sum().backward()
        opt.step()
    lst.close()
    assert len(seen[0]) == 1 and seen[0] == seen[-1]


def test_a_ledger_lives_while_any_listener_on_its_clock_and_thread_does(clock):
    from trainperf.core._own_time import ledgers_in_use

    before = ledgers_in_use()
    a, b = listener(clock), listener(clock)
    assert ledgers_in_use() == before + 1  # one clock, one thread: one ledger
    a.close()
    assert ledgers_in_use() == before + 1
    b.close()
    assert ledgers_in_use() == before


def test_a_reading_taken_before_a_report_is_placed_before_it(clock):
    from trainperf.core._own_time import Ledger

    ledger = Ledger()
    ledger.add(0.5, at=10.0)
    ledger.add(0.25, at=20.0)
    assert ledger.total_at(5.0) == 0.0
    assert ledger.total_at(10.0) == 0.5  # at the report's end, its time is behind
    assert ledger.total_at(15.0) == 0.5
    assert ledger.total_at(25.0) == 0.75
