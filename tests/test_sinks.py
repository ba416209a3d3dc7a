from __future__ import annotations

import logging
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
