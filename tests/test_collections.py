"""A window's collections with plain numbers: each generation's and each collector's difference
since the previous read, a failing collector left out and said once."""

from __future__ import annotations

import pytest

from trainperf.core._collections import Collections, read_collector
from trainperf.records._record import GCStat


class Monitor:
    def __init__(self):
        self.counts, self.seconds = (0, 0, 0), (0.0, 0.0, 0.0)

    def snapshot(self):
        return self.counts, self.seconds

    def take_pauses(self):
        return [(1.0, 0.002, 0)]


def test_generations_and_collectors_are_read_as_differences():
    monitor = Monitor()
    jvm = [(10, 100.0)]
    parts = Collections(monitor)  # type: ignore[arg-type]
    parts.add_collector("jvm", lambda: jvm[-1])
    monitor.counts, monitor.seconds = (3, 1, 0), (0.003, 0.0005, 0.0)
    jvm.append((12, 130.0))
    stats, gc_s = parts.read(lambda m: None)
    assert stats == (GCStat("gen0", 3, 3.0), GCStat("gen1", 1, 0.5), GCStat("gen2", 0, 0.0), GCStat("jvm", 2, 30.0))
    assert gc_s == pytest.approx(0.0035)
    stats, gc_s = parts.read(lambda m: None)
    assert stats == (GCStat("gen0", 0, 0.0), GCStat("gen1", 0, 0.0), GCStat("gen2", 0, 0.0), GCStat("jvm", 0, 0.0))
    assert parts.take_pauses() == [(1.0, 0.002, 0)]


def test_restart_counts_from_now():
    monitor = Monitor()
    parts = Collections(monitor)  # type: ignore[arg-type]
    monitor.counts, monitor.seconds = (5, 0, 0), (0.01, 0.0, 0.0)
    parts.restart()
    stats, gc_s = parts.read(lambda m: None)
    assert stats[0] == GCStat("gen0", 0, 0.0) and gc_s == 0.0


def test_a_failing_collector_is_left_out_of_its_window_and_said():
    calls = iter([(1, 1.0), "bad", (3, None)])
    parts = Collections(None)
    parts.add_collector("flaky", lambda: next(calls))
    said: list[str] = []
    assert parts.read(said.append) == ((), 0.0)
    assert said == ["collector 'flaky' failed and is left out of this window: TypeError(\"collector 'flaky' must "
                    "return (count: int, milliseconds: float or None), got 'bad'\")"]
    stats, _ = parts.read(said.append)
    assert stats == (GCStat("flaky", 2, None),)  # no time known: its difference is unknown
    assert parts.take_pauses() == ()


@pytest.mark.parametrize("value", [(1,), (1, 2.0, 3), (1.5, 2.0), (1, "x"), (1, True), [1, 2.0], None])
def test_a_collector_must_return_a_count_and_milliseconds(value):
    with pytest.raises(TypeError, match="collector 'c' must return"):
        read_collector("c", lambda: value)
    assert read_collector("c", lambda: (2, 3)) == (2, 3.0)


def test_differences_of_counts_and_times_that_grew_from_non_zero_readings():
    monitor = Monitor()
    monitor.counts, monitor.seconds = (5, 2, 1), (0.010, 0.004, 0.001)
    jvm = [(7, 100.0)]
    parts = Collections(monitor)  # type: ignore[arg-type]
    parts.add_collector("jvm", lambda: jvm[-1])
    monitor.counts, monitor.seconds = (8, 3, 1), (0.015, 0.005, 0.001)
    jvm.append((10, 250.0))
    stats, gc_s = parts.read(lambda m: None)
    assert stats == (GCStat("gen0", 3, pytest.approx(5.0)), GCStat("gen1", 1, pytest.approx(1.0)),
                     GCStat("gen2", 0, 0.0), GCStat("jvm", 3, 150.0))
    assert gc_s == pytest.approx(0.006)


def test_a_failing_collector_leaves_the_collectors_after_it_read():
    state = {"up": True}

    def flaky():
        if not state["up"]:
            raise OSError("gone")
        return 0, 0.0

    counts = [(1, 1.0)]
    parts = Collections(None)
    parts.add_collector("flaky", flaky)
    parts.add_collector("ok", lambda: counts[-1])
    state["up"] = False
    counts.append((4, 7.0))
    stats, _ = parts.read(lambda m: None)
    assert stats == (GCStat("ok", 3, 6.0),)


def test_a_collector_needs_a_name():
    with pytest.raises(ValueError, match="name"):
        Collections(None).add_collector("", lambda: (0, 0.0))
