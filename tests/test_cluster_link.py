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


def run_ranks(store, world: int, ranks, run_dir, **options) -> tuple[dict[int, Rank], list[str]]:
    """Run ``ranks`` to their end; the ranks and every warning any of them gave."""
    per_rank = {k: options.pop(k) for k in ("every", "frequency", "close") if k in options}
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
    assert max(r.took for r in ranks.values()) < TIMEOUT_S and max(r.worst for r in ranks.values()) < 0.05
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


def test_a_run_shorter_than_the_link_takes_to_form_still_sends_files_and_clocks(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=3, settle_s=0.0)
    assert messages == []
    assert max(r.took for r in ranks.values()) < TIMEOUT_S
    assert ranks[0].cluster.joined == {1, 2}
    report = build_report(tmp_path)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2]
    assert {c["rank"]: c["status"] for c in report["clocks"]} == {0: "reference", 1: "aligned", 2: "aligned"}


def test_rank_zero_alone_listening_never_blocks_and_warns_once(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, [0], tmp_path, iterations=20, timeout_s=0.5, pause_at=10,
                                pause_s=0.6)
    r0 = ranks[0]
    assert r0.worst < 0.05 and r0.took < 0.5
    assert len(messages) == 1 and "no other rank linked" in messages[0], messages
    assert len((tmp_path / "rank-0" / "windows.jsonl").read_text().splitlines()) == 10


def test_ranks_without_rank_zero_never_block_and_warn_once_each(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, [1, 2], tmp_path, iterations=20, timeout_s=0.5, pause_at=10,
                                pause_s=0.6)
    for r in ranks.values():
        assert r.worst < 0.05 and r.took < 0.5
    assert len(messages) == 2 and all("rank 0 did not link" in m for m in messages), messages


def test_a_subset_of_ranks_is_compared_and_the_missing_rank_said_once(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, [0, 2], tmp_path, iterations=20, timeout_s=0.5, pause_at=6,
                                pause_s=0.6, slow_rank=2)
    assert len(messages) == 1 and "rank(s) 1 did not link" in messages[0], messages
    assert "straggler rank 2" in ranks[0].cluster.lines[-1]
    assert (tmp_path / "rank-2" / "windows.jsonl").exists()


def test_ranks_at_other_rates_never_block_or_warn(tmp_path):
    # a link timeout of 3 s: a loaded machine has stalled this process past 1 s before the ranks linked
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=31, every={0: 2, 1: 3, 2: 5},
                                frequency={0: 2, 1: 5, 2: 3}, timeout_s=3.0)
    assert messages == []
    assert max(r.worst for r in ranks.values()) < 0.05 and max(r.took for r in ranks.values()) < 3.0
    assert ranks[0].cluster.lines and ranks[0].cluster.silent == {}
    for r in range(3):
        assert (tmp_path / f"rank-{r}" / "meta.json").exists()


def test_a_rank_that_never_closes_holds_rank_zero_at_most_the_timeout_and_is_named(tmp_path):
    ranks, messages = run_ranks(dist.HashStore(), 3, range(3), tmp_path, iterations=6, close={2: False})
    assert TIMEOUT_S * 0.9 < ranks[0].took < TIMEOUT_S + 1.0 and ranks[1].took < 0.5
    assert list(ranks[0].cluster.silent) == [2]
    assert len(messages) == 1 and "rank 2 did not close" in messages[0], messages
    events = [json.loads(line) for line in (tmp_path / "rank-0" / "events.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "silent" and e["rank"] == 2 for e in events)
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
    assert any("rank 1 went silent" in str(w.message) for w in caught), [str(w.message) for w in caught]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranks[1].listener.close()


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
