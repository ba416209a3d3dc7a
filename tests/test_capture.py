"""Capturing the bad window: a listener with ``profile_dir`` profiles the iterations after a window
that turned bad, with the real ``torch.profiler`` on the CPU or a fake profiler that logs its calls."""

from __future__ import annotations

import gzip
import json
import logging
import re
import warnings

import pytest

from _needs import integration
from trainperf import CaptureRule, MemorySink, PerformanceListener, format_line, parse_log
from trainperf.profile._capture import Capture

torch = pytest.importorskip("torch")


class FakeTracer:
    """Logs each call with the iteration the listener had recorded; writes a trace of its markers."""

    log: list[tuple[str, object]] = []

    def __init__(self, *, fail_save: bool = False, fail_start: bool = False, clock=None, call_s: float = 0.0,
                 save_s: float = 0.0) -> None:
        self.marks: list[int] = []
        self.fail_save, self.fail_start = fail_save, fail_start
        self.clock, self.call_s, self.save_s = clock, call_s, save_s  # what each call takes on the clock
        FakeTracer.log.append(("new", None))

    def _take(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.advance(seconds)

    def prepare(self) -> None:
        FakeTracer.log.append(("prepare", None))
        self._take(self.call_s)
        if self.fail_start:
            raise RuntimeError("profiler busy")

    def start(self) -> None:
        FakeTracer.log.append(("start", None))
        self._take(self.call_s)

    def mark(self, iteration: int) -> None:
        FakeTracer.log.append(("mark", iteration))
        self._take(self.call_s)
        self.marks.append(iteration)

    def stop(self) -> None:
        FakeTracer.log.append(("stop", None))
        self._take(self.call_s)

    def save(self, path: str) -> None:
        self._take(self.save_s)
        if self.fail_save:
            raise OSError(28, "No space left on device")
        events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{m}", "ts": float(m), "dur": 1.0,
                   "pid": 1, "tid": 1} for m in self.marks]
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)


@pytest.fixture(autouse=True)
def _clear_log():
    FakeTracer.log = []


def run(listener, clock, step_s, n=140, *, work=None, samples=8):
    """``n`` iterations, iteration i taking ``step_s(i)`` seconds on ``clock``."""
    for i in range(1, n + 1):
        if work is not None:
            work()
        clock.advance(step_s(i))
        listener.record_iteration(samples=samples)
        assert listener._capture.wait(10.0)  # the writer's time passes between iterations, as in real training


#: Captures at the first bad window and takes no baseline: the tests of what a capture does, once armed.
AT_ONCE = CaptureRule(baseline=False, confirm=1)


def slow_from_81(i: int) -> float:
    return 0.006 if i >= 81 else 0.001


def traced_steps(path) -> list[int]:
    data = json.loads(gzip.decompress(path.read_bytes()))
    return sorted(int(m.group(1)) for e in data["traceEvents"]
                  if (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))))


def use_fake_tracer(listener, **kwargs):
    listener._capture._new_tracer = lambda: FakeTracer(**kwargs)


#: For each report frequency, a loop turning 6x slower at iteration 81: the window that ends the
#: baseline (the third after the warm-up window), and the window that confirms the slowdown (the
#: second slow window in a row; at 20, the first slow window overlaps the baseline's capture).
BASELINE_END = {1: 4, 5: 20, 7: 28, 10: 40, 20: 80}
CONFIRMED_AT = {1: 82, 5: 90, 7: 91, 10: 100, 20: 140}


@pytest.mark.parametrize("frequency", [1, 5, 7, 10, 20])
def test_a_loop_turning_6x_slower_at_81_gets_a_baseline_trace_and_one_of_the_slow_phase_with_the_real_profiler(
        tmp_path, clock, frequency):
    memory = MemorySink()
    w = torch.randn(32, 32)
    with PerformanceListener(frequency, clock=clock, sinks=[memory], profile_dir=tmp_path, sink_thread=False) as lis:
        run(lis, clock, slow_from_81, n=160, work=lambda: (w @ w).relu_().sum())
    metas = {}
    for path in tmp_path.glob("*.pt.trace.json.gz"):
        meta = json.loads(gzip.decompress(path.read_bytes()))["trainperf"]
        metas["baseline" if meta["baseline"] else "anomaly"] = (path, meta)
    assert sorted(metas) == ["anomaly", "baseline"]  # the default interval allows one anomaly in this run
    base_path, base = metas["baseline"]
    assert base["reason"] == "baseline: the run's first settled windows, fine" and base["severity"] is None
    assert traced_steps(base_path) == [BASELINE_END[frequency] + k for k in (2, 3, 4)]
    trace, meta = metas["anomaly"]
    steps = traced_steps(trace)
    confirmed = CONFIRMED_AT[frequency]
    assert steps == [confirmed + 2, confirmed + 3, confirmed + 4]  # armed at once, one warm-up iteration
    assert min(steps) > 80
    data = json.loads(gzip.decompress(trace.read_bytes()))
    assert any(e.get("name") == "aten::mm" for e in data["traceEvents"])  # what the loop did is in it
    first_mm = min(e["ts"] for e in data["traceEvents"] if e.get("name") == "aten::mm")
    first_step = min(e["ts"] for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert first_mm >= first_step  # nothing before the first traced iteration
    assert trace.name == f"{lis.host}_{lis.pid}-iter{steps[0]}-{steps[-1]}.pt.trace.json.gz"
    assert (meta["trigger_first_iteration"], meta["trigger_last_iteration"], meta["first_iteration"],
            meta["last_iteration"]) == (confirmed - frequency + 1, confirmed, steps[0], steps[-1])
    assert meta["reason"] == "p95 6.00 ms > 3 x the run's median 1.00 ms, 2 windows in a row"
    assert meta["severity"] == pytest.approx(6.0) and meta["baseline"] is False
    assert meta["traced_iteration_ms"] == pytest.approx(6.0) and meta["iterations"] == 3
    marked = [r for r in memory.records if r.capture == str(trace)]
    assert marked and all(r.iteration > 80 for r in marked)
    # exactly the windows that overlap the warm-up and traced iterations carry it
    assert {r.iteration for r in marked} == {r.iteration for r in memory.records
                                             if r.first_iteration <= steps[-1] and r.iteration >= steps[0] - 1}


def test_a_steady_run_captures_nothing_and_its_hot_path_is_the_usual_one(tmp_path, clock):
    memory = MemorySink()
    jitter = [0.0010, 0.0012, 0.0009, 0.0011, 0.0013, 0.0010, 0.0008]
    with PerformanceListener(10, clock=clock, sinks=[memory], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=CaptureRule(min_interval_s=0.0, max_captures=100, baseline=False)) as lis:
        use_fake_tracer(lis)
        for i in range(1, 301):
            clock.advance(jitter[i % len(jitter)])
            lis.record_iteration(samples=8)
            if i % 10 == 0:
                assert lis._next_report == i + 10  # no extra report-path iteration between windows
    assert list(tmp_path.iterdir()) == [] and FakeTracer.log == []
    assert all(r.capture is None for r in memory.records)


def test_a_verdict_turning_bad_after_the_baseline_captures_once_while_it_stays_bad(tmp_path, clock):
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=CaptureRule(min_interval_s=0.0, max_captures=10, baseline=False)) as lis:
        use_fake_tracer(lis)
        for i in range(1, 141):
            if i > 40:  # from the fifth window on, half of each iteration waits for data
                clock.advance(0.001)
                lis.record_iteration(samples=8, etl=0.001)
            else:
                clock.advance(0.001)
                lis.record_iteration(samples=8)
    traces = sorted(tmp_path.glob("*.gz"))
    assert [traced_steps(t) for t in traces] == [[62, 63, 64]]  # 41-50 turned, 51-60 confirmed it
    meta = json.loads(gzip.decompress(traces[0].read_bytes()))["trainperf"]
    assert meta["reason"] == "verdict turned input-bound (from the baseline's fine), 2 windows in a row"
    assert meta["trigger_last_iteration"] == 60


def test_the_caps_per_run_and_per_interval_hold(tmp_path, clock):
    # every fifth window is 10x slower; the clock makes each window last 10 s
    def step_s(i: int) -> float:
        return 10.0 if (i - 1) // 10 % 5 == 4 else 1.0

    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path / "a", sink_thread=False,
                             verdict=False, profile_rule=CaptureRule(min_interval_s=0.0, max_captures=2, baseline=False,
                                                                     confirm=1)) as lis:
        use_fake_tracer(lis)
        run(lis, clock, step_s, n=500)
    assert len(list((tmp_path / "a").glob("*.gz"))) == 2
    assert lis._capture.trigger.taken == 2 and lis._capture.trigger.capped >= 1

    # slow windows every 50 iterations = every ~140 s; at most one capture per 300 s
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path / "b", sink_thread=False,
                             verdict=False, profile_rule=CaptureRule(min_interval_s=300.0, max_captures=100,
                                                                     baseline=False, confirm=1)) as lis:
        use_fake_tracer(lis)
        started = clock()
        run(lis, clock, step_s, n=1000)
        elapsed = clock() - started
    taken = sorted(int(re.search(r"iter(\d+)-", p.name).group(1)) for p in (tmp_path / "b").glob("*.gz"))
    assert 2 <= len(taken) <= elapsed // 300 + 1
    assert lis._capture.trigger.capped >= 1
    # consecutive captures at least 300 s apart: iterations here take 1 s, slow ones 10 s
    times = {}
    t = 0.0
    for i in range(1, 1001):
        t += step_s(i)
        times[i] = t
    assert all(times[b] - times[a] >= 300.0 - 20.0 for a, b in zip(taken, taken[1:], strict=False))


def test_a_failure_to_write_the_trace_is_one_warning_and_training_goes_on(tmp_path, clock, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    memory = MemorySink()
    with pytest.warns(RuntimeWarning) as said:
        with PerformanceListener(10, clock=clock, sinks=[memory], profile_dir=blocker / "traces", sink_thread=False,
                                 profile_rule=CaptureRule(min_interval_s=0.0, max_captures=5)) as lis:
            use_fake_tracer(lis)
            run(lis, clock, lambda i: 0.01 if (i - 1) // 10 % 3 == 2 else 0.001, n=300)
    ours = [w for w in said if "trainperf" in str(w.message)]
    assert len(ours) == 1
    assert re.search(r"trainperf: could not profile iterations \d+-\d+: folder .*traces.*NotADirectoryError.*; "
                     "training goes on", str(ours[0].message))
    assert lis.iteration == 300 and memory.records[-1].iteration == 300
    assert lis._capture.written == []
    assert lis._capture._spans == []  # every failed capture forgotten: later windows name none of them


def test_a_profiler_that_cannot_start_is_one_warning_and_nothing_is_traced(tmp_path, clock):
    with pytest.warns(RuntimeWarning, match="could not start the profiler for iterations 92-94: RuntimeError"):
        with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                                 profile_rule=AT_ONCE) as lis:
            use_fake_tracer(lis, fail_start=True)
            run(lis, clock, slow_from_81)
    assert list(tmp_path.iterdir()) == [] and lis.iteration == 140


def test_the_profiler_is_called_only_from_the_bad_window_to_the_last_traced_iteration(tmp_path, clock):
    calls: list[tuple[str, object, int]] = []

    class Logged(FakeTracer):
        def __getattribute__(self, name):
            attr = object.__getattribute__(self, name)
            if name in ("prepare", "start", "mark", "stop"):
                calls.append((name, None, lis.iteration))
            return attr

    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        lis._capture._new_tracer = Logged
        run(lis, clock, slow_from_81)
    assert [(name, at) for name, _, at in calls] == [
        ("prepare", 90), ("start", 91), ("mark", 91), ("mark", 92), ("mark", 93), ("stop", 94)]


def test_training_that_ends_while_tracing_keeps_what_was_traced_and_one_warming_up_keeps_nothing(tmp_path, clock):
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path / "a", sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81, n=93)  # armed at 90, warm-up 91, traced 92-93 of 92-94
    (trace,) = (tmp_path / "a").glob("*.gz")
    assert trace.name.endswith("-iter92-94.pt.trace.json.gz")
    assert json.loads(gzip.decompress(trace.read_bytes()))["trainperf"]["last_iteration"] == 93
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path / "b", sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81, n=91)  # only the warm-up iteration ran
    assert not (tmp_path / "b").exists() or list((tmp_path / "b").iterdir()) == []
    assert ("stop", None) in FakeTracer.log


def test_the_writers_thread_ends_when_the_listener_closes(tmp_path, clock):
    import threading

    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81)
        assert any(t.name == "trainperf-capture" for t in threading.enumerate())
    for thread in threading.enumerate():
        if thread.name == "trainperf-capture":
            thread.join(5.0)
    assert not any(t.name == "trainperf-capture" for t in threading.enumerate())
    assert len(list(tmp_path.glob("*.gz"))) == 1


def test_the_captures_cost_is_the_profilers_calls_and_the_loops_figures_do_not_pay_it(tmp_path, clock):
    memory = MemorySink()
    with PerformanceListener(10, clock=clock, sinks=[memory], profile_dir=tmp_path / "a" / "b", sink_thread=False,
                             profile_rule=CaptureRule(iterations=4, max_captures=1, baseline=False,
                                                      confirm=1)) as lis:
        use_fake_tracer(lis, clock=clock, call_s=1000.0)  # far longer than the clock's reading: no % slips by
        run(lis, clock, lambda i: 0.0065 if i >= 81 else 0.001)
    (trace,) = (tmp_path / "a" / "b").glob("*.gz")  # the folders are made
    meta = json.loads(gzip.decompress(trace.read_bytes()))["trainperf"]
    # prepare, start, 4 markers, stop: 7 calls of 1000 s on the training thread
    assert meta["cost_ms"] == pytest.approx(7e6) and lis._capture.written[0]["cost_ms"] == pytest.approx(7e6)
    assert meta["traced_iteration_ms"] == pytest.approx(6.5)  # the profiler's calls are not the loop's time
    assert all(r.iteration_max_ms == pytest.approx(6.5 if r.iteration > 80 else 1.0) for r in memory.records
               if not r.warmup)
    assert sum(r.overhead_ms for r in memory.records) == pytest.approx(7e6)  # said as trainperf's own time


def test_the_time_to_write_the_trace_is_reported(tmp_path, clock):
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis, clock=clock, save_s=500.0)  # the shared fake clock: 500 s pass while it writes
        run(lis, clock, slow_from_81)
    (written,) = lis._capture.written
    assert written["export_ms"] == pytest.approx(500_000.0) and written["cost_ms"] == 0.0


class Failing(FakeTracer):
    """A profiler that fails at its ``n``-th marker, or when stopped."""

    def __init__(self, *, mark_fails_at: int | None = None, stop_fails: bool = False) -> None:
        super().__init__()
        self.mark_fails_at, self.stop_fails = mark_fails_at, stop_fails

    def mark(self, iteration: int) -> None:
        super().mark(iteration)
        if iteration == self.mark_fails_at:
            raise RuntimeError("profiler lost its buffer")

    def stop(self) -> None:
        super().stop()
        if self.stop_fails:
            raise RuntimeError("stop failed")


def test_a_profiler_failing_while_tracing_is_one_warning_and_training_goes_on(tmp_path, clock):
    memory = MemorySink()
    with pytest.warns(RuntimeWarning, match="the profiler failed while tracing iterations 92-94: RuntimeError"):
        with PerformanceListener(10, clock=clock, sinks=[memory], profile_dir=tmp_path, sink_thread=False,
                                 profile_rule=AT_ONCE) as lis:
            lis._capture._new_tracer = lambda: Failing(mark_fails_at=93)
            run(lis, clock, slow_from_81)
    assert list(tmp_path.iterdir()) == [] and lis.iteration == 140 and memory.records[-1].iteration == 140
    assert not lis._capture.busy
    assert FakeTracer.log[-1] == ("stop", None)  # not left running
    assert all(r.capture is None for r in memory.records)  # the window of the failed capture names none


def test_a_profiler_failing_to_stop_when_training_ends_is_one_warning(tmp_path, clock):
    with pytest.warns(RuntimeWarning, match="the profiler failed while stopping: RuntimeError"):
        with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                                 profile_rule=AT_ONCE) as lis:
            lis._capture._new_tracer = lambda: Failing(stop_fails=True)
            run(lis, clock, slow_from_81, n=91)  # ends in the warm-up: the profiler is stopped at close
    assert list(tmp_path.iterdir()) == []


def test_a_bad_warm_up_window_arms_nothing(tmp_path, clock):
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        for i in range(1, 61):  # the warm-up window waits for data (start-up), the rest do not
            clock.advance(0.001)
            lis.record_iteration(samples=8, etl=0.001 if i <= 10 else 0.0)
    assert FakeTracer.log == []


def test_training_that_ends_at_the_first_traced_iteration_writes_that_one(tmp_path, clock):
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81, n=92)
    (trace,) = tmp_path.glob("*.gz")
    meta = json.loads(gzip.decompress(trace.read_bytes()))["trainperf"]
    assert (meta["first_iteration"], meta["last_iteration"], meta["iterations"]) == (92, 92, 1)
    assert traced_steps(trace) == [92]  # not the marker opened for an iteration that never ran


def test_the_last_window_reported_at_close_arms_nothing(tmp_path, clock):
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81, n=85)  # 81-85 is reported by close(), 6x slower
    assert FakeTracer.log == [] and list(tmp_path.iterdir()) == []


def test_the_capture_is_logged_and_its_record_line_says_where(tmp_path, clock, caplog):
    memory = MemorySink()
    caplog.set_level(logging.INFO, logger="trainperf")
    with PerformanceListener(10, clock=clock, sinks=[memory], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81)
    path = tmp_path / f"{lis.host}_{lis.pid}-iter92-94.pt.trace.json.gz"
    text = caplog.text
    assert ("iterations 81-90: p95 6.00 ms > 3 x the run's median 1.00 ms; profiling iterations 92-94 (the trace "
            f"goes to {tmp_path} once written)") in text
    assert re.search(rf"trace of iterations 92-94 written to {re.escape(str(path))} \(0\.00 MB\); the capture cost "
                     r"[\d.]+ ms on the training thread and \d+ ms of writing beside it; traced iterations took 6\.00 "
                     r"ms on average \(the triggering window's median: 6\.00 ms\)", text)
    (marked,) = [r for r in memory.records if r.capture]
    line = format_line(marked)
    assert line.endswith(f"; capture: {path};")
    parsed = parse_log(["INFO trainperf - " + format_line(r) for r in memory.records])
    assert parsed.column("iteration") == [r.iteration for r in memory.records]  # the field is passed over


def test_a_path_that_would_break_the_line_is_shown_by_its_file_name(clock):
    memory = MemorySink()
    with PerformanceListener(1, clock=clock, sinks=[memory], sink_thread=False) as lis:
        clock.advance(0.01)
        lis.record_iteration()
    import dataclasses
    record = dataclasses.replace(memory.records[0], capture="/tmp/a;b/rank0-iter1-3.pt.trace.json.gz")
    assert format_line(record).endswith("; capture: rank0-iter1-3.pt.trace.json.gz;")


def test_windows_that_overlap_a_capture_neither_trigger_nor_feed_the_median(tmp_path, clock):
    # the traced iterations run 20x slower (a heavy profiler): that must not trigger another capture
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=CaptureRule(min_interval_s=0.0, max_captures=10, on_verdict=False,
                                                      baseline=False, confirm=1)) as lis:
        use_fake_tracer(lis)
        capture = lis._capture
        for i in range(1, 141):
            slow = 81 <= i <= 85 or (capture.busy and i > 90)
            clock.advance(0.02 if slow else 0.001)
            lis.record_iteration(samples=8)
    assert [p.name.split("-iter")[1] for p in tmp_path.glob("*.gz")] == ["92-94.pt.trace.json.gz"]
    assert capture.trigger.median_ms == pytest.approx(1.0)


def test_the_rank_names_the_file_and_reaches_the_run_directory(tmp_path, clock):
    run_dir = tmp_path / "run"
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path / "traces", sink_thread=False,
                             rank=2, run_dir=run_dir, profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81)
    (trace,) = (tmp_path / "traces").glob("*.gz")
    assert trace.name == "rank2-iter92-94.pt.trace.json.gz"
    assert json.loads(gzip.decompress(trace.read_bytes()))["distributedInfo"]["rank"] == 2
    events = [json.loads(line) for line in (run_dir / "rank-2" / "events.jsonl").read_text().splitlines()]
    (event,) = [e for e in events if e["kind"] == "capture"]
    assert (event["path"], event["rank"], event["trigger_first_iteration"], event["trigger_last_iteration"],
            event["first_iteration"], event["last_iteration"]) == (str(trace), 2, 81, 90, 92, 94)
    assert event["bytes"] == trace.stat().st_size and event["trimmed_events"] == 0


def test_a_trace_over_the_cap_is_trimmed_and_said(tmp_path, clock, caplog):
    caplog.set_level(logging.INFO, logger="trainperf")
    w = torch.randn(8, 8)

    def work():
        for _ in range(200):
            w.add(1.0)

    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=CaptureRule(max_mb=0.004, baseline=False, confirm=1)) as lis:
        run(lis, clock, slow_from_81, work=work)
    (trace,) = tmp_path.glob("*.gz")
    assert trace.stat().st_size <= 4000
    data = json.loads(gzip.decompress(trace.read_bytes()))
    assert data["trainperf"]["trimmed_events"] > 0
    assert traced_steps(trace) == [92, 93, 94]
    assert "shortest events left out for the 0.004 MB cap" in caplog.text


def test_the_options_are_checked_by_name(tmp_path):
    with pytest.raises(TypeError, match=r"profile_dir must be a path \(str or os.PathLike\) or None, got 3"):
        PerformanceListener(profile_dir=3)
    with pytest.raises(TypeError, match="profile_rule must be a trainperf.CaptureRule or None, got {'slowdown': 2}"):
        PerformanceListener(profile_dir=tmp_path, profile_rule={"slowdown": 2})


@pytest.mark.integration
def test_holistic_trace_analysis_reads_each_ranks_capture_and_its_steps(tmp_path, clock):
    hta = integration("hta.trace_analysis")
    w = torch.randn(32, 32)
    for rank in (0, 1):
        # HTA reads one trace per rank from a folder: the slowdown's only, no baseline capture
        with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                                 rank=rank, profile_rule=CaptureRule(baseline=False)) as lis:
            run(lis, clock, slow_from_81, work=lambda: (w @ w).sum())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0-iter102-104.pt.trace.json.gz",
                                                          "rank1-iter102-104.pt.trace.json.gz"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyzer = hta.TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True)
    assert sorted(analyzer.t.get_ranks()) == [0, 1]
    for rank in (0, 1):
        iterations = set(analyzer.t.get_trace(rank)["iteration"])
        assert {102, 103, 104} <= iterations


def test_capture_defaults_its_rule():
    capture = Capture("x", CaptureRule(), clock=lambda: 0.0, who=lambda: (None, None, "n"))
    assert not capture.busy and capture.path_in(1, 10) is None


@pytest.mark.realtime
def test_real_time_a_loop_turning_much_slower_at_31_is_traced_after_two_slow_windows(tmp_path):
    """On the real clock, with real sleeps: the trace follows the first two windows in a row that really
    slowed down by the stopwatch (the loop's own clock, same run). It comes no earlier than the second of
    two windows in a row whose p95 passed 0.8 times the rule's line, and no later than the end of the
    second of two in a row that passed 1.25 times it: after 35 on a quiet machine, earlier only where a
    loaded one stalled windows before it. The slowdown is large (8 ms to 300 ms sleeps): a loaded machine
    adds its wake-up delay to every iteration, which shrinks the ratio the rule sees."""
    import itertools
    import statistics
    import time

    frequency, slow_from, n = 5, 31, 55
    w = torch.randn(32, 32)
    memory = MemorySink()
    ends = []
    rule = CaptureRule(on_verdict=False, baseline=False)
    with PerformanceListener(frequency, sinks=[memory], profile_dir=tmp_path, report_hardware=False,
                             profile_rule=rule) as lis:
        ends.append(time.perf_counter())
        for i in range(1, n + 1):
            (w @ w).sum()
            time.sleep(0.300 if i >= slow_from else 0.008)
            ends.append(time.perf_counter())
            lis.record_iteration(samples=8)
    took = [1000.0 * (b - a) for a, b in itertools.pairwise(ends)]  # each iteration, by the stopwatch
    p50s: list[float] = []
    earliest = latest = None
    passed = {0.8: 0, 1.25: 0}  # windows in a row past each line
    for end in range(2 * frequency, n + 1, frequency):  # the first window is the warm-up
        window = took[end - frequency:end]
        p95 = statistics.quantiles(window, n=20, method="inclusive")[-1]
        if len(p50s) >= rule.min_history:
            line = rule.slowdown * statistics.median(p50s)
            for share in passed:
                passed[share] = passed[share] + 1 if p95 > share * line else 0
            if earliest is None and passed[0.8] >= rule.confirm:
                earliest = end
            if latest is None and passed[1.25] >= rule.confirm:
                latest = end
        p50s.append(statistics.median(window))
    # (a loaded machine raises the running median: the slowdown may pass the upper line only a window later)
    assert earliest is not None and latest is not None, (took, earliest, latest)
    traces = list(tmp_path.glob("*.gz"))
    assert len(traces) == 1
    steps = traced_steps(traces[0])
    # traced: the iterations after one untraced warm-up iteration past the triggering window
    assert len(steps) == 3 and earliest + 2 <= min(steps) <= latest + 2, (steps, earliest, latest)
    meta = json.loads(gzip.decompress(traces[0].read_bytes()))["trainperf"]
    assert earliest - frequency + 1 <= meta["trigger_first_iteration"] <= latest - frequency + 1
    assert meta["cost_ms"] >= 0.0
    assert all(r.capture is None for r in memory.records if r.iteration < earliest)


def test_on_a_device_the_capture_arms_when_the_late_record_is_published_and_nothing_waits(tmp_path, clock):
    """On an asynchronous device a window's record is built once its events completed, iterations
    later: the capture arms then, traces iterations after the slowdown, and the device is never
    waited for until close."""
    from fake_device import FakeDevice, FakeTimeline

    device = FakeDevice(clock, max_ahead_s=0.02)
    timeline = FakeTimeline(device)
    memory = MemorySink()
    published_at: dict[int, int] = {}

    def when(record):  # inline: the iteration during which each record was published
        published_at[record.iteration] = lis.iteration

    with PerformanceListener(10, clock=clock, sinks=[memory, when], profile_dir=tmp_path, sink_thread=False,
                             verdict=False, profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        lis.use_device(0, timeline)
        for i in range(1, 141):
            timeline.begin()
            device.launch(0.006 if i >= 81 else 0.001)
            clock.advance(0.0002)
            lis.record_iteration(samples=8)
            assert lis._capture.wait(10.0)
        assert timeline.calls["wait"] == 0
    (trace,) = tmp_path.glob("*.gz")
    steps = traced_steps(trace)
    meta = json.loads(gzip.decompress(trace.read_bytes()))["trainperf"]
    assert meta["trigger_last_iteration"] == 90 and min(steps) > 90 and len(steps) == 3
    warm_up = [c for c in FakeTracer.log if c[0] == "mark"][0][1] - 1
    assert published_at[90] > 90  # the device ran behind the host
    assert warm_up == published_at[90] + 1  # armed as the record was built: the next iteration warms up
    assert [r.iteration for r in memory.records if r.capture] == [100]


def test_the_median_and_the_trigger_use_the_windows_median_not_their_mean(tmp_path, clock):
    def step_s(i: int) -> float:  # one longer iteration in each window: the mean is above the median
        if i % 10 == 5:
            return 0.015 if i >= 81 else 0.0025
        return 0.006 if i >= 81 else 0.001

    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False, verdict=False,
                             profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, step_s)
    (trace,) = tmp_path.glob("*.gz")
    meta = json.loads(gzip.decompress(trace.read_bytes()))["trainperf"]
    assert meta["trigger_last_iteration"] == 90
    assert meta["trigger_median_ms"] == pytest.approx(6.0)  # the window's p50; its mean is 6.9
    assert lis._capture.trigger.median_ms == pytest.approx(1.0)  # of the windows' medians (their means: 1.15)


def test_without_percentiles_the_mean_iteration_time_is_used(tmp_path, clock):
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             report_iteration=False, profile_rule=AT_ONCE) as lis:
        use_fake_tracer(lis)
        run(lis, clock, slow_from_81)
    (trace,) = tmp_path.glob("*.gz")
    meta = json.loads(gzip.decompress(trace.read_bytes()))["trainperf"]
    assert meta["reason"] == "p95 6.00 ms > 3 x the run's median 1.00 ms"
    assert meta["trigger_median_ms"] == pytest.approx(6.0)


def test_a_listener_never_closed_does_not_hold_the_interpreter_at_exit(tmp_path):
    import subprocess
    import sys

    code = f"""
import torch
from trainperf import PerformanceListener
clock = [100.0]
lis = PerformanceListener(10, clock=lambda: clock[0], sinks=[], sink_thread=False, profile_dir={str(tmp_path)!r})
for i in range(1, 100):
    clock[0] += 0.006 if i >= 81 else 0.001
    lis.record_iteration(samples=8)
assert lis._capture._thread is not None
print("done")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-2000:]


def captures(folder) -> list[tuple[list[int], dict]]:
    """Each trace's traced iterations and its ``trainperf`` meta, in the order of their iterations."""
    out = []
    for path in folder.glob("*.gz"):
        out.append((traced_steps(path), json.loads(gzip.decompress(path.read_bytes()))["trainperf"]))
    return sorted(out, key=lambda c: c[0])


def test_a_run_that_starts_input_bound_and_turns_10x_slower_at_100_traces_its_baseline_and_the_slow_phase(
        tmp_path, clock):
    """Input-bound from its first windows is the run's nature: one baseline trace says so, and the
    slowdown at 100 still gets the anomaly budget."""
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False) as lis:
        use_fake_tracer(lis)
        for i in range(1, 201):
            clock.advance(0.010 if i >= 100 else 0.001)
            lis.record_iteration(samples=8, etl=0.001)  # waits for data as long as it computes
            assert lis._capture.wait(10.0)
    (base, base_meta), (slow, meta) = captures(tmp_path)
    assert base == [42, 43, 44] and base_meta["baseline"] is True
    assert base_meta["reason"] == "baseline: the run's first settled windows, input-bound"
    assert slow == [112, 113, 114] and meta["baseline"] is False  # 91-100 and 101-110 slow: armed at 110
    assert meta["reason"].startswith("p95 ") and meta["reason"].endswith(", 2 windows in a row")
    assert lis._capture.trigger.taken == 1


def test_a_load_spike_of_one_window_takes_no_capture_and_the_later_5x_slowdown_is_traced(tmp_path, clock):
    def step_s(i: int) -> float:
        if 61 <= i <= 70:  # one window on a loaded machine, the next back to normal
            return 0.008
        return 0.005 if i >= 100 else 0.001

    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False) as lis:
        use_fake_tracer(lis)
        run(lis, clock, step_s, n=200)
    traced = captures(tmp_path)
    assert [steps for steps, _ in traced] == [[42, 43, 44], [112, 113, 114]]  # nothing after the spike
    assert [meta["baseline"] for _, meta in traced] == [True, False]
    assert traced[1][1]["reason"] == "p95 5.00 ms > 3 x the run's median 1.00 ms, 2 windows in a row"


def test_a_steady_run_with_spikes_of_one_window_takes_its_baseline_capture_and_no_other(tmp_path, clock):
    def step_s(i: int) -> float:  # every sixth window is one iteration of a load spike, at 20x
        return 0.020 if i % 60 == 55 else 0.001

    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=CaptureRule(min_interval_s=0.0, max_captures=100)) as lis:
        use_fake_tracer(lis)
        run(lis, clock, step_s, n=600)
    traced = captures(tmp_path)
    assert [(steps, meta["reason"]) for steps, meta in traced] == [
        ([42, 43, 44], "baseline: the run's first settled windows, fine")]
    assert lis._capture.trigger.taken == 0 and lis._capture.trigger.capped == 0


def test_a_small_anomaly_traced_first_leaves_room_for_a_larger_one_inside_the_interval(tmp_path, clock):
    """A verdict that turns input-bound for two windows (61-80, no slower) is traced; the 5x slowdown
    at 100, minutes sooner than ``min_interval_s``, is more than twice as severe and is traced too."""
    with PerformanceListener(10, clock=clock, sinks=[], profile_dir=tmp_path, sink_thread=False,
                             profile_rule=CaptureRule(baseline=False)) as lis:
        use_fake_tracer(lis)
        for i in range(1, 201):
            clock.advance(0.005 if i >= 100 else 0.001)
            lis.record_iteration(samples=8, etl=0.001 if 61 <= i <= 80 else 0.0)
            assert lis._capture.wait(10.0)
    (blip, blip_meta), (slow, meta) = captures(tmp_path)
    assert blip == [82, 83, 84]
    assert blip_meta["reason"] == "verdict turned input-bound (from the baseline's fine), 2 windows in a row"
    assert blip_meta["severity"] == pytest.approx(1.0)
    assert slow == [112, 113, 114] and meta["severity"] == pytest.approx(5.0)
    assert meta["reason"].endswith("; 5.0 x the median, at least 2 x the largest traced (1.0 x)")
    assert lis._capture.trigger.taken == 2
