"""The Weights & Biases and MLflow sinks, offline: W&B in offline mode (its run file read back), MLflow with a
local file store (its metric history read back). Every record's figures are found at its iteration, the user's
own points beside them, none dropped, whatever steps the user logs with."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
import warnings

import pytest

from _wandb_file import read_run, run_file
from trainperf import PerformanceListener, PerformanceRecord, SinkError, Verdict
from trainperf.sinks import MemorySink
from trainperf.sinks._tracked import record_metrics

wandb = pytest.importorskip("wandb")
mlflow = pytest.importorskip("mlflow")

from trainperf.sinks import MlflowSink, WandbSink  # noqa: E402
from trainperf.sinks._mlflow import mlflow_key  # noqa: E402


@pytest.fixture
def wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")
    run = wandb.init(project="trainperf-test", dir=str(tmp_path), mode="offline")
    yield run
    if wandb.run is run:
        run.finish()


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    yield mlflow.tracking.MlflowClient()
    while mlflow.active_run() is not None:
        mlflow.end_run()


def _loop(listener, clock, n, log=None, delay_s=0.0):
    """``n`` iterations of 10 ms (a 2 ms data wait every third), ``log(i)`` after each."""
    for i in range(n):
        etl = 0.002 if i % 3 == 0 else 0.0
        clock.advance(0.010)
        listener.record_iteration(8, etl=etl, score=1.0 / (i + 1))
        if log is not None:
            log(i)
        if delay_s:
            time.sleep(delay_s)


def _ours(rows, prefix="trainperf/"):
    return {row[prefix + "iteration"]: row for row in rows if prefix + "iteration" in row}


def _assert_every_record(records, rows, prefix="trainperf/"):
    ours = _ours(rows, prefix)
    assert sorted(ours) == [float(r.iteration) for r in records]
    for record in records:
        row = ours[float(record.iteration)]
        expected = record_metrics(record, prefix)
        assert expected, record
        for name, value in expected.items():
            assert row[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name
        assert not [k for k in row if k.startswith(prefix) and k not in expected and k != prefix + "iteration"]


@pytest.mark.parametrize("user", ["explicit step", "own step metric", "auto step", "none"])
@pytest.mark.parametrize("delay_s", [0.0, 0.001])
def test_wandb_every_record_at_its_iteration_and_none_of_the_users_points_dropped(wandb_run, tmp_path, clock,
                                                                                   user, delay_s):
    sink = WandbSink()
    listener = PerformanceListener(5, sinks=[sink], clock=clock)

    def log(i):
        if user == "explicit step":
            wandb_run.log({"loss": float(i)}, step=i)
            if i % 7 == 0:
                wandb_run.log({"lr": 0.1}, step=i)  # a second call at the same step
        elif user == "own step metric":
            wandb_run.log({"loss": float(i), "my_step": i})
        elif user == "auto step":
            wandb_run.log({"loss": float(i)})

    _loop(listener, clock, 200, log, delay_s)
    listener.close()
    wandb_run.finish()
    found = read_run(run_file(tmp_path))
    rows = found["history"]
    _assert_every_record(listener.history, rows)
    losses = [row["loss"] for row in rows if "loss" in row]
    assert losses == ([] if user == "none" else [float(i) for i in range(200)])
    if user == "explicit step":
        assert [row["_step"] for row in rows if "loss" in row] == list(range(200))
        assert sum("lr" in row for row in rows) == len(range(0, 200, 7))
    iterations = [row["trainperf/iteration"] for row in rows if "trainperf/iteration" in row]
    assert iterations == sorted(iterations)  # in order
    ours = _ours(rows)
    for end in range(5, 201, 5):  # the data wait injected: 2 ms in every third 10 ms iteration
        injected_ms = 2.0 * sum(1 for i in range(end - 5, end) if i % 3 == 0)
        assert ours[float(end)]["trainperf/data_wait_pct"] == pytest.approx(100.0 * injected_ms / 50.0)
    steps = [row["_step"] for row in rows]
    assert steps == sorted(set(steps))
    assert {"name": "", "glob_name": "trainperf/*", "step_metric": "trainperf/iteration"} in found["metrics"]


def test_wandb_own_rows_advance_the_step_once_per_record_when_nobody_else_logs(wandb_run, tmp_path, clock):
    listener = PerformanceListener(10, sinks=[WandbSink(rows="own")], clock=clock)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SinkError)
        _loop(listener, clock, 100)
        listener.close()
    wandb_run.finish()
    found = read_run(run_file(tmp_path))
    rows = found["history"]
    assert rows, found
    assert [row["_step"] for row in rows] == list(range(10))
    _assert_every_record(listener.history, rows)


def test_wandb_joined_records_wait_for_the_next_row_and_the_rest_get_rows_at_close(wandb_run, tmp_path, clock):
    sink = WandbSink(rows="join")
    wandb_run.log({"loss": 1.0}, step=3)
    records = [_record(i, clock()) for i in (10, 20, 30)]
    sink.write_many(records[:2])  # one joins step 3, the other waits: the row holds one of ours
    wandb_run.log({"loss": 2.0}, step=4)
    sink.write_many(records[2:])  # the waiting one joins step 4, the newest waits
    wandb_run.log({"loss": 3.0}, step=5)
    sink.close()  # the last joins step 5
    wandb_run.finish()
    rows = read_run(run_file(tmp_path))["history"]
    assert [(row["_step"], row.get("loss"), row.get("trainperf/iteration")) for row in rows] == [
        (3, 1.0, 10.0), (4, 2.0, 20.0), (5, 3.0, 30.0)]


def test_wandb_at_close_a_row_holding_a_record_is_closed_before_the_rest_get_rows(wandb_run, tmp_path, clock):
    sink = WandbSink(rows="join")
    wandb_run.log({"loss": 1.0}, step=3)
    sink.write_many([_record(i, clock()) for i in (10, 20, 30)])
    sink.close()
    wandb_run.finish()
    rows = read_run(run_file(tmp_path))["history"]
    assert [(row["_step"], row.get("loss"), row.get("trainperf/iteration")) for row in rows] == [
        (3, 1.0, 10.0), (4, None, 20.0), (5, None, 30.0)]


def _record(iteration, timestamp, verdict=None, rank=None, **figures):
    base = dict(iteration=iteration, timestamp=timestamp, etl_ms=1.0, iteration_ms=10.0, samples_per_sec=800.0,
                batches_per_sec=100.0, score=None, gc=(), rank=rank, verdict=verdict, window_iterations=10,
                window_s=0.1, warmup=False)
    base.update(figures)
    return PerformanceRecord(**base)


def test_missing_and_non_finite_figures_are_left_out_and_the_verdict_is_a_metric(clock):
    record = _record(10, 5.0, verdict=Verdict("input-bound", 43.5, "data wait 43%"), etl_ms=math.nan,
                     cpu_pct=math.inf)
    metrics = record_metrics(record, "trainperf/")
    assert "trainperf/etl_ms" not in metrics and "trainperf/cpu_pct" not in metrics
    assert "trainperf/score" not in metrics and "trainperf/tokens_per_sec" not in metrics
    assert metrics["trainperf/iteration_ms"] == 10.0
    assert metrics["trainperf/verdict_pct"] == 43.5
    assert metrics["trainperf/verdict/input-bound_pct"] == 43.5
    assert all(math.isfinite(v) for v in metrics.values())


def test_wandb_verdict_text_in_the_summary_when_it_changes(wandb_run, tmp_path, clock):
    sink = WandbSink()
    seen = []
    verdicts = [("fine", "all well"), ("fine", "all well still"), ("input-bound", "data wait 43%"),
                ("input-bound", "data wait 44%"), ("fine", "well again")]
    for i, (kind, reason) in enumerate(verdicts):
        sink.write_many([_record(10 * (i + 1), clock(), verdict=Verdict(kind, 40.0 + i, reason))])
        seen.append(dict(wandb_run.summary).get("trainperf/verdict"))
    sink.close()
    wandb_run.finish()
    assert seen == ["fine (40%): all well", "fine (40%): all well", "input-bound (42%): data wait 43%",
                    "input-bound (42%): data wait 43%", "fine (44%): well again"]
    assert read_run(run_file(tmp_path))["summary"]["trainperf/verdict"] == "fine (44%): well again"


def test_ranks_log_their_own_under_their_prefix_only_with_all_ranks(wandb_run, tmp_path, clock):
    default, every = WandbSink(), WandbSink(all_ranks=True, prefix="tp/")
    records = [_record(10, clock(), rank=0), _record(10, clock(), rank=1), _record(20, clock(), rank=1)]
    default.write_many(records)
    every.write_many(records)
    default.close()
    every.close()
    wandb_run.finish()
    found = read_run(run_file(tmp_path))
    rows = found["history"]
    assert [row["trainperf/iteration"] for row in rows if "trainperf/iteration" in row] == [10.0]
    assert [row["tp/rank0/iteration"] for row in rows if "tp/rank0/iteration" in row] == [10.0]
    assert [row["tp/rank1/iteration"] for row in rows if "tp/rank1/iteration" in row] == [10.0, 20.0]
    assert {"name": "", "glob_name": "tp/rank1/*", "step_metric": "tp/rank1/iteration"} in found["metrics"]


CLUSTER = {"kind": "cluster", "iteration": 40, "line": "cluster: 2 ranks; ...; straggler rank 1 (data, +25.0 ms)",
           "stragglers": [{"rank": 1, "cause": "data", "excess_ms": 25.0, "evidence": "..."}], "time": 1000.0,
           "ranks": 2, "iteration_ms_min": 12.0, "iteration_ms_max": 37.0, "etl_ms_max": 26.0, "spread_pct": 208.3}


def test_rank_zero_logs_the_world_figures_and_the_straggler_line_after_the_records_before_it(wandb_run, tmp_path,
                                                                                              clock, mlflow_store):
    with mlflow.start_run() as run:
        sinks = [WandbSink(), MlflowSink()]
        listener = PerformanceListener(5, sinks=sinks, clock=clock)
        _loop(listener, clock, 40)
        listener.tell_sinks(CLUSTER)
        listener.close()
    wandb_run.finish()
    found = read_run(run_file(tmp_path))
    world = [row for row in found["history"] if "trainperf/world/ranks" in row]
    assert len(world) == 1 and world[0]["trainperf/iteration"] == 40.0
    assert world[0]["trainperf/world/straggler_rank"] == 1.0 and world[0]["trainperf/world/spread_pct"] == 208.3
    assert world[0]["trainperf/world/straggler/data_ms"] == 25.0
    assert found["history"].index(world[0]) > max(i for i, row in enumerate(found["history"])
                                                  if row.get("trainperf/iteration") == 40.0 and row is not world[0])
    assert found["summary"]["trainperf/world/line"] == CLUSTER["line"]
    history = mlflow_store.get_metric_history(run.info.run_id, "trainperf/world/straggler_excess_ms")
    assert [(m.step, m.value, m.timestamp) for m in history] == [(40, 25.0, 1_000_000)]
    assert mlflow_store.get_run(run.info.run_id).data.tags["trainperf.world.line"] == CLUSTER["line"]


@pytest.mark.parametrize("delay_s", [0.0, 0.001])
def test_mlflow_every_record_at_its_iteration_and_time_beside_the_users_metrics(mlflow_store, clock, delay_s):
    with mlflow.start_run() as run:
        listener = PerformanceListener(5, sinks=[MlflowSink()], clock=clock)
        _loop(listener, clock, 100, lambda i: mlflow.log_metric("loss", float(i), step=i), delay_s)
        listener.close()
    run_id = run.info.run_id
    loss = mlflow_store.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in loss) == list(range(100))
    records = listener.history
    names = set().union(*(record_metrics(r, "trainperf/") for r in records))
    for name in names:
        history = {m.step: m for m in mlflow_store.get_metric_history(run_id, name)}
        for record in records:
            expected = record_metrics(record, "trainperf/").get(name)
            if expected is None:
                assert record.iteration not in history
                continue
            point = history[record.iteration]
            assert point.value == pytest.approx(expected, rel=1e-12, abs=1e-12), name
            assert point.timestamp == int(record.timestamp * 1000)
    assert mlflow_store.get_run(run_id).data.tags["trainperf.verdict"].startswith(records[0].verdict.kind)


def test_mlflow_names_outside_its_characters_are_made_legal(mlflow_store, clock):
    assert mlflow_key("trainperf/mfu(%)") == "trainperf/mfu___"
    assert mlflow_key("trainperf/gc/PS Scavenge/ms") == "trainperf/gc/PS Scavenge/ms"
    from trainperf import GCStat

    with mlflow.start_run() as run:
        sink = MlflowSink()
        sink.write_many([_record(10, 5.0, gc=(GCStat("gen(0)", 2, 1.5),))])
    history = mlflow_store.get_metric_history(run.info.run_id, "trainperf/gc/gen_0_/ms")
    assert [(m.step, m.value, m.timestamp) for m in history] == [(10, 1.5, 5000)]


def test_mlflow_all_ranks_log_into_one_run_under_their_prefix(mlflow_store, clock):
    run = mlflow_store.create_run(mlflow_store.get_experiment_by_name("Default").experiment_id)
    zero, one = MlflowSink(run.info.run_id, all_ranks=True), MlflowSink(run, all_ranks=True)
    zero.write_many([_record(10, 5.0, rank=0)])
    one.write_many([_record(10, 5.0, rank=1, iteration_ms=30.0)])
    assert MlflowSink(run.info.run_id).write_many([_record(10, 5.0, rank=1)]) is None  # rank 1, not all ranks
    values = {name: [m.value for m in mlflow_store.get_metric_history(run.info.run_id, name)]
              for name in ("trainperf/rank0/iteration_ms", "trainperf/rank1/iteration_ms", "trainperf/iteration_ms")}
    assert values == {"trainperf/rank0/iteration_ms": [10.0], "trainperf/rank1/iteration_ms": [30.0],
                      "trainperf/iteration_ms": []}


def test_mlflow_skips_other_ranks_in_place_and_takes_any_cluster_line(mlflow_store, clock):
    with mlflow.start_run() as run:
        sink = MlflowSink()
        sink.write_many([_record(10, 5.0, rank=1), _record(10, 5.0, rank=0), _record(20, 6.0)])
        sink.on_cluster({"kind": "cluster", "stragglers": [], "line": "x" * 6000, "time": 2.0})
        sink.on_cluster({"kind": "silent", "rank": 1})
    run_id = run.info.run_id
    assert [m.step for m in mlflow_store.get_metric_history(run_id, "trainperf/iteration_ms")] == [10, 20]
    world = mlflow_store.get_metric_history(run_id, "trainperf/world/stragglers")
    assert [(m.step, m.value, m.timestamp) for m in world] == [(0, 0.0, 2000)]
    assert mlflow_store.get_run(run_id).data.tags["trainperf.world.line"] == "x" * 5000


def test_mlflow_closing_ends_only_the_run_the_sink_started(mlflow_store):
    with mlflow.start_run() as users:
        MlflowSink().close()
        assert mlflow.active_run().info.run_id == users.info.run_id
    assert mlflow_store.get_run(users.info.run_id).info.status == "FINISHED"  # ended by its own block
    for _ in range(4):  # run ids are random: either order of theirs and ours
        sink = MlflowSink(start=True)
        nested = mlflow.start_run(nested=True)
        sink.close()
        assert mlflow.active_run().info.run_id == nested.info.run_id
        assert mlflow_store.get_run(sink.run_id).info.status == "FINISHED"
        assert mlflow_store.get_run(nested.info.run_id).info.status == "RUNNING"
        mlflow.end_run()
        mlflow.end_run()


def test_no_active_run_is_an_error_and_start_true_starts_and_ends_one(wandb_run, mlflow_store, tmp_path):
    with pytest.raises(RuntimeError, match="no active MLflow run"):
        MlflowSink()
    sink = MlflowSink(start=True, init={"run_name": "perf"})
    run = mlflow_store.get_run(sink.run_id)
    assert run.info.run_name == "perf" and run.info.status == "RUNNING"
    sink.close()
    assert mlflow_store.get_run(sink.run_id).info.status == "FINISHED" and mlflow.active_run() is None
    wandb_run.finish()
    with pytest.raises(RuntimeError, match="no active W&B run"):
        WandbSink()
    sink = WandbSink(start=True, init={"project": "p", "dir": str(tmp_path / "own"), "mode": "offline"})
    assert wandb.run is sink.run
    sink.close()
    assert wandb.run is None


@pytest.mark.parametrize("make, args, error, match", [
    (WandbSink, {"rows": "mine"}, ValueError, "rows must be one of"),
    (WandbSink, {"init": {"project": "p"}}, ValueError, "give start=True"),
    (WandbSink, {"run": object()}, TypeError, "run must be a wandb Run"),
    (WandbSink, {"start": "yes"}, TypeError, "start"),
    (WandbSink, {"prefix": 3}, TypeError, "prefix"),
    (WandbSink, {"prefix": ""}, ValueError, "prefix must not be empty"),
    (WandbSink, {"run": "wandb_logger"}, TypeError, "experiment"),
    (WandbSink, {"all_ranks": 1}, TypeError, "all_ranks"),
    (MlflowSink, {"run": 42}, TypeError, "run must be an mlflow Run or a run id"),
    (MlflowSink, {"run": ""}, TypeError, "run must be an mlflow Run or a run id"),
    (MlflowSink, {"run": "abc", "start": True}, ValueError, "not both"),
    (MlflowSink, {"init": ["x"], "start": True}, TypeError, "init must be a mapping"),
])
def test_bad_arguments_are_named(wandb_run, make, args, error, match):
    with pytest.raises(error, match=match):
        make(**args)


class _Hanging:
    """A W&B run whose ``log`` hangs until released, or raises."""

    def __init__(self, raises=False):
        self.release = threading.Event()
        self.raises = raises
        self.logged = 0
        self.summary = {}

    def log(self, data, commit=None):
        if self.raises:
            raise ConnectionError("tracker unreachable")
        self.release.wait()
        self.logged += 1

    def define_metric(self, *args, **kwargs):
        pass

    @property
    def step(self):
        return 0


def test_a_tracker_that_hangs_never_slows_training(clock):
    """The same loop with a sink whose tracker hangs and with none: the training thread's time is the same."""
    import statistics

    def loop(sinks):
        listener = PerformanceListener(1, sinks=sinks, clock=clock)
        started = time.perf_counter()
        for _ in range(300):
            clock.advance(0.01)
            listener.record_iteration(8)
        took = time.perf_counter() - started
        return listener, took

    bare, hung = [], []
    for _ in range(5):
        listener, took = loop([])
        listener.close()
        bare.append(took)
        run = _Hanging()
        listener, took = loop([WandbSink(run, rows="own")])
        hung.append(took)
        assert run.logged == 0  # the tracker was still hanging throughout
        run.release.set()
        listener.close()
    assert statistics.median(hung) < statistics.median(bare) * 1.5 + 0.005, (bare, hung)


def test_a_failing_tracker_is_said_once_and_the_other_sinks_get_every_record(clock):
    kept = MemorySink()
    listener = PerformanceListener(1, sinks=[WandbSink(_Hanging(raises=True), rows="own"), kept], clock=clock)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(50):
            clock.advance(0.01)
            listener.record_iteration(8)
        listener.close()
    said = [w for w in caught if issubclass(w.category, SinkError)]
    assert len(said) == 1 and "tracker unreachable" in str(said[0].message)
    assert len(kept) == 50


def test_nothing_imports_the_trackers_unless_a_sink_is_made():
    code = ("import sys, trainperf, trainperf.sinks, trainperf.torch;"
            "from trainperf.sinks import WandbSink, MlflowSink;"
            "print(sorted(m for m in ('wandb', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("make, extra", [(WandbSink, "wandb"), (MlflowSink, "mlflow")])
def test_a_missing_tracker_says_what_to_install(monkeypatch, make, extra):
    monkeypatch.setitem(sys.modules, extra, None)
    with pytest.raises(ImportError, match=rf"pip install 'trainperf\[{extra}\]'"):
        make()
