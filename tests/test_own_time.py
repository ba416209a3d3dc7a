"""The clock that stands still while trainperf works, with plain numbers."""

from __future__ import annotations

import pytest

from trainperf._own_time import Ledger, UserClock, acquire, ledgers_in_use, release


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
