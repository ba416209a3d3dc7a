"""The clock that stands still while trainperf works, with plain numbers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from trainperf.core._own_time import Ledger, UserClock, acquire, ledgers_in_use, release


class Raw:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_user_clock_leaves_out_own_time_and_the_time_left_out():
    raw, own, offset = Raw(), Ledger(), Ledger()
    clock = UserClock(raw, own, offset)
    assert clock.read() == 100.0
    own.add(0.5, at=100.0)
    offset.total += 2.0
    raw.now = 110.0
    assert clock.read() == pytest.approx(107.5)
    assert clock.shift == pytest.approx(2.5)
    assert clock.at(105.0) == pytest.approx(105.0 - 0.5 - 2.0)  # after the report: its time is out
    assert clock.at(99.0) == pytest.approx(99.0 - 0.0 - 2.0)  # before it: not


def test_moving_to_another_threads_ledger_keeps_the_clock_where_it_was():
    raw, first, second, offset = Raw(), Ledger(), Ledger(), Ledger()
    first.total, second.total = 5.0, 2.0
    clock = UserClock(raw, first, offset)
    before = clock.read()
    clock.move(second)
    assert clock.read() == pytest.approx(before)
    second.add(1.0, at=100.0)  # own time on the new thread stops it
    assert clock.read() == pytest.approx(before - 1.0)
    first.add(1.0, at=100.0)  # the old thread's no longer does
    assert clock.read() == pytest.approx(before - 1.0)


def test_ledgers_are_counted_by_clock_and_thread_and_released():
    raw = Raw()
    before = ledgers_in_use()
    key, ledger = acquire(raw, 1)
    key2, ledger2 = acquire(raw, 1)
    key3, ledger3 = acquire(raw, 2)
    assert ledger is ledger2 and ledger is not ledger3 and key == key2 != key3
    assert ledgers_in_use() == before + 2
    release(key)
    assert ledgers_in_use() == before + 2
    release(key2)
    release(key3)
    assert ledgers_in_use() == before
    release(key3)  # a second release is harmless
    assert ledgers_in_use() == before


def test_a_ledger_remembers_its_latest_additions_only():
    ledger = Ledger()
    for k in range(100):
        ledger.add(1.0, at=float(k))
    assert ledger.total == 100.0
    assert ledger.total_at(99.5) == 100.0
    assert ledger.total_at(50.5) == 51.0
    assert ledger.total_at(-1.0) == 36.0  # older than the 64 kept: the oldest kept total


def _finishes(target: Callable[[], None], seconds: float = 10.0) -> bool:
    """Runs ``target`` on a daemon thread: whether it finished (a deadlock does not hang the suite)."""
    done = threading.Event()

    def run() -> None:
        target()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds)


def test_a_release_while_the_ledgers_are_locked_does_not_wait_and_is_counted_later():
    from trainperf.core import _own_time

    def clock() -> float:
        return 0.0

    key, _ = _own_time.acquire(clock, 1)
    assert key in _own_time._ledgers

    def release_inside_acquire() -> None:  # what a finalizer run by a collection inside acquire() does
        with _own_time._lock:
            _own_time.release(key)
            assert key in _own_time._ledgers  # not counted yet: the lock is held

    assert _finishes(release_inside_acquire)
    _own_time.ledgers_in_use()  # whoever takes the lock next counts it
    assert key not in _own_time._ledgers


def test_a_listener_collected_while_another_is_built_on_its_clock_does_not_deadlock():
    import gc

    from trainperf import PerformanceListener
    from trainperf.core._own_time import ledgers_in_use

    def clock() -> float:
        return 0.0

    gc.collect()  # listeners other tests dropped are released now, not during this test
    before = ledgers_in_use()

    def build_while_collecting() -> None:
        thresholds = gc.get_threshold()
        gc.collect()
        for _ in range(20):
            old = PerformanceListener(frequency=1, clock=clock)
            old.cycle = old  # type: ignore[attr-defined]  # only a collection frees it
            del old
            gc.set_threshold(1)  # every allocation may collect, inside acquire() too
            try:
                PerformanceListener(frequency=1, clock=clock).close()
            finally:
                gc.set_threshold(*thresholds)
        gc.collect()

    assert _finishes(build_while_collecting, 60.0)
    assert ledgers_in_use() == before


def test_own_time_that_ended_at_a_reading_is_before_it_and_what_ended_later_is_not():
    ledger = Ledger()
    ledger.add(0.5, at=5.0)
    ledger.add(0.25, at=7.0)
    assert [ledger.total_at(raw) for raw in (4.0, 5.0, 6.5, 7.0, 9.0)] == [0.0, 0.5, 0.5, 0.75, 0.75]
    own, offset = Ledger(), Ledger()
    user = UserClock(Raw(), own, offset)
    own.add(2.0, at=100.0)
    assert (user.at(99.5), user.at(100.0)) == (99.5, 98.0)


def test_a_ledger_released_twice_does_not_hold_up_the_releases_queued_after_it():
    """A finalizer and ``close`` both giving a key back: the second release finds no ledger, and the
    releases queued behind it (the lock was held) are counted all the same."""
    from trainperf.core import _own_time

    before = ledgers_in_use()
    clocks = Raw(), Raw()  # kept: a key is the clock's id
    first, _ = acquire(clocks[0], 1)
    second, _ = acquire(clocks[1], 1)
    release(first)
    assert ledgers_in_use() == before + 1
    with _own_time._lock:  # held by someone else: releases queue up
        release(first)
        release(second)
    assert ledgers_in_use() == before



def test_a_listeners_own_time_stops_its_clock_and_counts_as_the_windows_overhead():
    from trainperf.core._own_time import OwnTime

    raw = Raw()
    own = OwnTime(raw)
    read = own.clock.read
    raw.now = 101.0
    began = own.begin()
    assert own.clock.own.busy == 1
    raw.now = 101.25
    assert own.end(began) == 0.25 and own.clock.own.busy == 0
    assert read() == 101.0 and own.overhead_s == 0.25
    began = own.begin()
    raw.now = 101.75
    own.end(began, new_window=True)  # the report that closed a window: the next one's overhead starts here
    assert read() == 101.0 and own.overhead_s == 0.5
    raw.now = 102.0
    own.leave_out(0.125)
    assert read() == 101.125
    began = own.begin()
    raw.now = 252.5  # a long piece of own work: 150.5 s
    assert own.end(began) == 150.5 and read() == 101.125
    own.close()


def test_own_time_moves_to_the_thread_that_trains_without_a_jump_and_gives_its_ledgers_back():
    from trainperf.core._own_time import OwnTime

    before = ledgers_in_use()
    raw = Raw()
    own = OwnTime(raw)
    own.end(own.begin() - 0.5)  # half a second of own time on the building thread
    assert own.clock.read() == 99.5
    moved: list[float] = []

    def train() -> None:
        own.move_to_this_thread()
        moved.append(own.clock.read())
        own.end(own.begin() - 0.25)
        moved.append(own.clock.read())

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    assert moved == [99.5, 99.25]
    assert ledgers_in_use() == before + 1  # the building thread's was given back
    own.close()
    own.close()
    assert ledgers_in_use() == before
    dropped = OwnTime(Raw())
    assert ledgers_in_use() == before + 1
    del dropped
    assert ledgers_in_use() == before


def test_a_ledger_shared_by_three_listeners_stays_until_the_last_gives_it_back():
    before = ledgers_in_use()
    clock = Raw()
    keys = [acquire(clock, 7)[0] for _ in range(3)]
    assert len(set(keys)) == 1 and ledgers_in_use() == before + 1
    release(keys[0])
    release(keys[1])
    assert ledgers_in_use() == before + 1
    release(keys[2])
    assert ledgers_in_use() == before


def test_after_a_move_the_old_threads_own_time_no_longer_stops_the_clock_either_way():
    """Moved to another thread and back: each time, trainperf's work on the thread left behind is
    not this listener's (thread ids compare both ways across the two moves)."""
    from trainperf.core._own_time import OwnTime

    raw = Raw()
    own = OwnTime(raw)
    main = threading.get_ident()
    readings: list[float] = []

    def elsewhere() -> None:
        own.move_to_this_thread()
        key, left_behind = acquire(raw, main)  # the main thread's ledger, shared with other listeners
        left_behind.add(1.0, raw())
        readings.append(own.clock.read())
        release(key)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert readings == [100.0]
    other = thread.ident
    own.move_to_this_thread()  # back on the main thread
    key, left_behind = acquire(raw, other)
    left_behind.add(1.0, raw())
    assert own.clock.read() == 100.0
    release(key)
    own.close()


def test_own_work_may_begin_at_an_earlier_reading_and_the_call_ends_as_own_time():
    from trainperf.core._own_time import OwnTime

    raw = Raw()
    own = OwnTime(raw)
    read = own.clock.read
    raw.now = 101.0  # the reading that ended the user's iteration
    raw.now = 101.5  # trainperf checked its arguments, took its lock
    began = own.begin(at=101.0)
    raw.now = 102.0
    own.end(began, new_window=True)
    assert read() == 101.0 and own.stood_at == 101.0
    raw.now = 102.25  # leaving the call: frames, the lock
    own.finish(101.0)
    assert read() == 101.0 and own.overhead_s == pytest.approx(1.25)
    raw.now = 103.0
    own.finish(102.5)  # a call with no own work in it adds nothing, even after an earlier one
    assert read() == 101.75
    own.close()


def test_a_finish_never_takes_the_time_since_work_that_ended_before_the_call_began():
    from trainperf.core._own_time import OwnTime

    raw = Raw()
    own = OwnTime(raw)
    own.end(own.begin())  # a flush between reports, not followed by a finish
    raw.now = 110.0  # the user trains
    own.finish(109.0)
    assert own.clock.read() == 110.0
    own.close()


def _listener(clock, **options):
    from trainperf import PerformanceListener

    return PerformanceListener(1, clock=clock, sinks=[], sink_thread=False, report_hardware=False, **options)


def test_the_time_to_say_a_warning_after_a_report_is_not_in_the_next_window(clock):
    import warnings

    listener = _listener(clock)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda *args, **kwargs: clock.advance(0.005)  # formatting, the source line
        listener.record_iteration()  # no samples: the first report says so in a warning
        clock.advance(0.010)
        record = listener.record_iteration()
    assert record is not None and record.iteration_ms == pytest.approx(10.0)
    listener.close()


def test_a_window_ends_where_the_call_that_reports_it_begins(clock):
    class CostlyCount(int):
        """A sample count whose check costs time: the call's work before its first clock reading."""

        def __ge__(self, other):
            clock.advance(0.004)
            return int(self) >= other

    listener = _listener(clock, verdict=False)
    listener.record_iteration(samples=8)
    records = []
    for _ in range(3):
        clock.advance(0.010)
        records.append(listener.record_iteration(samples=CostlyCount(8)))
    assert [r.iteration_ms for r in records] == [pytest.approx(10.0)] * 3
    assert all(r.overhead_ms == pytest.approx(4.0) for r in records[1:])  # the check: trainperf's, said as such
    listener.close()
