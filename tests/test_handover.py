"""The hand-over to locked mode when a second thread starts recording: no iteration is counted twice
or lost, every window's iteration count matches its iterations, and a run directory numbers each
iteration once."""

from __future__ import annotations

import json
import threading
import time
import warnings

from trainperf import MemorySink, PerformanceListener


class PausingClock:
    """A clock that, once armed, starts ``then`` on another thread at its next reading on this thread
    and gives that thread the interpreter for a while before answering: a second thread that starts
    recording exactly while the first is inside a call."""

    def __init__(self) -> None:
        self.now = 100.0
        self.armed = False
        self.then = None
        self.thread = threading.get_ident()
        self.other: threading.Thread | None = None

    def __call__(self) -> float:
        if self.armed and threading.get_ident() == self.thread:
            self.armed = False
            self.other = threading.Thread(target=self.then)
            self.other.start()
            # the other thread runs as far as it can while this one is mid-call, for longer than a thread
            # waits to get the interpreter back (but within the second thread's bound, 0.5 s)
            self.other.join(0.3)
        return self.now


def test_a_second_thread_taking_over_mid_call_loses_and_doubles_no_iteration(tmp_path):
    clock = PausingClock()
    memory = MemorySink()
    listener = PerformanceListener(4, sinks=[memory], clock=clock, sink_thread=False, report_hardware=False,
                                   run_dir=tmp_path / "run")
    clock.then = lambda: listener.record_iteration(samples=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "used from more than one thread"
        for i in range(1, 11):
            clock.now += 0.01
            if i == 3:  # inside the third call, after it read the owner: the second thread arrives
                clock.armed = True
            listener.record_iteration(samples=1)
        assert clock.other is not None
        clock.other.join(5)
        listener.close()
    records = memory.records
    assert sum(r.window_iterations for r in records) == 11 == listener.iteration
    for r in records:
        assert r.iteration - r.first_iteration + 1 == r.window_iterations, r
        assert r.samples == r.window_iterations
    lines = (tmp_path / "run" / "rank-0" / "timeline.jsonl").read_text().splitlines()
    spans = [(json.loads(line)["i"], json.loads(line)["ph"]) for line in lines]
    # every iteration numbered once: no phase of an iteration twice, numbers in order and in the run
    # (phases of zero length are left out: the two threads share this fake clock)
    assert len(set(spans)) == len(spans) and [i for i, _ in spans] == sorted(i for i, _ in spans)
    assert {i for i, _ in spans} <= set(range(1, 12)) and len({i for i, _ in spans}) >= 9


def timed_call(listener: PerformanceListener, took: list[float], started: threading.Event | None = None):
    """What a second thread runs: one record_iteration, its duration kept in ``took``."""

    def second() -> None:
        if started is not None:
            started.set()
        began = time.perf_counter()
        listener.record_iteration(samples=1)
        took.append(time.perf_counter() - began)

    return second


def test_a_second_thread_waits_for_the_first_at_most_until_its_next_call_or_a_bound():
    """The first thread is not inside a call: the second waits for its next call, or the bound once."""
    from trainperf.core import _handover

    listener = PerformanceListener(4, sinks=[], report_hardware=False)
    listener.record_iteration(samples=1)
    took: list[float] = []
    second = timed_call(listener, took)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        other = threading.Thread(target=second)
        other.start()
        other.join(5)  # the first thread makes no call meanwhile: the bound
        assert took and 0.5 <= took[0] < 1.5  # the documented bound: half a second
        took.clear()
        third = threading.Thread(target=second)
        third.start()
        third.join(5)
    assert took and took[0] < _handover.HANDOVER_TIMEOUT_S  # handed over once: no more waiting
    assert listener.iteration == 3
    listener.close()


def test_the_first_threads_next_call_ends_the_second_threads_wait():
    from trainperf.core import _handover

    listener = PerformanceListener(100, sinks=[], report_hardware=False)
    listener.record_iteration(samples=1)
    took: list[float] = []
    started = threading.Event()
    second = timed_call(listener, took, started)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        other = threading.Thread(target=second)
        other.start()
        started.wait(5)
        time.sleep(0.01)  # the second thread is waiting now
        listener.record_iteration(samples=1)  # the first thread's next call
        other.join(5)
    assert took and took[0] < _handover.HANDOVER_TIMEOUT_S  # ended by that call, not by the bound
    assert listener.iteration == 3
    listener.close()


def test_the_handover_part_waits_for_the_first_thread_only_until_it_says_it_left_and_at_most_its_bound():
    import threading as th

    from trainperf.core._handover import HANDOVER_TIMEOUT_S, Handover

    alone = Handover()
    began = time.perf_counter()
    alone.wait_for(None)  # nobody recorded before
    alone.wait_for(th.get_ident())  # this thread itself
    assert alone.shared and time.perf_counter() - began < HANDOVER_TIMEOUT_S / 2

    handover = Handover()
    ready, leave = th.Event(), th.Event()
    done: list[float] = []

    def first() -> None:
        ready.set()
        leave.wait(5)
        handover.left_unlocked()

    worker = th.Thread(target=first)
    worker.start()
    ready.wait(5)
    waiter = th.Thread(target=lambda: (handover.wait_for(worker.ident), done.append(time.perf_counter())))
    began = time.perf_counter()
    waiter.start()
    time.sleep(0.05)
    handover.left_unlocked()  # said by another thread than the first: ignored
    time.sleep(0.05)
    assert not done
    leave.set()
    waiter.join(5)
    worker.join(5)
    assert done and done[0] - began < HANDOVER_TIMEOUT_S  # ended by the first thread, not the bound

    silent = Handover()
    began = time.perf_counter()
    silent.wait_for(worker.ident)  # a thread that never says it left: the bound ends the wait
    assert 0.5 <= time.perf_counter() - began < 1.5  # the documented bound: half a second


def test_a_closed_listener_flushed_and_closed_from_another_thread_answers_at_once_without_sharing():
    listener = PerformanceListener(2, sinks=[], report_hardware=False)
    listener.record_iteration(samples=1)
    listener.close()
    took: list[float] = []

    def other() -> None:
        began = time.perf_counter()
        assert listener.flush() is None
        listener.close()
        took.append(time.perf_counter() - began)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "used from more than one thread"
        worker = threading.Thread(target=other)
        worker.start()
        worker.join(5)
    from trainperf.core._handover import HANDOVER_TIMEOUT_S

    assert took and took[0] < HANDOVER_TIMEOUT_S / 2


def hammer(tmp_path, *, threads: int = 2, per_thread: int = 600, frequency: int = 4, adapter: bool = False):
    """``threads`` threads recording as fast as they can on one listener from the first call (through
    :meth:`record_step` with ``adapter``), each until every one has recorded ``per_thread`` iterations
    (a thread that ran alone for a while records on while the others start); the listener, its
    records and its run directory's spans."""
    memory = MemorySink()
    listener = PerformanceListener(frequency, sinks=[memory], report_hardware=False, run_dir=tmp_path / "run")
    link = listener._run_dir
    link.sink.max_timeline_windows = link.sink.slowest_kept = 10**9  # every window's spans are written
    go = threading.Barrier(threads)
    counts = [0] * threads

    def work(k: int) -> None:
        go.wait()
        while min(counts) < per_thread:
            if adapter:
                listener.record_step(listener.clock(), 1, 1, 0.0, None, 0.0, 1, 0)
            else:
                listener.record_iteration(samples=1)
            counts[k] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "used from more than one thread"
        workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        listener.close()
    assert listener.iteration == sum(counts)
    lines = (tmp_path / "run" / "rank-0" / "timeline.jsonl").read_text().splitlines()
    return listener, list(memory.records), [json.loads(line) for line in lines]


def test_two_threads_hammering_one_listener_count_every_window_exactly_and_number_each_iteration_once(tmp_path):
    """Each window counts the iterations it holds, the windows follow each other without gap or overlap,
    and the run directory's spans name each iteration once: through record_iteration and through the
    adapters' record_step, several runs (a thread that counted its iteration before a report let the
    other close the window without it)."""
    for run in range(6):
        listener, records, spans = hammer(tmp_path / str(run), adapter=run % 2 == 1)
        total = listener.iteration
        assert total == sum(r.window_iterations for r in records) and total >= 1200
        for r in records:
            assert r.iteration - r.first_iteration + 1 == r.window_iterations == r.samples, (run, r)
        assert [r.first_iteration for r in records] == [1, *(r.iteration + 1 for r in records[:-1])]
        phases = [(s["i"], s["ph"]) for s in spans]
        assert len(set(phases)) == len(phases), run  # no iteration's phase twice
        numbered = {i for i, _ in phases}  # (a phase of zero length is left out: the threads share a clock)
        assert numbered <= set(range(1, total + 1)) and len(numbered) >= 0.95 * total, run
        assert [i for i, _ in phases] == sorted(i for i, _ in phases), run


def test_the_second_thread_waits_for_the_first_only_until_its_next_call(tmp_path):
    """A first thread that records on sees the hand-over at its next call: the second thread is not held
    for the whole bound (it once was, when the first thread looked before the second was ready to hear)."""
    from trainperf.core._handover import HANDOVER_TIMEOUT_S

    for run in range(3):
        _, records, _ = hammer(tmp_path / str(run), per_thread=300)
        assert max(r.iteration_max_ms for r in records) < 1000.0 * HANDOVER_TIMEOUT_S * 0.9, run
