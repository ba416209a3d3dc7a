"""The device timeline's math with plain numbers, and the listener's deferred windows on a fake device."""

from __future__ import annotations

import pytest

from fake_device import FakeDevice, FakeTimeline
from trainperf import DeviceTimeline, MemorySink, PerformanceListener
from trainperf.records._timeline import device_window, speedup
from trainperf.records._verdict import judge_device

MS = 0.001


def test_device_window_idle_is_the_gap_from_step_end_to_next_forward():
    w = device_window([(2 * MS, 35 * MS), (40 * MS, 73 * MS), (73 * MS, 106 * MS)])
    assert w.idles == pytest.approx((2 * MS, 5 * MS, 0.0))
    assert w.durations == pytest.approx((35 * MS, 38 * MS, 33 * MS))
    assert w.window_s == pytest.approx(106 * MS)
    assert w.idle_max_s == pytest.approx(5 * MS)
    assert w.idle_mean_s == pytest.approx(7 * MS / 3)


def test_a_forward_queued_before_the_step_ended_is_no_idle_time():
    w = device_window([(0.0, 10 * MS), (8 * MS, 20 * MS)])
    assert w.idles == (0.0, 0.0)


def test_unknown_begin_counts_no_idle_and_excluded_time_is_not_idle():
    w = device_window([(None, 10 * MS), (60 * MS, 70 * MS)], excluded=[0.0, 45 * MS])
    assert w.idles == pytest.approx((0.0, 5 * MS))
    assert w.durations == pytest.approx((10 * MS, 15 * MS))


def test_data_idle_takes_per_iteration_the_smaller_of_idle_and_data_wait():
    w = device_window([(5 * MS, 10 * MS), (30 * MS, 40 * MS)])  # idles 5 and 20 ms
    assert w.data_idle_s([12 * MS, 3 * MS]) == pytest.approx(8 * MS)
    with pytest.raises(ValueError, match="one data wait per iteration"):
        w.data_idle_s([1.0])


def test_speedup_is_window_over_what_is_left():
    assert speedup(1.0, 0.46) == pytest.approx(1.8518518)
    assert speedup(1.0, 0.0) == 1.0
    assert speedup(0.0, 0.0) is None
    assert speedup(1.0, 1.0) is None


def test_device_window_needs_an_iteration():
    with pytest.raises(ValueError, match="at least one iteration"):
        device_window([])


def test_device_verdict_input_bound_from_device_idle_with_the_gain_in_words():
    v = judge_device(1.0, 0.5, 0.46, 0.8, 0.0, iterations=10)
    assert v.kind == "input-bound"
    assert v.share == 46.0
    assert v.reason == "46% of the time the GPU waited for data: free data would make this run 1.85x faster"


def test_device_verdict_hidden_data_wait_is_fine_and_says_so():
    v = judge_device(0.33, 0.0, 0.0, 0.12, 0.0, iterations=10)
    assert v.kind == "fine"
    assert v.reason == "0% of the time the GPU waited for data; data: 12 ms per batch, hidden behind 33 ms of GPU work"


def test_device_verdict_host_bound_needs_low_utilisation_and_no_idle():
    assert judge_device(1.0, 0.02, 0.0, 0.0, 0.0, utilization=20.0).kind == "host-bound"
    assert judge_device(1.0, 0.02, 0.0, 0.0, 0.0, utilization=90.0).kind == "fine"
    assert judge_device(1.0, 0.02, 0.0, 0.0, 0.0, utilization=None).kind == "fine"
    # an idle device waiting for data is input-bound whatever the utilisation
    assert judge_device(1.0, 0.5, 0.5, 0.5, 0.0, utilization=20.0).kind == "input-bound"


def test_device_verdict_gc_and_loop_work_count_only_where_the_device_idled():
    assert judge_device(1.0, 0.3, 0.0, 0.0, 0.3, 0.3).kind == "gc-bound"
    assert judge_device(1.0, 0.0, 0.0, 0.0, 0.3, 0.3).kind == "fine"  # GC hidden behind device work
    assert judge_device(1.0, 0.3, 0.0, 0.0, 0.0, 0.3).kind == "loop-bound"


def test_fake_timeline_is_a_device_timeline(clock):
    assert isinstance(FakeTimeline(FakeDevice(clock)), DeviceTimeline)


# -- the listener with a fake device ---------------------------------------------------------------


def make(clock, frequency=5, **kw):
    device = FakeDevice(clock, max_ahead_s=1.0)
    timeline = FakeTimeline(device)
    sink = MemorySink()
    kw.setdefault("verdict", False)
    listener = PerformanceListener(
        frequency, sinks=[sink], clock=clock, history=None, report_hardware=False, sink_thread=False, **kw
    )
    listener.set_timeline(timeline)
    listener.start()
    return listener, device, timeline, sink


def iterate(listener, device, timeline, clock, *, load_s, work_s, sync=False, score=None):
    """One iteration: the loader's wait on the host, a forward that launches the step's device work,
    the step, and optionally the user's ``loss.item()``."""
    clock.advance(load_s)
    timeline.begin()
    device.launch(work_s)
    record = listener.record_iteration(samples=8, etl=load_s, score=score)
    if sync:
        device.synchronize()
    return record


def test_records_wait_for_the_device_and_cover_their_iterations(clock):
    listener, device, timeline, sink = make(clock, 5)
    timeline.completed_up_to = -1.0  # the device has not finished anything yet
    for _ in range(12):
        assert iterate(listener, device, timeline, clock, load_s=1 * MS, work_s=10 * MS) is None
    assert list(sink.records) == []
    timeline.completed_up_to = device.busy_until  # everything done: the next iteration builds both
    record = iterate(listener, device, timeline, clock, load_s=1 * MS, work_s=10 * MS)
    assert [(r.first_iteration, r.iteration) for r in sink.records] == [(1, 5), (6, 10)]
    assert record is sink.records[-1]
    assert [r.window_iterations for r in sink.records] == [5, 5]
    assert sink.records[1].iteration_ms == pytest.approx(10.0)
    assert timeline.calls["wait"] == 0 and device.user_syncs == 0


def test_a_window_arrives_once_its_last_event_completed_not_before(clock):
    listener, device, timeline, sink = make(clock, 4)
    timeline.completed_up_to = -1.0
    for _ in range(4):
        iterate(listener, device, timeline, clock, load_s=0.0, work_s=10 * MS)
    fourth_end = timeline._ended[3][1]
    timeline.completed_up_to = fourth_end - 1e-9
    iterate(listener, device, timeline, clock, load_s=0.0, work_s=10 * MS)
    assert list(sink.records) == []
    timeline.completed_up_to = fourth_end
    iterate(listener, device, timeline, clock, load_s=0.0, work_s=10 * MS)
    assert [(r.first_iteration, r.iteration) for r in sink.records] == [(1, 4)]


def test_non_report_iterations_do_not_poll_once_nothing_waits(clock):
    listener, device, timeline, sink = make(clock, 10)
    built_at = []
    for i in range(1, 31):
        if iterate(listener, device, timeline, clock, load_s=2 * MS, work_s=1 * MS) is not None:
            built_at.append(i)
    # the device keeps up: the step's end event of a report iteration completes during the next
    # iteration, whose call builds the record; the other iterations do not poll
    assert [r.iteration for r in sink.records] == [10, 20]
    assert built_at == [11, 21]
    assert timeline.calls["ready"] == 2 * 2 + 1
    assert timeline.calls["end"] == 30


def test_flush_waits_once_and_builds_every_waiting_window(clock):
    listener, device, timeline, sink = make(clock, 3)
    timeline.completed_up_to = -1.0
    for _ in range(7):
        iterate(listener, device, timeline, clock, load_s=0.0, work_s=10 * MS)
    assert listener.flush() is sink.records[-1]
    assert [(r.first_iteration, r.iteration) for r in sink.records] == [(1, 3), (4, 6), (7, 7)]
    assert timeline.calls["wait"] == 1
    listener.close()
    assert timeline.calls["wait"] == 1


def test_the_score_is_staged_on_the_report_iteration_and_read_when_the_window_is_built(clock):
    listener, device, timeline, sink = make(clock, 2, report_score=True)
    for i in range(4):
        iterate(listener, device, timeline, clock, load_s=2 * MS, work_s=1 * MS, score=float(i))
    listener.flush()
    assert timeline.staged == [1.0, 3.0]
    assert [r.score for r in sink.records] == [1.0, 3.0]


def test_excluded_host_time_is_not_device_idle(clock):
    listener, device, timeline, sink = make(clock, 2)
    iterate(listener, device, timeline, clock, load_s=0.0, work_s=10 * MS, sync=True)
    device.launch(40 * MS)  # validation on the device
    device.synchronize()
    listener.exclude(40 * MS)
    iterate(listener, device, timeline, clock, load_s=0.0, work_s=10 * MS, sync=True)
    listener.flush()
    (record,) = sink.records
    assert record.device_idle_ms == pytest.approx(0.0, abs=1e-9)
    assert record.iteration_ms == pytest.approx(10.0)  # device time, validation left out


def test_set_timeline_refuses_what_is_not_a_timeline(clock):
    listener = PerformanceListener(2, sinks=[], clock=clock)
    with pytest.raises(TypeError, match=r"timeline must be a DeviceTimeline \(missing start, begin"):
        listener.set_timeline(5)


def test_device_window_is_a_frozen_slotted_value_and_empty_idles_read_zero():
    import dataclasses

    from trainperf.records._timeline import DeviceWindow

    empty = DeviceWindow(window_s=0.0, idles=(), durations=())
    assert (empty.idle_s, empty.idle_max_s, empty.idle_mean_s) == (0, 0.0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        empty.window_s = 1.0  # type: ignore[misc]
    assert not hasattr(empty, "__dict__")


def test_data_idle_needs_exactly_one_wait_per_iteration():
    w = device_window([(0.002, 0.035), (0.035, 0.068)])
    with pytest.raises(ValueError, match="one data wait per iteration"):
        w.data_idle_s([0.001, 0.002, 0.003])
    assert w.data_idle_s([0.001, 0.005]) == 0.001  # the first's 2 ms idle held 1 ms of data wait


def test_a_forward_queued_before_the_previous_step_ended_leaves_no_idle_time():
    w = device_window([(0.0, 0.03), (0.02, 0.06)])
    assert w.idles == (0.0, 0.0) and w.durations == (0.03, 0.03)


def test_speedup_of_windows_of_any_length():
    from trainperf.records._timeline import speedup

    assert speedup(0.5, 0.25) == 2.0 and speedup(1.0, 0.46) == 1.0 / 0.54
    assert speedup(1.0, -0.5) == 1.0  # nothing to remove
    assert speedup(0.0, 0.0) is None and speedup(-1.0, 0.0) is None and speedup(1.0, 1.0) is None


def test_long_windows_check_their_data_waits_by_count_and_more_removable_than_the_window_is_none():
    from trainperf.records._timeline import speedup

    w = device_window([(0.001 * k + 0.0005, 0.001 * (k + 1)) for k in range(300)])
    assert w.data_idle_s([0.0] * 300) == 0.0
    with pytest.raises(ValueError, match=r"one data wait per iteration \(300\), got 299"):
        w.data_idle_s([0.0] * 299)
    assert speedup(1.0, 1.5) is None
