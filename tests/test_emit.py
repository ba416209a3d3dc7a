"""The writer thread that runs the sinks: order, a hanging or failing sink, a full queue, flush and
close, sinks that stay on the training thread, forked children and interpreter exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

from trainperf import PerformanceListener, PerformanceRecord, SinkError
from trainperf.core import _emit
from trainperf.core._emit import Emitter


def record(i: int) -> PerformanceRecord:
    return PerformanceRecord(iteration=i, window_iterations=1, window_s=0.01, warmup=False, timestamp=float(i))


class Gate:
    """A sink that blocks until opened, noting the thread it ran on."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.got: list[int] = []
        self.threads: set[str] = set()

    def __call__(self, r: PerformanceRecord) -> None:
        self.threads.add(threading.current_thread().name)
        self.open.wait(30)
        self.got.append(r.iteration)


def test_room_in_the_queue_is_what_was_put_less_what_was_done():
    """Nine records delivered and done, then the sink hangs: three more fit a queue of three (the
    one in the sink counts), a fourth is dropped."""
    gate = Gate()
    gate.open.set()
    emitter = Emitter([gate], queue_size=3, say=lambda m: None)
    for i in range(1, 10):
        emitter.deliver(record(i))
        assert emitter.flush(10.0)
    gate.open.clear()
    for i in range(10, 13):
        emitter.deliver(record(i))
    assert emitter.dropped == 0 and emitter.pending == 3
    emitter.deliver(record(13))  # a fourth and a fifth: no room
    emitter.deliver(record(14))
    assert emitter.dropped == 2 and emitter.pending == 3
    gate.open.set()
    assert emitter.flush(10.0) and gate.got == list(range(1, 13))
    emitter.close()


def test_a_flush_is_woken_by_the_writer_not_by_its_polling_timeout():
    """20 records, each flushed at once: the writer wakes the flush when it is done, so the round
    trips take a few milliseconds, far less than 20 of the flush's 50 ms polls."""
    emitter = Emitter([lambda r: None])
    emitter.deliver(record(0))
    emitter.flush(10.0)  # the writer thread is up
    began = time.perf_counter()
    for i in range(1, 21):
        emitter.deliver(record(i))
        assert emitter.flush(10.0)
    assert time.perf_counter() - began < 0.5
    emitter.close()


def test_the_writer_is_not_woken_per_record_but_delivers_all_queued_at_its_next_wake(monkeypatch):
    """With the writer's period set to a minute, records wait in the queue (a record does not wake
    the writer: waking it per report hands the interpreter over twice per report); a flush wakes it
    and it delivers everything queued, in order, on its own thread, in one burst."""
    monkeypatch.setattr(_emit, "WRITE_EVERY_S", 60.0)
    seen: list[tuple[int, str]] = []
    emitter = Emitter([lambda r: seen.append((r.iteration, threading.current_thread().name))])
    emitter.deliver(record(0))
    assert emitter.flush(10.0) and [i for i, _ in seen] == [0]  # the writer is up and asleep again
    for i in range(1, 6):
        emitter.deliver(record(i))
    time.sleep(0.2)
    assert [i for i, _ in seen] == [0] and emitter.pending == 5
    assert emitter.flush(10.0)
    assert seen == [(i, "trainperf-writer") for i in range(6)]
    emitter.close()


def test_without_a_flush_records_reach_the_sinks_within_the_writers_period():
    """Someone watching a sink's file sees each record about one period after its report."""
    got = threading.Event()
    emitter = Emitter([lambda r: got.set()])
    began = time.perf_counter()
    emitter.deliver(record(1))
    assert got.wait(10.0)
    assert time.perf_counter() - began < 10 * _emit.WRITE_EVERY_S + 1.0
    emitter.close()


def test_a_task_that_raises_is_said_and_the_writer_goes_on():
    got: list[int] = []
    said: list[str] = []
    emitter = Emitter([lambda r: got.append(r.iteration)], say=said.append)

    def spans():
        raise OSError("disk full")

    emitter.submit(spans)
    emitter.deliver(record(1))
    assert emitter.flush(10.0) and got == [1]
    assert len(said) == 1 and said[0].startswith("trainperf: writing") and "OSError('disk full')" in said[0]
    emitter.close()


def test_without_a_say_function_a_hanging_sink_is_one_sinkerror_warning_with_one_prefix():
    gate = Gate()
    emitter = Emitter([gate])
    emitter.deliver(record(1))
    with pytest.warns(SinkError) as caught:
        emitter.flush(0.05)
    assert [str(w.message) for w in caught] == [
        "trainperf: a sink did not finish within 0.05 s: 1 record(s) not yet delivered (a hanging sink?)"]
    assert caught[0].filename == __file__  # said at the caller's line
    gate.open.set()
    emitter.close()


def test_records_reach_every_sink_in_order_on_the_writer_thread():
    # each sink has every record in order; the writer hands a few records to one sink, then the same
    # ones to the next (the order across sinks within such a batch is not kept)
    seen: list[tuple[str, int]] = []
    threads: set[str] = set()

    def first(r):
        threads.add(threading.current_thread().name)
        seen.append(("a", r.iteration))

    emitter = Emitter([first, lambda r: seen.append(("b", r.iteration))])
    for i in range(1, 101):
        emitter.deliver(record(i))
    assert emitter.flush(10.0)
    for name in ("a", "b"):
        assert [i for s, i in seen if s == name] == list(range(1, 101))
    assert threads == {"trainperf-writer"} and emitter.pending == 0
    emitter.close()


def test_a_hanging_sink_does_not_block_delivery_and_close_waits_only_its_timeout():
    gate = Gate()
    emitter = Emitter([gate], say=lambda m: said.append(m))
    said: list[str] = []
    started = time.perf_counter()
    for i in range(1, 51):
        emitter.deliver(record(i))
    assert time.perf_counter() - started < 1.0  # queued, not run
    assert emitter.pending == 50
    assert not emitter.flush(0.2)
    assert said == ["a sink did not finish within 0.2 s: 50 record(s) not yet delivered (a hanging sink?)"]
    began = time.perf_counter()
    emitter.close(0.2)
    assert time.perf_counter() - began < 5.0
    gate.open.set()


def test_a_full_queue_drops_the_newest_counts_them_and_says_so_once():
    gate = Gate()
    said: list[str] = []
    emitter = Emitter([gate], queue_size=3, say=said.append)
    for i in range(1, 11):
        emitter.deliver(record(i))
    # one record is in the sink, three wait in the queue, the other six were dropped
    deadline = time.monotonic() + 10
    while emitter.dropped < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert emitter.dropped in (6, 7)  # 7 when the writer had not taken the first yet
    assert len(said) == 1 and said[0].startswith("the sinks fall behind: the writer's queue holds 3 records")
    gate.open.set()
    assert emitter.flush(10.0)
    got = gate.got  # the first three, then what found room as the writer took one (in order)
    assert got[:3] == [1, 2, 3] and got == sorted(got) and len(got) == 10 - emitter.dropped
    emitter.close()


def test_a_failing_sink_is_said_once_on_the_callers_thread_and_the_others_get_every_record():
    kept: list[int] = []
    said: list[tuple[str, str]] = []

    def broken(r):
        raise ValueError("disk full")

    emitter = Emitter([broken, lambda r: kept.append(r.iteration)],
                      say=lambda m: said.append((threading.current_thread().name, m)))
    for i in range(1, 6):
        emitter.deliver(record(i))
    emitter.flush(10.0)
    assert kept == [1, 2, 3, 4, 5]
    assert len(said) == 1 and said[0][0] == threading.current_thread().name
    assert "raised and was skipped" in said[0][1] and "disk full" in said[0][1]
    emitter.close()


def test_a_sink_that_asks_for_the_training_thread_runs_inside_deliver():
    class Live:
        on_training_thread = True

        def __init__(self):
            self.threads = set()

        def __call__(self, r):
            self.threads.add(threading.current_thread().name)

    live, other = Live(), Gate()
    other.open.set()
    emitter = Emitter([live, other])
    emitter.deliver(record(1))
    assert live.threads == {threading.current_thread().name}  # already ran
    emitter.flush(10.0)
    assert other.threads == {"trainperf-writer"} and other.got == [1]
    emitter.close()


def test_a_sink_added_later_that_asks_for_the_training_thread_runs_inside_deliver():
    class Live:
        on_training_thread = True

        def __init__(self):
            self.got = []

        def __call__(self, r):
            self.got.append((threading.current_thread().name, r.iteration))

    gate = Gate()
    emitter = Emitter([gate], say=lambda m: None)
    emitter.deliver(record(1))
    live = Live()
    emitter.sinks.append(live)
    emitter.deliver(record(2))
    assert live.got == [(threading.current_thread().name, 2)]  # at once, though the writer is blocked
    emitter.sinks.remove(live)
    emitter.deliver(record(3))
    gate.open.set()
    emitter.flush(10.0)
    assert live.got == [(threading.current_thread().name, 2)] and gate.got == [1, 2, 3]
    emitter.close()


def test_tasks_run_in_order_with_the_records():
    order: list[object] = []
    emitter = Emitter([lambda r: order.append(r.iteration)])
    emitter.deliver(record(1))
    emitter.submit(lambda: order.append("spans"))
    emitter.deliver(record(2))
    emitter.flush(10.0)
    assert order == [1, "spans", 2]
    emitter.close()


def test_inline_and_strict_run_on_the_callers_thread():
    got: list[int] = []
    inline = Emitter([lambda r: got.append(r.iteration)], inline=True)
    inline.deliver(record(1))
    assert got == [1]

    def broken(r):
        raise KeyError("x")

    strict = Emitter([broken], strict=True)
    assert strict.inline
    with pytest.raises(KeyError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strict.deliver(record(1))


def test_flush_waits_for_a_slow_sink_to_finish_within_its_timeout():
    def slow(r):
        time.sleep(0.02)

    emitter = Emitter([slow])
    for i in range(1, 6):
        emitter.deliver(record(i))
    assert emitter.flush(0.9) and emitter.pending == 0  # 0.1 s of writing, well inside 0.9 s
    emitter.close()


def test_flush_over_a_hanging_sink_gives_up_at_its_timeout_without_spinning():
    """It waits the whole timeout (a stopwatch), asleep: the flushing thread uses almost no CPU."""
    gate = Gate()
    emitter = Emitter([gate], say=lambda m: None)
    emitter.deliver(record(1))
    began, cpu = time.perf_counter(), time.thread_time()
    assert not emitter.flush(0.3)
    waited, used = time.perf_counter() - began, time.thread_time() - cpu
    assert waited >= 0.3 and used < 0.1 * waited, (waited, used)
    gate.open.set()
    emitter.close()


def test_close_stops_the_writer_thread():
    emitter = Emitter([lambda r: None])
    emitter.deliver(record(1))
    thread = emitter._thread
    assert thread is not None and thread.is_alive()
    emitter.close()
    assert not thread.is_alive()


def test_close_over_a_hanging_sink_waits_its_timeout_once():
    """The flush gives up after the timeout; the writer, still inside the sink, is not waited for again."""
    gate = Gate()
    emitter = Emitter([gate], say=lambda m: None)
    emitter.deliver(record(1))
    began = time.perf_counter()
    emitter.close(0.5)
    assert 0.5 <= time.perf_counter() - began < 0.95
    gate.open.set()


def test_close_delivers_what_is_queued_then_closes_every_sink():
    closed: list[str] = []

    class Sink:
        def __init__(self):
            self.got = []

        def __call__(self, r):
            time.sleep(0.002)
            self.got.append(r.iteration)

        def close(self):
            closed.append("sink")

    sink = Sink()
    emitter = Emitter([sink])
    for i in range(1, 21):
        emitter.deliver(record(i))
    emitter.close()
    assert sink.got == list(range(1, 21)) and closed == ["sink"]
    emitter.close()  # idempotent
    assert closed == ["sink"]


def test_the_listener_hands_records_to_the_writer_and_history_stays_synchronous():
    gate = Gate()
    listener = PerformanceListener(1, sinks=[gate])
    for _ in range(5):
        listener.record_iteration(samples=1)
    assert [r.iteration for r in listener.history] == [1, 2, 3, 4, 5]  # at once
    assert gate.got == []  # the sink is still blocked; training was not
    gate.open.set()
    listener.flush()
    assert gate.got == [1, 2, 3, 4, 5] and gate.threads == {"trainperf-writer"}
    listener.close()


def test_a_listener_closing_over_a_hanging_sink_warns_and_returns(monkeypatch):
    monkeypatch.setattr(_emit, "FLUSH_TIMEOUT_S", 0.2)
    gate = Gate()
    listener = PerformanceListener(1, sinks=[gate])
    listener.record_iteration(samples=1)
    began = time.perf_counter()
    with pytest.warns(SinkError, match="did not finish within 0.2 s"):
        listener.close()
    assert time.perf_counter() - began < 5.0
    gate.open.set()


@pytest.mark.realtime
def test_a_20ms_sink_does_not_slow_a_1ms_step_loop():
    """Against the same loop without a listener, in the same run: the sink's 20 ms per report
    (one every iteration) cost the loop 20 ms per iteration inline; on the writer thread the
    records queue up and the loop keeps its pace."""

    def loop(listener: PerformanceListener | None, n: int = 100) -> float:
        began = time.perf_counter()
        for _ in range(n):
            end = time.perf_counter() + 0.001
            while time.perf_counter() < end:
                pass
            if listener is not None:
                listener.record_iteration(samples=1)
        return time.perf_counter() - began

    def slow(r):
        time.sleep(0.020)

    bare, timed = [], []
    for _ in range(3):  # alternating rounds, the best of each: a loaded machine slows single rounds
        bare.append(loop(None))
        listener = PerformanceListener(1, sinks=[slow], verdict=False, report_hardware=False)
        timed.append(loop(listener))
        listener.close()
        assert len(listener.history) == 100
    assert min(timed) < min(bare) * 1.5 + 0.02, (timed, bare)


def test_a_forked_child_delivers_through_a_writer_of_its_own(tmp_path):
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")
    out = tmp_path / "child.txt"
    gate = Gate()
    gate.open.set()
    emitter = Emitter([gate])
    emitter.deliver(record(1))  # the parent's writer is running
    pid = os.fork()
    if pid == 0:  # the child
        try:
            got: list[int] = []
            emitter._fanout.sinks[:] = [lambda r: got.append(r.iteration)]
            emitter.deliver(record(2))
            emitter.flush(10.0)
            out.write_text(json.dumps(got))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert json.loads(out.read_text()) == [2]
    emitter.flush(10.0)
    assert gate.got == [1]
    emitter.close()


def test_records_queued_at_interpreter_exit_reach_the_file(tmp_path):
    """50 records of 40 ms each: 2 s of writing still queued at exit, within the 5 s exit allowance."""
    path = tmp_path / "out.jsonl"
    script = f"""
import time
from trainperf import PerformanceListener
from trainperf.sinks import JsonLinesSink

class Slow(JsonLinesSink):
    def __call__(self, record):
        time.sleep(0.04)
        super().__call__(record)

listener = PerformanceListener(1, sinks=[Slow({str(path)!r})], report_hardware=False)
for _ in range(50):
    listener.record_iteration(samples=1)
# no close: the interpreter exits with records still queued
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), "src") if p)}
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, env=env)
    lines = path.read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == list(range(1, 51))


def test_the_limits_are_the_documented_ones():
    from pathlib import Path

    docs = " ".join((Path(__file__).parent.parent / "docs" / "sinks.md").read_text().split())
    assert f"The queue holds {_emit.QUEUE_SIZE:,} records" in docs
    assert f"at most {_emit.FLUSH_TIMEOUT_S:g} seconds" in docs
    assert f"(at most {_emit.EXIT_TIMEOUT_S:g} seconds in all)" in docs
    assert f"wakes every {1000 * _emit.WRITE_EVERY_S:g} ms" in docs


def test_a_hanging_sink_holds_up_interpreter_exit_for_the_exit_allowance_only():
    script = """
import time
from trainperf.core._emit import Emitter, EXIT_TIMEOUT_S
from trainperf import PerformanceRecord
emitter = Emitter([lambda r: time.sleep(30)], say=lambda m: None)
emitter.deliver(PerformanceRecord(iteration=1, window_iterations=1, window_s=0.01, warmup=False, timestamp=0.0))
print(EXIT_TIMEOUT_S, flush=True)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), "src") if p)}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], timeout=25, env=env, capture_output=True, text=True)
    took = time.perf_counter() - began
    assert done.returncode == 0 and float(done.stdout) == _emit.EXIT_TIMEOUT_S
    assert _emit.EXIT_TIMEOUT_S <= took < _emit.EXIT_TIMEOUT_S + 10.0


def test_an_inline_emitter_delivers_at_once_says_a_failing_task_and_flushes_at_once():
    got: list[int] = []
    said: list[str] = []
    emitter = Emitter([lambda r: got.append(r.iteration)], inline=True, say=said.append)

    def spans():
        raise OSError("disk full")

    emitter.submit(spans)
    emitter.deliver(record(1))
    assert got == [1] and emitter._thread is None
    assert len(said) == 1 and "OSError('disk full')" in said[0]
    assert emitter.flush(0.0) is True and not emitter.closed
    emitter.close()
    assert emitter.closed is True


def test_the_default_queue_holds_ten_thousand_records_and_drops_beyond():
    gate = Gate()
    emitter = Emitter([gate], say=lambda m: None)
    for i in range(_emit.QUEUE_SIZE + 2):
        emitter.deliver(record(i))
    assert emitter.dropped == 2  # the one in the sink counts in the ten thousand
    assert emitter.pending == _emit.QUEUE_SIZE
    gate.open.set()
    assert emitter.flush(30.0)
    emitter.close()
