from __future__ import annotations

import gc
import math
import warnings

import pytest

from trainperf import BottleneckWarning, MemorySink, PerformanceListener


def make(clock, frequency=3, **kw):
    sink = MemorySink()
    kw.setdefault("verdict", False)
    return PerformanceListener(frequency, sinks=[sink], clock=clock, wall_clock=lambda: 1234.5, sink_thread=False,
                               **kw), sink


def run(listener, clock, durations, *, samples=32, etl=0.0, score=None):
    out = []
    for d in durations:
        clock.advance(d)
        rec = listener.record_iteration(samples=samples, etl=etl, score=score)
        if rec is not None:
            out.append(rec)
    return out


def test_reports_once_every_frequency_iterations(clock):
    listener, sink = make(clock, 3)
    reports = run(listener, clock, [0.01] * 10)
    assert [r.iteration for r in reports] == [3, 6, 9]
    assert [r.window_iterations for r in reports] == [3, 3, 3]
    assert len(sink) == 3


def test_window_statistics_are_exact(clock):
    listener, _ = make(clock, 5)
    listener.start()
    (rec,) = run(listener, clock, [0.010, 0.020, 0.030, 0.040, 0.100], samples=10)
    assert rec.iteration_ms == pytest.approx(40.0)
    assert rec.iteration_p50_ms == pytest.approx(30.0)
    assert rec.iteration_p95_ms == pytest.approx(40 + 0.8 * 60)  # numpy's linear method
    assert rec.iteration_max_ms == pytest.approx(100.0)
    assert rec.window_s == pytest.approx(0.2)
    assert rec.samples_per_sec == pytest.approx(50 / 0.2)
    assert rec.batches_per_sec == pytest.approx(5 / 0.2)
    assert rec.timestamp == 1234.5


def test_throughput_covers_the_whole_window_not_the_last_iteration(clock):
    listener, _ = make(clock, 2)
    listener.start()
    (rec,) = run(listener, clock, [0.3, 0.1], samples=10)
    assert rec.samples_per_sec == pytest.approx(20 / 0.4)  # not 10 / 0.1


def test_etl_mean_and_max(clock):
    listener, _ = make(clock, 2)
    clock.advance(0.1)
    listener.record_iteration(samples=1, etl=0.002)
    clock.advance(0.1)
    rec = listener.record_iteration(samples=1, etl=0.006)
    assert rec.etl_ms == pytest.approx(4.0)
    assert rec.etl_max_ms == pytest.approx(6.0)
    assert rec.etl_total_ms == pytest.approx(8.0)


def test_explicit_etl_from_a_loader_wrapper_replaces_the_gap(clock):
    listener, _ = make(clock, 1)
    listener.add_etl(0.004)
    listener.add_etl(0.001)
    clock.advance(0.01)
    rec = listener.record_iteration(samples=1, etl=0.5)
    assert rec.etl_ms == pytest.approx(5.0)
    clock.advance(0.01)
    rec = listener.record_iteration(samples=1, etl=0.002)
    assert rec.etl_ms == pytest.approx(2.0), "without add_etl in this iteration the gap is used again"


def test_first_window_is_warmup_only(clock):
    listener, _ = make(clock, 2)
    reports = run(listener, clock, [0.01] * 6)
    assert [r.warmup for r in reports] == [True, False, False]


def test_zero_elapsed_time_never_divides_by_zero(clock):
    listener, _ = make(clock, 2)
    reports = run(listener, clock, [0.0, 0.0])
    rec = reports[0]
    assert rec.samples_per_sec is None and rec.batches_per_sec is None
    for value in rec.to_dict(flat=True).values():
        if isinstance(value, float):
            assert not math.isinf(value)


class CountingScore:
    def __init__(self, value):
        self.value = value
        self.reads = 0

    def __float__(self):
        self.reads += 1
        return self.value


def test_score_is_read_only_on_report_iterations(clock):
    listener, _ = make(clock, 4, report_score=True)
    score = CountingScore(0.5)
    reports = run(listener, clock, [0.01] * 8, score=score)
    assert score.reads == 2
    assert [r.score for r in reports] == [0.5, 0.5]


def test_nan_and_inf_loss_are_reported_as_such(clock):
    listener, _ = make(clock, 1, report_score=True)
    (nan,) = run(listener, clock, [0.01], score=float("nan"))
    (inf,) = run(listener, clock, [0.01], score=float("inf"))
    assert math.isnan(nan.score)
    assert inf.score == math.inf


def test_a_score_given_is_recorded_without_report_score_and_read_on_report_iterations_only(clock):
    from trainperf import format_line

    listener, _ = make(clock, 2)
    score = CountingScore(0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        (first,) = run(listener, clock, [0.01] * 2, score=score)
        listener.set_score(2.5)
        (second,) = run(listener, clock, [0.01] * 2)
    assert (first.score, second.score, score.reads) == (0.3, 2.5, 1)
    assert "; score: 2.5;" in format_line(second)
    (none,) = run(listener, clock, [0.01] * 2)  # a window with no score given has none
    assert none.score is None


def test_no_score_given_records_none_and_warns_nothing(clock):
    listener, _ = make(clock, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (rec,) = run(listener, clock, [0.01])
    assert rec.score is None


def test_report_score_false_leaves_a_given_score_out_and_warns_once_naming_the_option(clock):
    listener, _ = make(clock, 1, report_score=False)
    score = CountingScore(0.3)
    with pytest.warns(RuntimeWarning) as said:
        reports = run(listener, clock, [0.01] * 3, score=score)
        listener.set_score(1.0)
        reports += run(listener, clock, [0.01])
    assert [r.score for r in reports] == [None] * 4 and score.reads == 0
    assert len(said) == 1
    assert "report_score=False" in str(said[0].message) and "set_score" in str(said[0].message)
    assert said[0].filename == __file__  # the user's line


def test_unknown_batch_size_warns_once_and_omits_samples(clock):
    listener, _ = make(clock, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            clock.advance(0.01)
            rec = listener.record_iteration(samples=None)
    assert rec.samples_per_sec is None
    assert rec.batches_per_sec == pytest.approx(100.0)
    assert sum("batch size" in str(w.message) for w in caught) == 1


def test_report_flags_leave_fields_out(clock):
    listener, _ = make(
        clock, 1, report_etl=False, report_iteration=False, report_time=False, report_sample=False, report_batch=False
    )
    (rec,) = run(listener, clock, [0.01])
    assert rec.etl_ms is None and rec.iteration_ms is None and rec.iteration_p95_ms is None
    assert rec.samples_per_sec is None and rec.batches_per_sec is None


def test_exclude_removes_paused_time_from_the_window(clock):
    listener, _ = make(clock, 2)
    listener.start()
    clock.advance(0.01)
    listener.record_iteration(samples=1)
    clock.advance(5.0)  # validation
    listener.exclude(5.0)
    clock.advance(0.01)
    rec = listener.record_iteration(samples=1)
    assert rec.window_s == pytest.approx(0.02)
    assert rec.iteration_max_ms == pytest.approx(10.0)


def test_flush_reports_a_partial_window(clock):
    listener, sink = make(clock, 10)
    run(listener, clock, [0.01] * 3)
    rec = listener.flush()
    assert rec is not None and rec.window_iterations == 3
    assert listener.flush() is None


def test_gc_generations_counted_from_gc_callbacks(clock):
    listener, _ = make(clock, 1, report_gc=True)
    listener.start()
    gc.collect(0)
    gc.collect(2)
    clock.advance(0.01)
    rec = listener.record_iteration(samples=1)
    stats = {s.name: s for s in rec.gc}
    assert set(stats) == {"gen0", "gen1", "gen2"}
    assert stats["gen0"].count >= 1 and stats["gen2"].count >= 1
    clock.advance(0.01)
    rec = listener.record_iteration(samples=1)
    assert {s.name: s.count for s in rec.gc}["gen2"] == 0, "GC figures are deltas per window"
    listener.close()


def test_close_removes_the_gc_callback_and_is_idempotent():
    before = len(gc.callbacks)
    listener = PerformanceListener(1, report_gc=True, sinks=[])
    assert len(gc.callbacks) == before + 1
    listener.close()
    listener.close()
    assert len(gc.callbacks) == before


def test_extra_collector_reports_deltas(clock):
    listener, _ = make(clock, 1)
    total = [5]
    listener.add_collector("cuda_alloc_retries", lambda: (total[0], None))
    listener.start()
    total[0] = 7
    (rec,) = run(listener, clock, [0.01])
    assert [(s.name, s.count, s.ms) for s in rec.gc] == [("cuda_alloc_retries", 2, None)]


def test_device_timeline_never_waits_while_training_and_gives_device_times(clock):
    from fake_device import FakeDevice, FakeTimeline

    listener, sink = make(clock, 5)
    device = FakeDevice(clock)
    timeline = FakeTimeline(device)
    listener.set_timeline(timeline)
    for _ in range(10):
        clock.advance(0.006)
        timeline.begin()
        device.launch(0.005)
        listener.record_iteration(samples=32)
    listener.flush()
    assert timeline.calls["end"] == 10
    assert timeline.calls["wait"] == 1  # at the flush, never before
    # the first iteration's device time counts from the timeline's start, 6 ms before its forward
    assert [r.iteration_ms for r in sink.records] == [pytest.approx(7.0), pytest.approx(6.0)]
    assert [r.device_idle_ms for r in sink.records] == [pytest.approx(2.0), pytest.approx(1.0)]
    assert [r.device_idle_max_ms for r in sink.records] == [pytest.approx(6.0), pytest.approx(1.0)]


def test_verdict_marks_input_bound_and_warns_once(clock):
    listener, _ = make(clock, 2, verdict=True)
    run(listener, clock, [0.01] * 2, etl=0.008)  # warm-up window: no warning
    with pytest.warns(BottleneckWarning, match="input-bound") as caught:
        reports = run(listener, clock, [0.01] * 6, etl=0.008)
    assert len(caught) == 1
    assert reports[0].verdict.kind == "input-bound"
    assert reports[0].verdict.share == pytest.approx(80.0)


def test_summary_splits_time_and_recommends(clock):
    listener, _ = make(clock, 2, verdict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(listener, clock, [0.01] * 6, etl=0.005)
    summary = listener.summary()
    assert summary.iterations == 4  # warm-up left out
    assert summary.wall_s == pytest.approx(0.04)
    assert summary.etl_pct == pytest.approx(50.0)
    assert summary.compute_pct == pytest.approx(50.0)
    assert any("num_workers" in r for r in summary.recommendations)
    assert "data wait" in str(summary)


def test_context_manager_closes_sinks(clock):
    closed = []

    class Closing:
        def __call__(self, record):
            pass

        def close(self):
            closed.append(True)

    with PerformanceListener(1, sinks=[Closing()], clock=clock):
        pass
    assert closed == [True]


def test_history_is_bounded():
    listener = PerformanceListener(1, sinks=[], history=3)
    for _ in range(10):
        listener.record_iteration(samples=1)
    assert [r.iteration for r in listener.history] == [8, 9, 10]


def test_close_reports_the_last_partial_window(clock):
    """25 iterations at frequency 10: close() reports iterations 21 to 25 too, and the summary has 20 after warm-up."""
    lst, sink = make(clock, frequency=10)
    run(lst, clock, [0.01] * 25)
    lst.close()
    assert [r.iteration for r in sink.records] == [10, 20, 25]
    assert lst.summary().iterations == 15 and lst.summary().total_iterations == 25
    assert "15 of 25 iterations, warm-up left out" in str(lst.summary())


def test_context_manager_reports_the_last_window_too(clock):
    sink = MemorySink()
    with PerformanceListener(10, sinks=[sink], clock=clock, verdict=False) as lst:
        run(lst, clock, [0.01] * 7)
    assert [r.iteration for r in sink.records] == [7]


def test_summary_shows_every_bottleneck_with_its_share_fixes_and_verdict_counts(clock):
    """Data wait 45% and GC 15%: both are listed, with shares and fixes, and the windows' verdicts are counted."""
    lst = PerformanceListener(2, sinks=[], clock=clock, verdict=True, report_gc=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(20):
            clock.advance(0.040)
            lst._readings.gc("start", {})  # a GC pause of 15 ms in each 100 ms iteration, inside the step
            clock.advance(0.015)
            lst._readings.gc("stop", {"generation": 0})
            clock.advance(0.045)
            lst.record_iteration(samples=8, etl=0.045)
    summary = lst.summary()
    kinds = [b.kind for b in summary.bottlenecks]
    assert kinds == ["input-bound", "gc-bound"]
    assert summary.bottlenecks[0].share == pytest.approx(45.0) and summary.bottlenecks[1].share == pytest.approx(15.0)
    text = str(summary)
    assert "gc-bound over the run: 15% of the time in garbage collection" in text and "gc.freeze()" in text
    assert "verdicts over 9 windows: input-bound 9" in text
    lst.close()


def test_verdict_thresholds_are_options_and_are_checked(clock):
    lst, sink = make(clock, frequency=2, verdict=True, input_bound_share=50.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(lst, clock, [0.01] * 6, etl=0.004)  # 40% data wait: fine under a 50% line
    assert [r.verdict.kind for r in sink.records] == ["fine"] * 3
    for name in ("input_bound_share", "gc_bound_share", "loop_bound_share"):
        for bad in (0, 101, "20", True):
            with pytest.raises(ValueError, match=f"{name} must be a percentage in \\(0, 100\\], got {bad!r}"):
                PerformanceListener(1, **{name: bad})


def test_bottleneck_warning_from_an_attached_model_points_at_the_users_line(clock):
    torch = pytest.importorskip("torch")
    from trainperf.torch import attach

    model = torch.nn.Linear(2, 2)
    lst = PerformanceListener(2, sinks=[], clock=clock)
    attach(model, lst)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(BottleneckWarning) as caught:
        for _ in range(10):  # three bad windows after the warm-up: a bottleneck that persists
            clock.advance(0.05)
            model(torch.ones(1, 2)).sum().backward()
            opt.step()  # the step closes the iteration that reports and warns
    lst.close()
    assert caught[0].filename == __file__


def test_cpu_records_have_no_device_figures_and_are_not_deferred(clock):
    listener = PerformanceListener(2, sinks=[], clock=clock, report_hardware=False)
    listener.start()
    clock.advance(0.01)
    assert listener.record_iteration(samples=1, etl=0.002) is None
    clock.advance(0.01)
    record = listener.record_iteration(samples=1, etl=0.008)
    assert record is not None and (record.first_iteration, record.iteration) == (1, 2)
    assert record.device_idle_ms is None and record.device_idle_max_ms is None
    assert record.speedup_if_data_free == pytest.approx(0.02 / (0.02 - 0.01))
    assert record.speedup_if_gc_free == pytest.approx(1.0)


def test_cpu_summary_says_what_free_data_would_gain(clock):
    listener = PerformanceListener(2, sinks=[], clock=clock, report_hardware=False, verdict=False)
    listener.start()
    for _ in range(6):
        clock.advance(0.01)
        listener.record_iteration(samples=1, etl=0.0046)
    summary = listener.summary()
    assert summary.speedup_if_data_free == pytest.approx(1 / 0.54)
    assert "data wait took 46% of the time: free data would make this run 1.85x faster" in str(summary)


def test_start_at_an_earlier_reading_opens_the_first_window_there(clock):
    lst = PerformanceListener(2, sinks=[], sink_thread=False, clock=clock, history=None, verdict=False)
    began = clock()
    clock.advance(0.030)  # a loader's first fetch, seen when it ended
    lst.start(at=began)
    clock.advance(0.010)
    lst.record_iteration(samples=4)
    clock.advance(0.010)
    record = lst.record_iteration(samples=4)
    assert record is not None and record.window_s == pytest.approx(0.050)
    later = PerformanceListener(1, sinks=[], sink_thread=False, clock=clock, history=None, verdict=False)
    later.start(at=clock() + 5.0)  # not in the future: the window opens now
    clock.advance(0.010)
    assert later.record_iteration(samples=4).window_s == pytest.approx(0.010)


def test_start_after_iterations_done_before_counts_on_from_them_and_the_first_window_is_the_warm_up(clock):
    listener, _ = make(clock, 2)
    listener.start(iteration=10)  # a run resumed at its step 10
    listener.start(iteration=10)  # started again before any iteration: the same
    reports = run(listener, clock, [0.01] * 4)
    assert [(r.first_iteration, r.iteration, r.warmup) for r in reports] == [(11, 12, True), (13, 14, False)]
    listener.start(iteration=30)  # iterations were recorded: the count goes on from them
    assert [r.iteration for r in run(listener, clock, [0.01] * 2)] == [16]
    with pytest.raises(TypeError, match="iteration"):
        listener.start(iteration=1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("at", ["0", True, float("nan"), float("inf")])
def test_start_refuses_an_at_that_is_no_clock_reading_by_name(at):
    with pytest.raises(TypeError, match="^at must be"):
        PerformanceListener(1, sinks=[]).start(at=at)
