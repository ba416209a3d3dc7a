"""The listener under failing sinks, warnings as errors, close, threads, leaks and bad arguments."""

from __future__ import annotations

import gc
import logging
import math
import threading
import warnings

import pytest

from trainperf import MemorySink, PerformanceListener, SinkError


def make(clock, *, frequency: int = 2, **kwargs):
    kwargs.setdefault("sink_thread", False)  # the sinks here advance the test's clock or must fail in the report
    return PerformanceListener(frequency, sinks=kwargs.pop("sinks", []), clock=clock, verdict=True, **kwargs)


# -- a report's own cost ---------------------------------------------------------------------------
def test_a_slow_sink_is_not_counted_as_data_wait_and_is_reported_as_overhead(clock):
    def slow_sink(record):
        clock.advance(0.2)  # a slow disk or a network logger

    listener = make(clock, frequency=4, sinks=[slow_sink])
    listener.start()
    for _ in range(12):
        clock.advance(0.003)  # data wait, given as etl
        clock.advance(0.097)  # the step
        listener.record_iteration(32, etl=0.003)
    first, second, third = listener.history.records
    assert first.overhead_ms == 0.0
    for record in (second, third):
        assert record.window_s == pytest.approx(0.4)
        assert record.etl_ms == pytest.approx(3.0)
        assert record.iteration_ms == pytest.approx(100.0)
        assert record.overhead_ms == pytest.approx(200.0)
        assert record.verdict is not None and record.verdict.kind == "fine"


def test_a_slow_sink_is_not_data_wait_when_the_wait_is_the_gap_before_compute(clock):
    def slow_sink(record):
        clock.advance(0.2)

    listener = make(clock, frequency=4, sinks=[slow_sink])
    listener.start()
    for _ in range(8):
        clock.advance(0.003)
        started = clock()
        clock.advance(0.097)
        listener.record_iteration(32, started=started)
    second = listener.history[-1]
    assert second.etl_ms == pytest.approx(3.0)
    assert second.verdict.kind == "fine"


# -- warnings as errors ----------------------------------------------------------------------------
def test_warnings_as_errors_every_healthy_sink_gets_the_record_before_the_error(clock):
    def broken(record):
        raise OSError("disk full")

    healthy = [MemorySink() for _ in range(9)]
    listener = make(clock, frequency=1, sinks=[broken, *healthy])
    listener.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clock.advance(0.1)
        with pytest.raises(SinkError):
            listener.record_iteration(1)
    assert [len(sink) for sink in healthy] == [1] * 9
    clock.advance(0.1)  # the listener is still consistent
    record = listener.record_iteration(1)
    assert record.iteration == 2 and record.window_s == pytest.approx(0.1)
    assert [len(sink) for sink in healthy] == [2] * 9


def test_strict_raises_after_every_sink_got_the_record(clock):
    def broken(record):
        raise ValueError("bad sink")

    healthy = MemorySink()
    listener = make(clock, frequency=1, sinks=[broken, healthy], strict=True)
    clock.advance(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="bad sink"):
            listener.record_iteration(1)
    assert len(healthy) == 1


# -- close -----------------------------------------------------------------------------------------
class ClosingSink(MemorySink):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_close_finishes_every_step_when_a_close_callback_raises(clock):
    sink = ClosingSink()
    listener = make(clock, frequency=10, sinks=[sink], report_gc=True)
    before = len(gc.callbacks)
    listener.on_close(lambda: (_ for _ in ()).throw(RuntimeError("hook removal failed")))
    ran = []
    listener.on_close(lambda: ran.append(True))
    clock.advance(0.1)
    listener.record_iteration(1)
    with pytest.warns(SinkError, match="hook removal failed"):
        listener.close()
    assert sink.closed and ran == [True]
    assert len(sink) == 1  # the last window was reported
    assert len(gc.callbacks) == before - 1
    assert listener.closed
    listener.close()  # a second close does nothing, and raises nothing


def test_a_closed_listener_records_nothing(clock):
    sink = MemorySink()
    listener = make(clock, frequency=1, sinks=[sink])
    clock.advance(0.1)
    listener.record_iteration(1)
    listener.close()
    with pytest.raises(RuntimeError, match="closed"):
        listener.record_iteration(1)
    assert listener.flush() is None
    assert len(sink) == 1 and listener.iteration == 1


def test_a_closed_listener_refuses_from_another_thread_too(clock):
    listener = make(clock, frequency=1)
    listener.record_iteration(1)
    listener.close()
    errors = []

    def other():
        try:
            listener.record_iteration(1)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(errors) == 1


# -- leaks -----------------------------------------------------------------------------------------
def test_a_listener_dropped_without_close_leaves_no_gc_callback(clock):
    gc.collect()  # an earlier test's dropped listener, collected now rather than while this one is counted
    before = len(gc.callbacks)
    listener = make(clock, report_gc=True)
    assert len(gc.callbacks) == before + 1
    del listener
    gc.collect()
    assert len(gc.callbacks) == before


def test_closing_many_listeners_leaves_no_finalizers(clock):
    import weakref

    before = len(weakref.finalize._registry)  # type: ignore[attr-defined]
    for _ in range(200):
        make(clock, report_gc=True).close()
    assert len(weakref.finalize._registry) <= before  # type: ignore[attr-defined]


# -- threads ---------------------------------------------------------------------------------------
def test_two_threads_on_one_listener_keep_every_figure_whole():
    """Each thread's iterations count once, windows add up to every iteration, no figure is negative."""
    listener = PerformanceListener(10, sinks=[], history=None, verdict=False)
    per_thread = 20_000
    barrier = threading.Barrier(2)

    def train():
        barrier.wait()
        for _ in range(per_thread):
            listener.record_iteration(8, etl=0.0)

    with pytest.warns(RuntimeWarning, match="more than one thread") as caught:
        threads = [threading.Thread(target=train) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        listener.close()
    assert sum(1 for w in caught if "more than one thread" in str(w.message)) == 1
    records = listener.history.records
    iterations = [r.iteration for r in records]
    assert len(iterations) == len(set(iterations))
    assert iterations == sorted(iterations)
    assert listener.iteration == 2 * per_thread
    assert sum(r.window_iterations for r in records) == 2 * per_thread
    assert sum(r.samples for r in records) == 8 * 2 * per_thread
    for r in records:
        assert r.window_s >= 0 and r.iteration_ms >= 0 and r.etl_ms >= 0 and r.compute_ms >= 0


def test_one_thread_gives_no_warning(clock):
    listener = make(clock, frequency=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(9):
            clock.advance(0.01)
            listener.record_iteration(1)
        listener.close()


def test_the_training_thread_need_not_be_the_one_that_built_the_listener(clock):
    listener = make(clock, frequency=3)

    def train():
        for _ in range(9):
            clock.advance(0.01)
            listener.record_iteration(1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        thread = threading.Thread(target=train)
        thread.start()
        thread.join()
    assert len(listener.history) == 3


# -- bad record_iteration arguments ----------------------------------------------------------------
BAD_ITERATIONS = [
    ({"etl": -0.1}, ValueError, "etl"),
    ({"etl": math.nan}, ValueError, "etl"),
    ({"etl": math.inf}, ValueError, "etl"),
    ({"etl": "0.1"}, TypeError, "etl"),
    ({"other": -1.0}, ValueError, "other"),
    ({"samples": -32}, ValueError, "samples"),
    ({"samples": "32"}, TypeError, "samples"),
    ({"batches": -1}, ValueError, "batches"),
    ({"steps": -1}, ValueError, "steps"),
    ({"skipped": 2, "steps": 1}, ValueError, "skipped"),
    ({"started": math.nan}, ValueError, "started"),
    ({"started": "now"}, TypeError, "started"),
]


@pytest.mark.parametrize(("kwargs", "error", "name"), BAD_ITERATIONS)
@pytest.mark.parametrize("call", ["first", "later"])
def test_a_bad_iteration_argument_is_refused_at_the_call_by_name(clock, kwargs, error, name, call):
    listener = make(clock, frequency=1000)
    if call == "later":
        listener.record_iteration(1)
    with pytest.raises(error, match=rf"\b{name}\b") as info:
        listener.record_iteration(**kwargs)
    assert repr(next(iter(kwargs.values()))) in str(info.value)
    assert listener.iteration == (1 if call == "later" else 0)  # nothing recorded


@pytest.mark.parametrize(("kwargs", "name"), [({"samples": 32.0}, "samples"), ({"batches": 1.5}, "batches")])
def test_types_are_checked_on_the_first_call(clock, kwargs, name):
    listener = make(clock)
    with pytest.raises(TypeError, match=name):
        listener.record_iteration(**kwargs)


def test_numpy_and_tensor_counts_are_accepted(clock):
    np = pytest.importorskip("numpy")
    listener = make(clock, frequency=1)
    clock.advance(0.1)
    record = listener.record_iteration(np.int64(32), batches=np.int32(1), etl=np.float64(0.01))
    assert record.samples == 32


# -- LoggingSink and the user's own logger ---------------------------------------------------------
def test_logging_sink_adds_no_handler_to_the_users_logger(monkeypatch):
    from trainperf import LoggingSink

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    mine = logging.getLogger("my_training")
    before = list(mine.handlers)
    LoggingSink(mine)
    LoggingSink("my_training.perf")
    assert mine.handlers == before
    assert logging.getLogger("my_training.perf").handlers == []
