"""How the writer thread hands records over: several at once to a sink with ``write_many`` (one
``write``), in order, never across a task queued between them; a failing batch costs that sink those
records only; it wakes when the training thread is about to wait with records queued; and it gives
the interpreter back within a slice, where Python alone would keep it for up to 5 ms."""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Sequence
from unittest import mock

import pytest

from trainperf import PerformanceListener, PerformanceRecord, SinkError
from trainperf.core import _emit
from trainperf.core._emit import Emitter
from trainperf.sinks import JsonLinesSink


def record(i: int) -> PerformanceRecord:
    return PerformanceRecord(iteration=i, window_iterations=1, window_s=0.01, warmup=False, timestamp=float(i))


class Batches:
    """A sink that notes each batch it is handed, and each record handed alone."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.alone: list[int] = []
        self.fail_on = fail_on

    def __call__(self, r: PerformanceRecord) -> None:
        self.alone.append(r.iteration)

    def write_many(self, records: Sequence[PerformanceRecord]) -> None:
        its = [r.iteration for r in records]
        if self.fail_on in its:
            raise OSError("disk full")
        self.batches.append(its)


def _queue_then_write(emitter: Emitter, items: list[object]) -> None:
    """Queue ``items`` while the writer sleeps, then let it deliver them in one wake."""
    with mock.patch.object(_emit, "WRITE_EVERY_S", 3600.0):
        for item in items:
            if isinstance(item, PerformanceRecord):
                emitter.deliver(item)
            else:
                emitter.submit(item)  # type: ignore[arg-type]
        assert emitter.flush(10.0)


def test_records_queued_together_reach_a_batch_sink_at_once_in_order_and_others_one_by_one():
    batched, plain = Batches(), mock.Mock()  # a mock answers every name: it still gets records one by one
    emitter = Emitter([batched, plain])
    emitter.deliver(record(0))  # starts the writer, which then sleeps
    assert emitter.flush(10.0)
    _queue_then_write(emitter, [record(i) for i in range(1, 21)])
    assert [i for batch in batched.batches for i in batch] == list(range(21)) and not batched.alone
    assert max(map(len, batched.batches)) > 1  # several at once
    assert [c.args[0].iteration for c in plain.call_args_list] == list(range(21))
    assert not plain.write_many.called
    emitter.close()


def test_a_task_queued_between_records_splits_their_batches_and_runs_between_them():
    seen: list[object] = []

    class Sink(Batches):
        def write_many(self, records: Sequence[PerformanceRecord]) -> None:
            seen.append([r.iteration for r in records])

    emitter = Emitter([Sink()])
    emitter.deliver(record(0))
    assert emitter.flush(10.0)
    _queue_then_write(emitter, [record(1), record(2), lambda: seen.append("task"), record(3), record(4)])
    assert seen[0] == [0]
    at = seen.index("task")
    assert [i for batch in seen[1:at] for i in batch] == [1, 2]  # type: ignore[union-attr]
    assert [i for batch in seen[at + 1:] for i in batch] == [3, 4]  # type: ignore[union-attr]
    emitter.close()


def test_a_batch_that_fails_costs_that_sink_those_records_and_the_other_sinks_nothing():
    failing, healthy = Batches(fail_on=5), Batches()
    said: list[str] = []
    emitter = Emitter([failing, healthy], say=said.append)
    emitter.deliver(record(0))
    assert emitter.flush(10.0)
    _queue_then_write(emitter, [record(i) for i in range(1, 11)])
    emitter.deliver(record(11))  # the failure is said on the caller's thread, at its next call
    assert emitter.flush(10.0)
    got = [i for batch in failing.batches for i in batch]
    lost = sorted(set(range(12)) - set(got))
    assert 5 in lost and lost == list(range(lost[0], lost[-1] + 1))  # one batch's records, 5 among them
    assert [i for batch in healthy.batches for i in batch] == list(range(12))
    assert len(said) == 1 and "raised and was skipped" in said[0] and "disk full" in said[0]
    emitter.close()


def test_the_writer_wakes_when_the_training_thread_is_about_to_wait_with_records_queued():
    sink = Batches()
    emitter = Emitter([sink])
    with mock.patch.object(_emit, "WRITE_EVERY_S", 3600.0):
        emitter.deliver(record(0))
        assert emitter.flush(10.0)
        for i in range(1, _emit.NUDGE_AT):
            emitter.deliver(record(i))
        emitter.nudge()  # fewer than NUDGE_AT queued: the writer keeps sleeping
        time.sleep(0.2)
        assert emitter.pending == _emit.NUDGE_AT - 1
        emitter.deliver(record(_emit.NUDGE_AT))
        emitter.nudge()
        deadline = time.monotonic() + 10
        while emitter.pending and time.monotonic() < deadline:
            time.sleep(0.005)
        assert emitter.pending == 0
        assert [i for batch in sink.batches for i in batch] == list(range(_emit.NUDGE_AT + 1))
    emitter.close()


@pytest.mark.parametrize(("fetch_s", "told"), [(0.002, 4), (0.0001, 1)], ids=["a loader that waits", "batches ready"])
def test_a_listener_is_told_before_a_timed_loaders_fetch_when_the_last_one_waited(fetch_s, told):
    torch = pytest.importorskip("torch")
    from trainperf.torch import timed

    now = [0.0]

    def clock() -> float:  # each reading moves on by fetch_s: a fetch, between two readings, takes that long
        now[0] += fetch_s
        return now[0]

    listener = PerformanceListener(1, sinks=[], report_hardware=False, clock=clock)
    with mock.patch.object(listener._emitter, "nudge") as nudge:
        for _ in timed([torch.zeros(2)] * 3, listener):
            assert nudge.call_count >= 1  # the first fetch is always said
            listener.record_iteration(samples=2)
    # three batches and the fetch that ended the loader; ready batches: the first fetch only
    assert nudge.call_count == told
    listener.close()


def _pauses(work_in_other_thread, seconds: float) -> tuple[list[float], float]:
    """The pauses longer than 0.3 ms of a thread reading the clock in a loop for ``seconds`` while
    ``work_in_other_thread`` runs, and how long it read."""
    pauses: list[float] = []
    stop = threading.Event()
    thread = threading.Thread(target=work_in_other_thread, args=(stop,), daemon=True)
    thread.start()
    clock = time.perf_counter
    began = last = clock()
    while (now := clock()) < began + seconds:
        if now - last > 0.0003:
            pauses.append(now - last)
        last = now
    stop.set()
    thread.join(10)
    return pauses, last - began


def _longest_pauses(work_in_writer, seconds: float = 0.6) -> float:
    """The median of the training thread's pauses while ``work_in_writer`` runs on another thread:
    how long that thread keeps the interpreter once it has it."""
    pauses, _ = _pauses(work_in_writer, seconds)
    return statistics.median(pauses) if pauses else 0.0


def _paused_share(work_in_other_thread, seconds: float = 0.3) -> float:
    """The share of ``seconds`` in which a thread reading the clock was paused while
    ``work_in_other_thread`` ran."""
    pauses, took = _pauses(work_in_other_thread, seconds)
    return sum(pauses) / took


def _python_work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.realtime
def test_the_writer_gives_the_interpreter_back_within_a_slice_where_python_would_keep_it_5_ms():
    """Against a stopwatch in the same run: a thread doing the same Python work without slices."""
    per_record = 0.0002

    class Busy:
        def __call__(self, r: PerformanceRecord) -> None:
            _python_work(per_record)

    def through_the_writer(stop: threading.Event) -> None:
        emitter = Emitter([Busy()], say=lambda message: None)
        with mock.patch.object(_emit, "WRITE_EVERY_S", 0.001):
            i = 0
            while not stop.is_set():
                emitter.deliver(record(i))
                i += 1
                if emitter.pending > 200:
                    time.sleep(0.01)
            emitter.close(0.0)

    def plain_thread(stop: threading.Event) -> None:
        while not stop.is_set():
            _python_work(per_record)

    alone = _paused_share(lambda stop: stop.wait(30))
    if alone > 0.05:  # the stopwatch alone is paused by the machine's scheduler, not by the interpreter
        pytest.skip(f"the machine pauses a thread {alone:.0%} of the time on its own: it hides the interpreter's "
                    "switching (the deterministic test of the slices holds the rule)")
    plain = _longest_pauses(plain_thread)
    ours = _longest_pauses(through_the_writer)
    assert plain > 0.4 * sys.getswitchinterval()  # the stopwatch shows Python's switch interval
    assert ours < plain / 2, (ours, plain)


class _FakeTime:
    """The writer's clock and sleep: each record's work moves the clock on by ``work_s``."""

    def __init__(self, work_s: float) -> None:
        self.now, self.work_s = 0.0, work_s
        self.yields: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.yields.append(self.now)
        self.now += seconds

    def monotonic(self) -> float:
        return time.monotonic()


def test_the_writer_steps_aside_after_each_slice_of_work_and_hands_over_as_many_records_as_fit_one():
    fake = _FakeTime(work_s=0.0003)
    batches: list[int] = []

    class Timed(Batches):
        def write_many(self, records: Sequence[PerformanceRecord]) -> None:
            batches.append(len(records))
            fake.now += fake.work_s * len(records)

    emitter = Emitter([Timed()])
    with mock.patch.object(_emit, "time", fake), mock.patch.object(_emit, "WRITE_EVERY_S", 3600.0):
        for i in range(100):  # the writer starts with the fake clock, and sleeps until flush wakes it
            emitter.deliver(record(i))
        assert emitter.flush(10.0)
    # 100 records of 0.3 ms: a step aside after every slice of work, each slice at most one batch late
    gaps = [b - a for a, b in zip([0.0, *fake.yields], fake.yields, strict=False)]
    assert len(fake.yields) >= 100 * fake.work_s / (_emit.SLICE_S + fake.work_s * max(batches)) - 1
    assert all(gap <= _emit.SLICE_S + _emit.YIELD_S + fake.work_s * max(batches) + 1e-9 for gap in gaps), gaps
    assert max(batches) == int(_emit.SLICE_S / fake.work_s)  # as many records as fit a slice, once measured
    emitter.close()


def test_the_json_lines_sink_writes_a_batch_as_its_records_one_by_one(tmp_path):
    records = [record(i) for i in range(10)]
    with JsonLinesSink(tmp_path / "one.jsonl") as one, JsonLinesSink(tmp_path / "many.jsonl") as many:
        for r in records:
            one(r)
        many.write_many(records[:3])
        many.write_many([])
        many.write_many(records[3:])
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "many.jsonl").read_bytes()
    closed = JsonLinesSink(tmp_path / "x.jsonl")
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        closed.write_many(records)


def test_sink_errors_are_still_said_as_sink_errors(tmp_path):
    failing = Batches(fail_on=1)
    listener = PerformanceListener(1, sinks=[failing], report_hardware=False)
    with pytest.warns(SinkError):
        for _ in range(3):
            listener.record_iteration(samples=1)
        listener.flush()
        listener.record_iteration(samples=1)
    listener.close()
