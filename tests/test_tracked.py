"""The trackers' sinks without the trackers: which records a rank logs and under which prefix, the verdict's
text when it changes, the world figures of a cluster line, and the W&B sink's rows against a fake run that
keeps W&B's rules for steps (a row per step, a log below the current step dropped, ``commit``)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from trainperf import PerformanceRecord, Verdict
from trainperf.sinks._metrics import scalar_metrics
from trainperf.sinks._tracked import TEXT_LIMIT, Tracked, cluster_metrics, record_metrics, verdict_text


def record(iteration: int = 10, *, rank: int | None = None, verdict: Verdict | None = None, **figures: Any):
    base: dict[str, Any] = dict(iteration=iteration, timestamp=5.0, etl_ms=1.0, iteration_ms=10.0,
                                samples_per_sec=800.0, batches_per_sec=100.0, score=None, gc=(), rank=rank,
                                verdict=verdict, window_iterations=10, window_s=0.1, warmup=False)
    base.update(figures)
    return PerformanceRecord(**base)


def test_data_wait_and_gc_shares_of_the_window():
    metrics = scalar_metrics(record(etl_total_ms=25.0, gc_total_ms=4.0), "p/")
    assert metrics["p/data_wait_pct"] == pytest.approx(25.0) and metrics["p/gc_pct"] == pytest.approx(4.0)
    tiny = scalar_metrics(record(window_s=0.0005, etl_total_ms=0.25, gc_total_ms=0.05), "p/")  # a 0.5 ms window
    assert tiny["p/data_wait_pct"] == pytest.approx(50.0) and tiny["p/gc_pct"] == pytest.approx(10.0)
    odd = scalar_metrics(record(etl_total_ms=2.5, gc_total_ms=0.7), "p/")
    assert odd["p/data_wait_pct"] == pytest.approx(2.5) and odd["p/gc_pct"] == pytest.approx(0.7)
    capped = scalar_metrics(record(etl_total_ms=250.0, gc_total_ms=150.0), "p/")
    assert capped["p/data_wait_pct"] == 100.0 and capped["p/gc_pct"] == 100.0
    none = scalar_metrics(record(window_s=0.0, etl_total_ms=25.0, gc_total_ms=4.0), "p/")
    assert "p/data_wait_pct" not in none and "p/gc_pct" not in none
    assert "p/data_wait_pct" not in scalar_metrics(record(), "p/")


def test_each_collector_its_count_and_its_pause_when_known():
    from trainperf import GCStat

    metrics = scalar_metrics(record(gc=(GCStat("gen0", 3, 1.5), GCStat("jvm", 2, None))), "p/")
    assert {k: v for k, v in metrics.items() if k.startswith("p/gc/")} == {
        "p/gc/gen0/count": 3.0, "p/gc/gen0/ms": 1.5, "p/gc/jvm/count": 2.0}


def test_record_metrics_keep_finite_figures_and_the_verdict_by_name():
    metrics = record_metrics(record(verdict=Verdict("gc-bound", 12.5, "GC 12%"), cpu_pct=math.nan), "t/")
    assert metrics["t/verdict_pct"] == 12.5 and metrics["t/verdict/gc-bound_pct"] == 12.5
    assert "t/cpu_pct" not in metrics and metrics["t/iteration_ms"] == 10.0
    assert not [k for k in record_metrics(record(verdict=Verdict("fine", math.nan, "")), "t/") if "verdict" in k]
    assert set(record_metrics(record(), "t/")) == set(scalar_metrics(record(), "t/"))


def test_verdict_text_and_its_changes_per_prefix():
    assert verdict_text(record()) is None
    assert verdict_text(record(verdict=Verdict("fine", 3.4, ""))) == "fine"
    assert verdict_text(record(verdict=Verdict("input-bound", 43.6, "data"))) == "input-bound (44%): data"
    assert len(verdict_text(record(verdict=Verdict("fine", 1.0, "x" * 9000)))) == TEXT_LIMIT
    tracked = Tracked("t/", False)
    said = [tracked.new_verdict(record(verdict=Verdict(kind, 5.0, "r")), prefix) for kind, prefix in
            [("fine", "a/"), ("fine", "a/"), ("fine", "b/"), ("gc-bound", "a/"), ("fine", "a/")]]
    assert said == ["fine (5%): r", None, "fine (5%): r", "gc-bound (5%): r", "fine (5%): r"]
    assert tracked.new_verdict(record(), "a/") is None
    same = "".join(["fi", "ne"])  # the same verdict from another record: an equal string, another object
    assert tracked.new_verdict(record(verdict=Verdict(same, 5.0, "r")), "a/") is None


@pytest.mark.parametrize("all_ranks, rank, prefix", [
    (False, None, "t/"), (False, 0, "t/"), (False, 1, None), (True, None, "t/"), (True, 0, "t/rank0/"),
    (True, 3, "t/rank3/")])
def test_which_ranks_log_and_where(all_ranks, rank, prefix):
    assert Tracked("t/", all_ranks).prefix_for(record(rank=rank)) == prefix


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="prefix"):
        Tracked(None, False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="all_ranks"):
        Tracked("t/", "yes")  # type: ignore[arg-type]


EVENT = {"kind": "cluster", "iteration": 40, "line": "...", "ranks": 2, "iteration_ms_min": 12.0,
         "iteration_ms_max": 37.0, "etl_ms_max": 26.0, "spread_pct": 208.3, "time": 1.0,
         "stragglers": [{"rank": 1, "cause": "data", "excess_ms": 25.0, "evidence": "..."},
                        {"rank": 2, "cause": "forward", "excess_ms": 3.0, "evidence": "..."}]}


def test_cluster_metrics_are_the_worlds_figures():
    assert cluster_metrics(EVENT, "t/") == {
        "t/world/ranks": 2.0, "t/world/iteration_ms_min": 12.0, "t/world/iteration_ms_max": 37.0,
        "t/world/spread_pct": 208.3, "t/world/etl_ms_max": 26.0, "t/world/stragglers": 2.0,
        "t/world/straggler_rank": 1.0, "t/world/straggler_excess_ms": 25.0, "t/world/straggler/data_ms": 25.0}
    calm = cluster_metrics({**EVENT, "stragglers": [], "spread_pct": math.inf, "ranks": True}, "t/")
    assert calm == {"t/world/iteration_ms_min": 12.0, "t/world/iteration_ms_max": 37.0, "t/world/etl_ms_max": 26.0,
                    "t/world/stragglers": 0.0}
    assert cluster_metrics({"kind": "silent", "rank": 1}, "t/") == {}
    assert cluster_metrics({**EVENT, "kind": "capture"}, "t/") == {}
    read_back = "".join(["clus", "ter"])  # a kind read from a file is equal to "cluster", not the same object
    assert cluster_metrics({**EVENT, "kind": read_back}, "t/") == cluster_metrics(EVENT, "t/")
    assert cluster_metrics({"kind": "cluster"}, "t/") == {"t/world/stragglers": 0.0}


class FakeWandbRun:
    """W&B's rules for a run's rows: ``log`` without ``step`` goes into the current row and commits it
    unless ``commit=False``; with ``step`` below the current one it is dropped, above it the current row
    is committed first and the step moves there (committed only with ``commit=True``)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.current: dict[str, Any] = {}
        self._step = 0
        self.dropped: list[dict[str, Any]] = []
        self.defined: list[tuple[str, str | None]] = []
        self.summary: dict[str, Any] = {}
        self.finished = 0

    @property
    def step(self) -> int:
        return int(str(self._step))  # read back from the service: an equal int, not the same object

    def define_metric(self, name: str, step_metric: str | None = None) -> None:
        self.defined.append((name, step_metric))

    def _commit(self) -> None:
        self.rows.append({"_step": self._step, **self.current})
        self.current = {}
        self._step += 1

    def log(self, data: dict[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        if step is not None:
            if step < self._step:
                self.dropped.append(data)
                return
            if step > self._step:
                if self.current:
                    self.rows.append({"_step": self._step, **self.current})
                self.current, self._step = {}, step
        self.current.update(data)
        if (step is None and commit is None) or commit:
            self._commit()

    def finish(self) -> None:
        if self.current:
            self._commit()
        self.finished += 1


def _metrics_of(rec: PerformanceRecord) -> dict[str, float]:
    return {**record_metrics(rec, "trainperf/"), "trainperf/iteration": float(rec.iteration)}


def _ours(run: FakeWandbRun) -> list[float]:
    return [row["trainperf/iteration"] for row in run.rows if "trainperf/iteration" in row]


def test_alone_each_record_has_a_row_of_its_own():
    from trainperf.sinks import WandbSink

    run = FakeWandbRun()
    sink = WandbSink(run)
    sink.write_many([record(10), record(20)])
    assert _ours(run) == [10.0, 20.0]  # at once, not waiting for rows of the user's
    sink.write_many([record(30)])
    sink.close()
    assert [row["_step"] for row in run.rows] == [0, 1, 2] and _ours(run) == [10.0, 20.0, 30.0]
    assert run.defined == [("trainperf/iteration", None), ("trainperf/*", "trainperf/iteration")]
    assert not run.finished  # not the sink's run


def test_alone_for_hundreds_of_rows_then_joining_when_the_user_logs():
    from trainperf.sinks import WandbSink

    run = FakeWandbRun()
    sink = WandbSink(run)
    for i in range(1, 301):
        sink.write_many([record(i)])
    assert _ours(run) == [float(i) for i in range(1, 301)]
    run.log({"loss": 1.0}, step=400)
    sink.write_many([record(301), record(302)])
    run.log({"loss": 2.0}, step=401)
    sink.close()
    run.finish()
    assert [(row["_step"], row.get("trainperf/iteration")) for row in run.rows[-2:]] == [(400, 301.0), (401, 302.0)]
    assert not run.dropped


def test_a_user_who_logs_before_the_first_record_is_seen_at_once():
    from trainperf.sinks import WandbSink

    for rows, first in (("auto", 5), ("".join(["au", "to"]), 1005)):
        run = FakeWandbRun()
        sink = WandbSink(run, rows=rows)
        run.log({"loss": 1.0}, step=first)
        sink.write_many([record(10), record(20)])
        sink.write_many([record(30)])  # the row has not moved: it waits too
        run.log({"loss": 2.0}, step=first + 1)
        sink.close()
        run.finish()
        assert not run.dropped
        assert [(row["_step"], row.get("loss"), row.get("trainperf/iteration")) for row in run.rows] == [
            (first, 1.0, 10.0), (first + 1, 2.0, 20.0), (first + 2, None, 30.0)]


def test_once_the_user_logs_records_join_their_rows_and_never_move_the_step():
    from trainperf.sinks import WandbSink

    run = FakeWandbRun()
    sink = WandbSink(run)
    sink.write_many([record(10)])  # alone: a row of its own, step 1
    run.log({"loss": 1.0}, step=5)
    sink.write_many([record(20), record(30)])  # 20 joins step 5; 30 waits
    run.log({"loss": 2.0}, step=6)
    run.log({"lr": 0.1}, step=6)  # a second call at the same step: never dropped
    sink.write_many([record(40)])  # 30 joins step 6; 40 waits
    run.log({"loss": 3.0}, step=7)
    sink.close()  # step 7's row holds none of ours: 40 joins it
    run.finish()
    assert run.dropped == []
    assert [(row["_step"], row.get("loss"), row.get("trainperf/iteration")) for row in run.rows] == [
        (0, None, 10.0), (5, 1.0, 20.0), (6, 2.0, 30.0), (7, 3.0, 40.0)]
    assert run.rows[2]["lr"] == 0.1


def test_records_left_waiting_at_close_get_rows_after_the_users_last():
    from trainperf.sinks import WandbSink

    for first in (3, 1003):  # small steps, and steps read back as new int objects
        run = FakeWandbRun()
        sink = WandbSink(run, rows="".join(["jo", "in"]))  # an equal string, not the literal
        run.log({"loss": 1.0}, step=first)
        sink.write_many([record(10), record(20), record(30)])
        assert run.rows == [] and run.current == {"loss": 1.0, **_metrics_of(record(10))}  # joined, not committed
        sink.write_many([])
        sink.close()
        run.finish()
        assert [(row["_step"], row.get("loss"), row.get("trainperf/iteration")) for row in run.rows] == [
            (first, 1.0, 10.0), (first + 1, None, 20.0), (first + 2, None, 30.0)]


def test_own_rows_always_and_join_from_the_first():
    from trainperf.sinks import WandbSink

    own, join = FakeWandbRun(), FakeWandbRun()
    own_sink, join_sink = WandbSink(own, rows="own"), WandbSink(join, rows="join")
    for run, sink in ((own, own_sink), (join, join_sink)):
        run.log({"loss": 1.0}, step=2)
        sink.write_many([record(10), record(20)])
        run.log({"loss": 2.0}, step=3)
        sink.close()
        run.finish()
    # own rows: the two records moved the step past the user's next one, which W&B dropped
    assert [(row["_step"], row.get("trainperf/iteration")) for row in own.rows] == [(2, 10.0), (3, 20.0)]
    assert own.dropped == [{"loss": 2.0}]
    assert [(row["_step"], row.get("loss"), row.get("trainperf/iteration")) for row in join.rows] == [
        (2, 1.0, 10.0), (3, 2.0, 20.0)]
    assert not join.dropped


def test_verdict_and_world_line_in_the_summary_and_other_ranks_skipped():
    from trainperf.sinks import WandbSink

    run = FakeWandbRun()
    sink = WandbSink(run, prefix="p/")
    sink.write_many([record(10, verdict=Verdict("fine", 1.0, "ok")), record(10, rank=1)])
    sink.on_cluster(EVENT)
    sink.on_cluster({"kind": "silent", "rank": 1})
    sink.on_cluster({"kind": "cluster", "stragglers": []})  # no iteration: at 0
    sink.close()
    assert run.summary == {"p/verdict": "fine (1%): ok", "p/world/line": ""}
    assert [row.get("p/iteration") for row in run.rows] == [10.0, 40.0, 0.0]
    assert run.rows[1]["p/world/straggler_rank"] == 1.0 and "p/iteration_ms" not in run.rows[1]


class Failing(FakeWandbRun):
    def __init__(self, fail_from: int) -> None:
        super().__init__()
        self.calls, self.fail_from = 0, fail_from

    def log(self, data: dict[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        self.calls += 1
        if self.calls >= self.fail_from:
            raise ConnectionError("down")
        super().log(data, step, commit)


def test_a_failing_tracker_drops_what_waits_and_close_does_not_raise_it_again():
    from trainperf.sinks import WandbSink

    run = Failing(fail_from=1)
    sink = WandbSink(run)
    with pytest.raises(ConnectionError):
        sink.write_many([record(10), record(20)])
    assert not sink._waiting
    sink.close()  # said once already
    run = Failing(fail_from=1)
    sink = WandbSink(run, rows="join")
    with pytest.raises(ConnectionError):
        sink.write_many([record(10)])
    run.fail_from = 100  # answers again: one record joins the row, the other waits
    sink.write_many([record(20), record(30)])
    assert len(sink._waiting) == 1
    run.fail_from = 0  # and fails again at close: not raised a second time
    sink.close()
    with pytest.raises(ConnectionError):  # a first failure at close is raised (and said, as any sink's)
        _close_with_waiting(Failing(fail_from=1))


def _close_with_waiting(run: Failing) -> None:
    from trainperf.sinks import WandbSink

    sink = WandbSink(run, rows="join")
    sink._waiting.append({"trainperf/iteration": 1.0})
    sink._joined = 10**9  # the row holds one of ours: what waits is placed at close, and that fails
    sink.close()


def test_a_sink_that_started_the_run_finishes_it_even_when_closing_fails(monkeypatch):
    wandb = pytest.importorskip("wandb")
    from trainperf.sinks import WandbSink

    run = Failing(fail_from=1)
    given: list[dict[str, Any]] = []
    monkeypatch.setattr(wandb, "run", None)
    monkeypatch.setattr(wandb, "init", lambda **kw: given.append(kw) or run)
    WandbSink(start=True)
    sink = WandbSink(start=True, init={"project": "p"})
    assert given == [{}, {"project": "p"}]
    sink._waiting.append({"trainperf/iteration": 1.0})
    with pytest.raises(ConnectionError):
        sink.close()
    assert run.finished == 1
    sink.close()  # once only
    assert run.finished == 1


def test_no_run_is_never_started_unasked_and_a_missing_wandb_says_what_to_install(monkeypatch):
    wandb = pytest.importorskip("wandb")
    import sys

    from trainperf.sinks import WandbSink

    def no_init(**kwargs: Any) -> None:
        raise AssertionError("a run was started unasked")

    monkeypatch.setattr(wandb, "run", None)
    monkeypatch.setattr(wandb, "init", no_init)
    with pytest.raises(RuntimeError, match="no active W&B run"):
        WandbSink()
    run = FakeWandbRun()
    monkeypatch.setattr(wandb, "run", run)
    assert WandbSink().run is run and WandbSink(start=False).run is run
    with pytest.raises(TypeError):
        WandbSink(run, True)  # type: ignore[misc]  # the options are keyword-only
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'trainperf\[wandb\]'"):
        WandbSink(run)


def test_a_record_of_another_rank_skipped_before_rank_zeros_own():
    from trainperf.sinks import WandbSink

    run = FakeWandbRun()
    sink = WandbSink(run)
    sink.write_many([record(10, rank=1), record(10, rank=0), record(20, rank=2), record(20)])
    assert _ours(run) == [10.0, 20.0]
