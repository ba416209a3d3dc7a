"""Closing a window, with the parts it needs and a fake clock: the record's figures and data-wait source,
trainperf's own time left out of the next window, the device side waited for without blocking, and
the warnings said after the sinks."""

from __future__ import annotations

import warnings

import pytest

from conftest import FakeClock
from fake_device import FakeDevice, FakeTimeline
from trainperf.core._closer import WindowCloser
from trainperf.core._emit import Emitter
from trainperf.core._notices import Notices
from trainperf.core._open_window import OpenWindow
from trainperf.core._options import ListenerOptions
from trainperf.core._own_time import OwnTime
from trainperf.core._publish import Publisher
from trainperf.core._readings import HostReadings
from trainperf.sinks._memory import MemorySink

WHO = (3, 1, None)  # epoch, rank, device


class Costly(list):
    """A sink that takes ``cost`` seconds of the fake clock per record."""

    def __init__(self, clock: FakeClock, cost: float) -> None:
        super().__init__()
        self.clock, self.cost = clock, cost

    def __call__(self, record) -> None:
        self.clock.advance(self.cost)
        self.append(record)


def closer(clock: FakeClock, sink=None, **options) -> tuple[WindowCloser, list, Notices]:
    got: list = [] if sink is None else sink
    notices = Notices()
    emitter = Emitter([got.append] if sink is None else [sink], inline=True)
    own = OwnTime(clock)
    readings = HostReadings(own.clock.read, report_gc=False, report_hardware=False, skip_gc=lambda: False)
    publisher = Publisher(ListenerOptions(**options), MemorySink(None), emitter, notices, host_name="node", pid=7)
    made = WindowCloser(own, readings, publisher, notices, emitter, None, lambda: 1.7e9,
                        verdict=publisher.options.verdict)
    return made, got, notices


def window_of(start: float, ends: list[float], etl: float = 0.002, started: list[float | None] | None = None,
              count: int = 0) -> tuple[OpenWindow, int]:
    window = OpenWindow()
    window.reset(start, count, len(ends), first=count == 0)
    for k, end in enumerate(ends[:-1]):
        window.entries.append((end, etl, None if started is None else started[k], 4, 1, 0.0, 1, 0))
    return window, count + len(ends)


def test_a_closed_window_on_the_host_clock_is_published_at_once_with_its_figures_and_who_measured_it():
    clock = FakeClock()
    c, got, _ = closer(clock)
    window, count = window_of(100.0, [100.01, 100.02, 100.03, 100.04])
    record = c.close(window, (100.04, 0.002, None, 4, 1, 0.0, 1, 0), count, WHO, "loader")
    assert got == [record]
    assert (record.first_iteration, record.iteration, record.window_iterations) == (1, 4, 4)
    assert (record.epoch, record.rank, record.device, record.host, record.pid) == (3, 1, None, "node", 7)
    assert record.timestamp == 1.7e9 and record.warmup
    assert record.iteration_ms == pytest.approx(10.0) and record.etl_ms == pytest.approx(2.0)
    assert record.samples == 16 and record.etl_source == "loader"
    assert window.entries[-1][0] == 100.04  # the last iteration joined the window it closed


@pytest.mark.parametrize(("started", "source"), [
    ([None, None, None], "given"),
    ([100.005, 100.015, 100.025], "gap"),
    ([None, 100.015, None], "given+gap"),
])
def test_the_data_wait_source_says_which_iterations_took_theirs_from_the_gap(started, source):
    clock = FakeClock()
    c, _, _ = closer(clock)
    window, count = window_of(100.0, [100.01, 100.02, 100.03], started=started)
    record = c.close(window, (100.03, 0.002, started[-1], 4, 1, 0.0, 1, 0), count, WHO, "given")
    assert record.etl_source == source


def test_the_close_is_trainperf_own_time_counted_as_the_next_windows_overhead_and_off_its_clock():
    clock = FakeClock()
    c, _, _ = closer(clock, Costly(clock, 0.005))
    before = c.own.clock.read()
    window, count = window_of(100.0, [100.01, 100.02])
    clock.advance(0.02)
    c.close(window, (100.02, 0.0, None, 4, 1, 0.0, 1, 0), count, WHO, "given")
    assert c.own.overhead_s == pytest.approx(0.005)  # carried by the next window's record
    assert c.own.clock.read() - before == pytest.approx(0.02)  # the 5 ms of the sink are not the user's
    window.reset(c.own.clock.read(), count, 2, first=False)
    clock.advance(0.02)
    second = c.close(window, (c.own.clock.read(), 0.0, None, 4, 1, 0.0, 1, 0), count + 1, WHO, "given")
    assert second.overhead_ms == pytest.approx(5.0)


def test_on_a_device_the_record_waits_for_its_events_and_the_poll_never_blocks():
    clock = FakeClock()
    device = FakeDevice(clock)
    timeline = FakeTimeline(device)
    c, got, _ = closer(clock)
    c.use(timeline)
    window = OpenWindow()
    window.reset(clock.now, 0, 3, first=True)
    for _ in range(3):
        timeline.begin()
        device.launch(0.010)
        clock.advance(0.001)
        timeline.end()
        if len(window.entries) < 2:
            window.entries.append((clock.now, 0.0, None, 4, 1, 0.0, 1, 0))
    timeline.completed_up_to = clock.now  # the device is 27 ms behind
    assert c.close(window, (clock.now, 0.0, None, 4, 1, 0.0, 1, 0), 3, WHO, "given") is None
    assert got == [] and len(c.pending) == 1
    assert c.poll(window, 3, on_cuda=True) is None  # still running: nothing waited
    assert timeline.calls["wait"] == 0
    timeline.completed_up_to = None
    clock.advance(0.030)  # the device has finished
    record = c.poll(window, 3, on_cuda=True)
    assert got == [record] and not c.pending
    assert record.iteration_ms == pytest.approx(10.0)  # the device's clock, not the host's 1 ms
    assert timeline.calls["wait"] == 0


def test_drain_waits_once_and_publishes_every_waiting_window_and_nothing_when_none_waits():
    clock = FakeClock()
    device = FakeDevice(clock)
    timeline = FakeTimeline(device)
    c, got, _ = closer(clock)
    window = OpenWindow()
    assert c.drain(window, 0, on_cuda=True) is None  # no device clock: nothing waits
    c.use(timeline)
    window.reset(clock.now, 0, 1, first=True)
    for count in (1, 2):
        timeline.begin()
        device.launch(0.010)
        timeline.end()
        c.close(window, (clock.now, 0.0, None, 4, 1, 0.0, 1, 0), count, WHO, "given")
        window.reset(clock.now, count, 1, first=False)
        timeline.completed_up_to = 0.0
    assert got == [] and len(c.pending) == 2
    record = c.drain(window, 2, on_cuda=True)
    assert timeline.calls["wait"] == 1 and [r.iteration for r in got] == [1, 2] and record is got[-1]
    assert c.drain(window, 2, on_cuda=True) is None and timeline.calls["wait"] == 1


def test_own_time_on_a_device_is_left_out_before_the_next_iteration():
    clock = FakeClock()
    c, _, _ = closer(clock, Costly(clock, 0.004))
    window = OpenWindow()
    window.reset(clock.now, 0, 1, first=True)
    c.close(window, (clock.now, 0.0, None, 4, 1, 0.0, 1, 0), 1, WHO, "given")
    assert window.take_excluded(2, 2) == ()  # the host clock alone: nothing to leave out of device idle
    c.use(FakeTimeline(FakeDevice(clock)))
    began = c.own.begin()
    clock.advance(0.003)
    c.own_end(window, 1, began)
    assert window.take_excluded(2, 2) == (0.0, pytest.approx(0.003))


def test_the_warnings_of_a_record_are_said_after_it_reached_the_sinks_with_the_device_fixes_on_cuda():
    clock = FakeClock()
    c, got, notices = closer(clock)
    notices.once("something to say")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c.say(on_cuda=True)
    assert [str(w.message) for w in caught] == ["trainperf: something to say"]
    assert notices.on_cuda
    c.say(on_cuda=False)
    assert not notices.on_cuda


def test_each_window_carries_the_own_time_of_the_close_before_it_and_a_poll_adds_to_it():
    clock = FakeClock()
    c, got, _ = closer(clock, Costly(clock, 0.005))
    window = OpenWindow()
    window.reset(c.own.clock.read(), 0, 1, first=True)
    for count in (1, 2, 3):
        clock.advance(0.02)
        c.close(window, (c.own.clock.read(), 0.0, None, 4, 1, 0.0, 1, 0), count, WHO, "given")
        window.reset(c.own.clock.read(), count, 1, first=False)
    assert [r.overhead_ms for r in got] == [0.0, pytest.approx(5.0), pytest.approx(5.0)]  # not summed
    began = c.own.begin()
    clock.advance(0.002)  # a poll of the device between two reports
    c.own_end(window, 3, began)
    clock.advance(0.02)
    c.close(window, (c.own.clock.read(), 0.0, None, 4, 1, 0.0, 1, 0), 4, WHO, "given")
    assert got[-1].overhead_ms == pytest.approx(7.0)  # the close's 5 ms and the poll's 2


def test_a_window_on_the_host_clock_whose_cores_were_full_is_cpu_contention_and_one_on_a_device_is_not_judged_so(
        monkeypatch):
    from trainperf.records._verdict import CpuLoad

    clock = FakeClock()
    c, got, _ = closer(clock)
    full = CpuLoad(process_pct=100.0, workers_pct=100.0, cores=2)
    monkeypatch.setattr(c.readings, "cpu_load", lambda hardware, figures: full)
    window, count = window_of(100.0, [100.01, 100.02])
    record = c.close(window, (100.02, 0.002, None, 4, 1, 0.0, 1, 0), count, WHO, "given")
    assert record.verdict.kind == "cpu-contention"
    off, _, _ = closer(clock, verdict=False)
    monkeypatch.setattr(off.readings, "cpu_load", lambda hardware, figures: pytest.fail("read without a verdict"))
    window, count = window_of(100.0, [100.01, 100.02])
    assert off.close(window, (100.02, 0.002, None, 4, 1, 0.0, 1, 0), count, WHO, "given").verdict is None
