from __future__ import annotations

import logging
import time
import warnings

import pytest

from trainperf import LoggingSink, MemorySink, PerformanceListener, SinkError


def boom(record):
    raise RuntimeError("disk full")


def test_failing_sink_warns_once_and_others_get_every_record(clock):
    kept = MemorySink()
    listener = PerformanceListener(1, sinks=[boom, kept], clock=clock, sink_thread=False)
    with pytest.warns(SinkError, match="disk full") as caught:
        for _ in range(5):
            clock.advance(0.01)
            listener.record_iteration(samples=1)
    assert len(caught) == 1
    assert "Traceback" in str(caught[0].message)
    assert len(kept) == 5
    assert len(listener.history) == 5


def test_strict_reraises_after_delivering_to_the_others(clock):
    kept = MemorySink()
    listener = PerformanceListener(1, sinks=[boom, kept], clock=clock, sink_thread=False, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="disk full"):
            listener.record_iteration(samples=1)
    assert len(kept) == 1


def test_default_sink_prints_without_any_logging_configuration(clock, capsys, monkeypatch):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    listener = PerformanceListener(1, clock=clock, sink_thread=False)
    clock.advance(0.01)
    listener.record_iteration(samples=4)
    err = capsys.readouterr().err
    assert "INFO trainperf - ETL: 0.00 ms; iteration 1; iteration time: 10.00 ms; samples/sec: 400.0" in err


def test_default_sink_goes_through_configured_logging_once(clock, caplog, capsys):
    listener = PerformanceListener(1, clock=clock, sink_thread=False)
    with caplog.at_level(logging.INFO, logger="trainperf"):
        clock.advance(0.01)
        listener.record_iteration(samples=4)
    assert [r.getMessage().split(";")[1] for r in caplog.records] == [" iteration 1"]
    assert "iteration 1" not in capsys.readouterr().err  # the fallback stays quiet when logging is set up


def test_logging_sink_respects_a_raised_level(clock, caplog):
    sink = LoggingSink("trainperf.custom")
    logging.getLogger("trainperf.custom").setLevel(logging.WARNING)
    listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
    with caplog.at_level(logging.INFO):
        listener.record_iteration(samples=1)
    assert not [r for r in caplog.records if r.name == "trainperf.custom"]




def test_add_sink_receives_later_records(clock):
    listener = PerformanceListener(1, sinks=[], clock=clock, sink_thread=False)
    listener.record_iteration(samples=1)
    later = MemorySink()
    listener.add_sink(later)
    listener.record_iteration(samples=1)
    assert [r.iteration for r in later] == [2]
    assert listener.sinks == [later]


def test_a_memory_sink_is_complete_right_after_the_loop_without_flush():
    """The sinks' writer thread delivers later; a memory sink is filled in the report itself."""
    memory = MemorySink()
    listener = PerformanceListener(2, sinks=[memory], report_hardware=False)  # the writer thread is on
    for _ in range(40):
        listener.record_iteration(samples=1)
    assert [r.iteration for r in memory.records] == list(range(2, 41, 2))
    assert len(memory) == 20 and memory[-1].iteration == 40 and [r.iteration for r in memory][-1] == 40
    listener.close()


def test_reading_a_memory_sink_while_training_runs_is_safe():
    """Another thread reads the records, slowly, while they arrive: each read is a whole snapshot."""
    import threading

    memory = MemorySink()
    listener = PerformanceListener(1, sinks=[memory], report_hardware=False)
    done = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def reader() -> None:
        try:
            while not done.is_set():
                iterations = []
                for record in memory.records:  # another thread's work between items
                    iterations.append(record.iteration)
                    time.sleep(0)
                assert iterations == list(range(1, len(iterations) + 1))
                seen.append(len(iterations))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    watcher = threading.Thread(target=reader)
    watcher.start()
    for _ in range(1000):
        listener.record_iteration(samples=1)
        time.sleep(0)
    done.set()
    watcher.join(10)
    listener.close()
    assert errors == []
    assert len(seen) > 5 and len(memory.records) == 1000


def test_sinks_that_all_run_on_the_training_thread_start_no_writer_thread():
    listener = PerformanceListener(1, sinks=[MemorySink()], report_hardware=False)
    for _ in range(3):
        listener.record_iteration(samples=1)
    assert listener._emitter._thread is None and len(listener.sinks[0]) == 3
    listener.close()
