"""The ranks' link over a shared store, every rank a thread of this process: closing with any report
count, ranks without a listener, ranks at other rates, a rank that never closes or dies, a failing
store. None of it may block the training thread or warn more than once."""

from __future__ import annotations

import gc
import json
import threading
import time
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from trainperf import PerformanceListener, build_report  # noqa: E402
from trainperf.torch._cluster import Cluster  # noqa: E402

pytestmark = pytest.mark.realtime

TIMEOUT_S = 1.0


class Rank(threading.Thread):
    """One rank: builds its listener and link, trains, closes (unless told not to), on its own thread."""

    def __init__(self, store, world: int, rank: int, run_dir, *, iterations: int, every: int = 2, frequency: int = 2,
                 timeout_s: float = TIMEOUT_S, slow_rank: int | None = None, pause_at: int | None = None,
                 pause_s: float = 0.0, close: bool = True, start_barrier: threading.Barrier | None = None,
                 settle_s: float = 0.3) -> None:
        super().__init__(daemon=True)
        self.args = (store, world, rank, run_dir, every, frequency, timeout_s)
        self.rank, self.iterations, self.slow_rank = rank, iterations, slow_rank
        self.pause_at, self.pause_s, self.close_it, self.barrier = pause_at, pause_s, close, start_barrier
        self.settle_s = settle_s
        self.worst = self.took = 0.0
        self.listener: PerformanceListener | None = None
        self.cluster: Cluster | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        store, world, rank, run_dir, every, frequency, timeout_s = self.args
        try:
            if True:  # warnings are caught by the test's thread: catch_warnings is process-wide
                self.listener = listener = PerformanceListener(frequency, sinks=[], verdict=False, rank=rank,
                                                               run_dir=run_dir)
                self.cluster = Cluster(listener, rank=rank, world=world, store=store, every=every, timeout_s=timeout_s)
                listener.add_sink(self.cluster)
                if self.barrier is not None:
                    self.barrier.wait(10)
                time.sleep(self.settle_s)  # rank 0 welcomes the others
                for i in range(self.iterations):
                    if i == self.pause_at:
                        time.sleep(self.pause_s)
                    listener.add_sample("wait", 0.0005 if rank == self.slow_rank else 0.0205)
                    began = time.perf_counter()
                    listener.record_iteration(8, etl=0.021 if rank == self.slow_rank else 0.001)
                    self.worst = max(self.worst, time.perf_counter() - began)
                    time.sleep(0.002)
                if self.close_it:
                    began = time.perf_counter()
                    listener.close()
                    self.took = time.perf_counter() - began
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc


def never_waited(timeout_s: float = TIMEOUT_S) -> float:
    """The bound on one ``record_iteration`` call that shows it never waited for the link: the only wait the
    link could impose is its timeout, so a call shorter than half of it did not wait, while a loaded machine's
    scheduling delays (tens of milliseconds) stay far below it."""
    return 0.5 * timeout_s


def run_ranks(store, world: int, ranks, run_dir, **options) -> tuple[dict[int, Rank], list[str]]:
    """Run ``ranks`` to their end; the ranks and every warning any of them gave."""
    per_rank = {k: options.pop(k) for k in ("every", "frequency", "close", "pause_s")
                if isinstance(options.get(k), dict)}
    barrier = threading.Barrier(len(list(ranks)))
    threads = {}
    for r in ranks:
        extra = {k: v[r] for k, v in per_rank.items() if r in v}
        threads[r] = Rank(store, world, r, run_dir, start_barrier=barrier, **options, **extra)
    # The interpreter's own collections are not trainperf blocking a rank: a full one in a test process
    # that has run many tests can take tens of milliseconds, on whichever thread allocates.
    gc.collect()
    gc.disable()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for t in threads.values():
                t.start()
            for t in threads.values():
                t.join(30)
                assert t.error is None, t.error
    finally:
        gc.enable()
    return threads, [str(w.message) for w in caught]


@pytest.mark.parametrize("iterations", [8, 9, 11, 14])  # reports: 4 (a multiple of every), 4, 5, 7
def test_closing_sends_every_ranks_files_without_a_warning_whatever_the_report_count(tmp_path, iterations):
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=iterations, slow_rank=2)
    assert messages == []
    assert max(r.took for r in ranks.values()) < TIMEOUT_S and max(r.worst for r in ranks.values()) < never_waited()
    cluster0 = ranks[0].cluster
    assert cluster0.joined == {1, 2} and cluster0.silent == {}
    assert cluster0.lines and "straggler rank 2 (data" in cluster0.lines[-1]
    for r in (1, 2):
        offset, uncertainty = ranks[r].cluster.offsets[r]
        assert abs(offset) < 0.01 and 0 <= uncertainty < 0.01  # one process: one clock
    windows = [json.loads(line) for line in (tmp_path / "rank-2" / "windows.jsonl").read_text().splitlines()]
    assert len(windows) == -(-iterations // 2)
    events = [json.loads(line) for line in (tmp_path / "rank-0" / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events] == ["cluster"] * len(cluster0.lines)
    report = build_report(tmp_path)
    assert [(s["rank"], s["cause"]) for s in report["stragglers"]] == [(2, "data")]
    assert not any(r.cluster._thread.is_alive() for r in ranks.values())  # closed: no store call of ours left


def test_a_run_shorter_than_the_link_takes_to_form_still_sends_files_and_clocks(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=3, settle_s=0.0)
    assert messages == []
    assert max(r.took for r in ranks.values()) < TIMEOUT_S
    assert ranks[0].cluster.joined == {1, 2}
    report = build_report(tmp_path)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2]
    assert {c["rank"]: c["status"] for c in report["clocks"]} == {0: "reference", 1: "aligned", 2: "aligned"}


def test_rank_zero_alone_listening_never_blocks_and_warns_once(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, [0], tmp_path, iterations=20, timeout_s=1.0, pause_at=10,
                                pause_s=1.2)
    r0 = ranks[0]
    assert r0.worst < never_waited(1.0) and r0.took < 1.0  # its close does not wait the timeout again
    assert len(messages) == 1 and "no other rank linked" in messages[0], messages
    assert len((tmp_path / "rank-0" / "windows.jsonl").read_text().splitlines()) == 10


def test_ranks_without_rank_zero_never_block_and_warn_once_each(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, [1, 2], tmp_path, iterations=20, timeout_s=1.0, pause_at=10,
                                pause_s=1.2)
    for r in ranks.values():
        assert r.worst < never_waited(1.0) and r.took < 1.0
    assert len(messages) == 2 and all("rank 0 did not link" in m for m in messages), messages


def test_a_subset_of_ranks_is_compared_and_the_missing_rank_said_once(tmp_path):
    # a 2 s timeout: on a loaded machine ranks 0 and 2 have taken more than 0.5 s to link
    ranks, messages = run_ranks(dist.HashStore(), 3, [0, 2], tmp_path, iterations=20, timeout_s=2.0, pause_at=6,
                                pause_s=2.4, slow_rank=2)
    assert len(messages) == 1 and "rank(s) 1 did not link" in messages[0], messages
    assert "straggler rank 2" in ranks[0].cluster.lines[-1]
    assert (tmp_path / "rank-2" / "windows.jsonl").exists()


def test_ranks_at_other_rates_never_block_or_warn(tmp_path):
    # a link timeout of 10 s: a loaded machine has stalled this process past 3 s before the ranks linked
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=31, every={0: 2, 1: 3, 2: 5},
                                frequency={0: 2, 1: 5, 2: 3}, timeout_s=10.0)
    assert messages == []
    assert max(r.worst for r in ranks.values()) < never_waited(3.0) and max(r.took for r in ranks.values()) < 3.0
    assert ranks[0].cluster.lines and ranks[0].cluster.silent == {}
    for r in range(3):
        assert (tmp_path / f"rank-{r}" / "meta.json").exists()


def silent_events(run_dir) -> dict[int, str]:
    """Rank 0's ``silent`` events: rank -> why."""
    events = [json.loads(line) for line in (run_dir / "rank-0" / "events.jsonl").read_text().splitlines()]
    return {e["rank"]: e["why"] for e in events if e["kind"] == "silent"}


def test_a_rank_that_never_closes_holds_rank_zero_at_most_the_timeout_and_is_named_alive(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=6, close={2: False})
    assert TIMEOUT_S * 0.9 < ranks[0].took < TIMEOUT_S + 1.0 and ranks[1].took < 0.5
    assert list(ranks[0].cluster.silent) == [2]
    assert len(messages) == 1 and "rank 2 did not close within 1 s, though alive" in messages[0], messages
    assert list(silent_events(tmp_path)) == [2] and "though alive" in silent_events(tmp_path)[2]
    assert [s["rank"] for s in build_report(tmp_path)["silent"]] == [2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # closed from this thread, not its own
        ranks[2].listener.close()


def test_a_rank_whose_link_dies_is_marked_silent_during_the_run(tmp_path):
    store = dist.HashStore()
    ranks, _ = run_ranks(store, 2, range(2), tmp_path, iterations=4, timeout_s=0.6, close={0: False, 1: False})
    ranks[1].cluster._on = False  # its link stops: no heartbeat, no figures, as when the process is killed
    time.sleep(1.5)
    listener0 = ranks[0].listener
    listener0._owner = threading.get_ident()  # this thread goes on training rank 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # rank 0 goes on training and gathering until it notices (a loaded machine delays its link's
        # thread), at most 10 s
        deadline = time.monotonic() + 10.0
        while not ranks[0].cluster.silent and time.monotonic() < deadline:
            listener0.record_iteration(8)
            time.sleep(0.05)
        listener0.record_iteration(8)  # the sink call after the detection says it
        listener0.close()
    assert list(ranks[0].cluster.silent) == [1]
    said = [str(w.message) for w in caught]
    assert any("rank 1 went silent: no heartbeat for" in m for m in said), said
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranks[1].listener.close()


def test_no_clock_round_at_close_when_the_last_gather_is_due_for_one(tmp_path):
    """Rank 0's tenth and last gather is a clock round, reached after the others have closed: it starts
    no round with ranks that said goodbye, so its close takes no part of the (long) timeout."""
    timeout_s = 5.0
    # 40 iterations, a report every 2, a gather every 2 reports: 10 gathers; rank 0 pauses before its last
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=40, timeout_s=timeout_s,
                                pause_at=38, pause_s={0: 1.0})
    assert messages == []
    assert not ranks[0].is_alive() and ranks[0].took < 0.2 * timeout_s, ranks[0].took
    assert ranks[0].cluster.silent == {} and ranks[0].cluster.joined == {1, 2}
    assert sorted(ranks[0].cluster.offsets) == [1, 2]  # the rounds before were made


def test_a_rank_that_died_holds_rank_zero_only_until_its_heartbeat_is_stale_and_is_named_dead(tmp_path):
    """Rank 2's link stops (no heartbeat, no goodbye, as when its process is killed); rank 0's close,
    with a long timeout, waits for it only until its heartbeat is ``_DEAD_AFTER_S`` old."""
    from trainperf.torch._cluster_roles import _DEAD_AFTER_S

    timeout_s = 20.0
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=6, timeout_s=timeout_s,
                                close={0: False, 2: False})
    assert messages == []
    ranks[2].cluster._halt.set()  # its thread stops as a killed process's would
    ranks[2].cluster._thread.join(5)
    listener0 = ranks[0].listener
    listener0._owner = threading.get_ident()  # closed from this thread: no warning about threads
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        began = time.perf_counter()
        listener0.close()
        took = time.perf_counter() - began
    assert took < _DEAD_AFTER_S + 1.0 < timeout_s  # its heartbeat stopped before rank 0's close began
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "rank 2 died: no heartbeat for" in said[0], said
    assert list(silent_events(tmp_path)) == [2] and silent_events(tmp_path)[2].startswith("died")
    assert not ranks[0].cluster._thread.is_alive()


def test_a_rank_that_ended_without_closing_is_not_waited_for_and_is_named_so(tmp_path):
    """Rank 2's process ends without a close (it says so, and its link's thread stops); rank 0's close
    does not wait for it."""
    timeout_s = 20.0
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=6, timeout_s=timeout_s,
                                close={0: False, 2: False})
    assert messages == []
    began = time.perf_counter()
    ranks[2].cluster.exit_unclosed()
    exited = time.perf_counter() - began
    assert not ranks[2].cluster._thread.is_alive()
    ranks[0].listener._owner = threading.get_ident()  # closed from this thread: no warning about threads
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        began = time.perf_counter()
        ranks[0].listener.close()
        took = time.perf_counter() - began
    assert exited < 1.0 and took < 1.0
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and "rank 2 ended without closing" in said[0], said
    assert silent_events(tmp_path) == {2: "ended without closing its listener"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranks[2].listener.close()


def test_at_exit_without_a_close_rank_zero_names_the_dead_rank_only_and_every_thread_stops(tmp_path):
    """The run crashed: rank 1 ends without a close, rank 2 died before; rank 0's end names rank 2
    (died) and not rank 1 (it ended as rank 0 does), and each link's thread has stopped."""
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=6, timeout_s=20.0,
                                close={0: False, 1: False, 2: False})
    assert messages == []
    ranks[2].cluster._halt.set()
    ranks[2].cluster._thread.join(5)
    ranks[1].cluster.exit_unclosed()
    began = time.perf_counter()
    ranks[0].cluster.exit_unclosed()
    took = time.perf_counter() - began
    from trainperf.torch._cluster_roles import _EXIT_WAIT_S

    assert took < _EXIT_WAIT_S + 1.0
    assert list(silent_events(tmp_path)) == [2] and silent_events(tmp_path)[2].startswith("died"), took
    assert not any(r.cluster._thread.is_alive() for r in ranks.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in ranks.values():
            r.listener.close()


def test_both_sides_of_a_clock_round_sleep_while_they_wait():
    """Rank 0 pinging a rank that does not answer, and a rank waiting for pings that stop coming, use a
    small share of a core while they wait (this thread's CPU time against the stopwatch, same run)."""
    from trainperf.torch._cluster_member import Member
    from trainperf.torch._cluster_roles import Leader

    store = dist.HashStore()
    links = [Cluster(PerformanceListener(2, sinks=[], verdict=False, rank=r), rank=r, world=3, store=store,
                     timeout_s=0.5) for r in (0, 1)]
    leader = Leader(links[0])  # rank 2's: never answers (rank 0's own link knows nothing of it)
    leader.next_seq[2], leader.seen[2] = 1, time.monotonic()
    began, cpu = time.perf_counter(), time.thread_time()
    leader._align(2)
    waited, used = time.perf_counter() - began, time.thread_time() - cpu
    assert waited >= 0.5 and used <= 0.1 * waited, (waited, used)

    member = Member(links[1])  # rank 1's, out of band: round 5; rank 0 sends one ping and gives up later
    member.round = 5
    own = links[1]._store
    own.set("ping/1/5/0", "0")
    sent: list[float] = []
    threading.Timer(0.6, lambda: (own.set("offset/1/5", "nan,nan"), sent.append(time.perf_counter()))).start()
    began, cpu = time.perf_counter(), time.thread_time()
    member._answer_pings()
    ended = time.perf_counter()
    waited, used = ended - began, time.thread_time() - cpu
    # it waits until rank 0's answer comes (when the timer fired, however late a loaded machine runs it), no longer
    assert 0.5 < waited and sent and ended - sent[0] < 0.4 and member.round == 6, (waited, sent, ended)
    assert used <= 0.1 * waited, (waited, used)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for link in links:
            link.listener.close()


def test_rank_zero_waiting_at_close_sleeps(tmp_path):
    """Rank 0's close waiting for a rank that does not close uses a small share of a core."""
    ranks, _ = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=6, timeout_s=1.5,
                         close={0: False, 2: False})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the process's CPU time: rank 0's link's thread, rank 2's (idle) and this one (joining)
        began, cpu = time.perf_counter(), time.process_time()
        ranks[0].cluster.close()  # waits for rank 2 the whole timeout
        waited, used = time.perf_counter() - began, time.process_time() - cpu
        ranks[2].listener.close()
    assert waited >= 1.5 and used <= 0.1 * waited, (waited, used)


class FailingStore:
    """A store whose every call fails after ``good`` calls."""

    def __init__(self, good: int) -> None:
        self.inner, self.calls, self.good = dist.HashStore(), 0, good

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def call(*args, **kwargs):
            self.calls += 1
            if self.calls > self.good:
                raise RuntimeError("store connection reset")
            return method(*args, **kwargs)

        return call


def test_a_failing_store_turns_the_link_off_with_one_warning_and_training_goes_on(tmp_path):
    listener = PerformanceListener(2, sinks=[], verdict=False, rank=1, run_dir=tmp_path)
    store = dist.PrefixStore("x/", dist.HashStore())  # PrefixStore needs a real store: fail its calls instead
    cluster = Cluster(listener, rank=1, world=2, store=store, every=1, timeout_s=1.0)
    cluster._store = FailingStore(0)
    listener.add_sink(cluster)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(20):
            listener.record_iteration(8)
            time.sleep(0.01)
        listener.close()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "store connection reset" in messages[0], messages
    assert len((tmp_path / "rank-1" / "windows.jsonl").read_text().splitlines()) == 10
