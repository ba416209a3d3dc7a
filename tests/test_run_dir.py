from __future__ import annotations

import json

import pytest

from _simulate import BASE, run_dir_sink, simulate
from trainperf import PerformanceListener, PerformanceRecord, RunDirSink
from trainperf.ranks._report._load import load_run
from trainperf.ranks._report._read import objects


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def record(iteration, ms, **kw):
    return PerformanceRecord(iteration=iteration, window_iterations=10, window_s=ms / 100, warmup=False,
                             timestamp=BASE + iteration, iteration_ms=ms, **kw)


def test_sink_writes_meta_and_one_window_line_per_record(tmp_path):
    sink = RunDirSink(tmp_path, rank=2, local_rank=0, world_size=4, run_name="exp", wall_clock=lambda: BASE)
    meta = json.loads((tmp_path / "rank-2" / "meta.json").read_text())
    assert meta["schema"] == 1 and meta["rank"] == 2 and meta["local_rank"] == 0 and meta["world_size"] == 4
    assert meta["run_name"] == "exp" and meta["started"] == BASE and meta["ended"] is None
    assert isinstance(meta["host"], str) and isinstance(meta["pid"], int)
    sink(record(10, 12.5, extra={"forward_ms": 3.0}))
    sink(record(20, float("nan")))
    sink.close()
    windows = lines(tmp_path / "rank-2" / "windows.jsonl")
    assert [w["iteration"] for w in windows] == [10, 20]
    first = windows[0]
    assert {k: first[k] for k in ("iteration", "window_iterations", "window_s", "warmup", "timestamp",
                                  "iteration_ms", "etl_ms", "gc", "batches", "verdict", "extra")} == {
        "iteration": 10, "window_iterations": 10, "window_s": 0.125, "warmup": False, "timestamp": BASE + 10,
        "iteration_ms": 12.5, "etl_ms": None, "gc": {}, "batches": 0, "verdict": None, "extra": {"forward_ms": 3.0}}
    assert len(first) == 69  # every field of the record, none added or dropped
    assert {"tokens_padded", "tokens_loss", "padding_share", "mfu_real"} <= set(first)
    assert windows[1]["iteration_ms"] == "NaN"  # strict JSON, as JsonLinesSink writes it
    meta = json.loads((tmp_path / "rank-2" / "meta.json").read_text())
    assert meta["ended"] == BASE and meta["timeline_capped"] is False
    sink.close()  # idempotent


def test_timeline_spans_follow_each_other_in_phase_order(tmp_path):
    with RunDirSink(tmp_path, rank=0) as sink:
        assert sink.spans([(1, 100.0, 0.010, 0.020, 0.005), (2, 100.035, 0.0, 0.030, 0.0)])
        sink.spans([(3, 100.1, 0.001, 0.0, 0.0, {"forward": 0.01, "backward": 0.02, "step": 0.003})])
    spans = lines(tmp_path / "rank-0" / "timeline.jsonl")
    assert [(s["i"], s["ph"]) for s in spans] == [
        (1, "other"), (1, "data"), (1, "compute"), (2, "compute"), (3, "data"), (3, "forward"), (3, "backward"),
        (3, "step")]
    assert spans[0]["t"] == 100.0 and spans[1]["t"] == pytest.approx(100.005)
    assert spans[2]["t"] == pytest.approx(100.015) and spans[2]["d"] == pytest.approx(0.020)


def test_timeline_keeps_the_first_and_the_slowest_windows_under_a_cap(tmp_path):
    sink = RunDirSink(tmp_path, rank=0, slowest_kept=3, max_timeline_windows=6)
    kept = [sink.spans([(i, float(i), 0.0, ms / 1000, 0.0)]) for i, ms in enumerate(
        [10, 10, 10, 10, 50, 10, 60, 10, 55, 70, 80, 90, 100], start=1)]
    # the first three kept; then only windows slower than the 3rd slowest so far; the cap of 6 is reached at 70 ms
    assert kept == [True, True, True, False, True, False, True, False, True, False, False, False, False]
    sink.close()
    meta = json.loads((tmp_path / "rank-0" / "meta.json").read_text())
    assert meta["timeline_capped"] is True and meta["timeline_windows"] == 6


def test_listener_with_run_dir_writes_windows_and_spans_on_wall_time(tmp_path, clock):
    listener = PerformanceListener(5, sinks=[], clock=clock, wall_clock=lambda: clock.now + 1000.0, rank=1,
                                   run_dir=tmp_path)
    listener.start()
    for _ in range(10):
        clock.advance(0.002)
        started = clock.now
        clock.advance(0.008)
        listener.record_iteration(samples=4, started=started)
    listener.close()
    windows = lines(tmp_path / "rank-1" / "windows.jsonl")
    assert [(w["iteration"], w["rank"]) for w in windows] == [(5, 1), (10, 1)]
    spans = lines(tmp_path / "rank-1" / "timeline.jsonl")
    assert [s["ph"] for s in spans[:2]] == ["data", "compute"]
    assert spans[0]["i"] == 1 and spans[-1]["i"] == 10
    assert spans[0]["t"] == pytest.approx(1100.0) and spans[0]["d"] == pytest.approx(0.002)
    assert spans[1]["t"] == pytest.approx(1100.002) and spans[1]["d"] == pytest.approx(0.008)
    assert json.loads((tmp_path / "rank-1" / "meta.json").read_text())["ended"] == pytest.approx(1100.1)


def test_listener_run_dir_defaults_to_rank_0(tmp_path, clock, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    PerformanceListener(2, sinks=[], clock=clock, run_dir=tmp_path).close()
    meta = json.loads((tmp_path / "rank-0" / "meta.json").read_text())
    assert (meta["rank"], meta["local_rank"], meta["world_size"]) == (0, 0, 1)


def test_timeline_memory_and_file_stay_bounded_over_a_long_run(tmp_path):
    listeners = simulate(tmp_path, ranks=1, iterations=3000, frequency=10, forward_ms=lambda r, i: 10.0 + (i % 7))
    sink = run_dir_sink(listeners[0])
    assert sink.timeline_windows <= sink.max_timeline_windows and len(sink._slowest) <= sink.slowest_kept
    spans = lines(tmp_path / "rank-0" / "timeline.jsonl")
    assert len({s["i"] for s in spans}) <= 10 * sink.max_timeline_windows
    assert len(lines(tmp_path / "rank-0" / "windows.jsonl")) == 300


def test_clock_and_events_lines(tmp_path):
    with RunDirSink(tmp_path, rank=0, wall_clock=lambda: 5.0) as sink:
        sink.clock(1.0, 0.25, 0.001, "aligned")
        sink.clock(2.0, None, None, "unknown")
        sink.event({"kind": "silent", "rank": 3, "last_seen": 4.0})
    assert lines(tmp_path / "rank-0" / "clock.jsonl") == [
        {"t": 1.0, "offset_s": 0.25, "uncertainty_s": 0.001, "status": "aligned"},
        {"t": 2.0, "offset_s": None, "uncertainty_s": None, "status": "unknown"}]
    assert lines(tmp_path / "rank-0" / "events.jsonl") == [{"kind": "silent", "rank": 3, "last_seen": 4.0, "t": 5.0}]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"rank": -1}, "rank must be a non-negative int, got -1"),
    ({"rank": True}, "rank must be a non-negative int, got True"),
    ({"rank": 0, "local_rank": "0"}, "local_rank must be a non-negative int or None, got '0'"),
    ({"rank": 4, "world_size": 4}, "world_size must be greater than rank 4, got 4"),
    ({"rank": 0, "max_timeline_windows": 0}, "max_timeline_windows must be a positive int, got 0"),
    ({"rank": 0, "slowest_kept": 1.5}, "slowest_kept must be a positive int, got 1.5"),
])
def test_sink_arguments_are_checked(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        RunDirSink(tmp_path, **kwargs)


def test_sink_checks_types_and_status(tmp_path):
    with pytest.raises(TypeError, match="run_dir must be a str or os.PathLike, got 3"):
        RunDirSink(3, rank=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="run_name must be a str or None, got 5"):
        RunDirSink(tmp_path, rank=0, run_name=5)  # type: ignore[arg-type]
    sink = RunDirSink(tmp_path, rank=0)
    with pytest.raises(ValueError, match="status must be one of reference, aligned, unknown, got 'ok'"):
        sink.clock(1.0, 0.0, 0.0, "ok")
    with pytest.raises(TypeError, match="offset_s must be a number or None, got '1'"):
        sink.clock(1.0, "1", 0.0, "aligned")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="event must be a mapping with a str 'kind'"):
        sink.event({"rank": 1})
    sink.close()
    with pytest.raises(ValueError, match="closed"):
        sink(record(10, 1.0))


def test_readers_skip_cut_and_hostile_lines(tmp_path):
    listeners = simulate(tmp_path, ranks=2, iterations=40, frequency=10)
    assert all(listener.closed for listener in listeners)
    rank1 = tmp_path / "rank-1"
    with open(rank1 / "windows.jsonl", "a") as f:
        f.write('[1, 2]\n"text"\n{"iteration": "50", "window_iterations": 10}\n'
                '{"iteration": 60, "window_iterations": 10, "iteration_ms": "fast", "timestamp": true}\n'
                '{"iteration": 70, "window_it')
    with open(rank1 / "timeline.jsonl", "a") as f:
        f.write('{"i": 41, "ph": "<script>", "t": 1, "d": 1}\n{"i": 41, "ph": "data", "t": "x", "d": 1}\nnull\n{"i": 4')
    (rank1 / "clock.jsonl").write_text('{"t": 1, "offset_s": 1e999, "status": "aligned"}\n{"t": "x"}\n')
    (tmp_path / "rank-0" / "meta.json").write_text("[not json")
    read = list(objects(rank1 / "windows.jsonl"))
    assert read.count(None) == 3 and len(read) == 9  # 4 windows, a bad iteration, and the one with bad figures
    ranks = load_run(tmp_path).ranks
    assert [r.rank for r in ranks] == [0, 1]
    assert ranks[1].n_windows == 5 and ranks[1].skipped["windows"] == 4
    assert ranks[1].skipped["timeline"] == 4 and ranks[1].clock.status == "unknown"
    assert ranks[0].meta == {}


def test_run_dir_files_round_trip_and_refuse_paths_outside_rank_folders(tmp_path):
    from trainperf import run_dir_files, write_run_dir_files

    for rank in (0, 1):
        with RunDirSink(tmp_path / "run", rank=rank, world_size=2) as sink:
            sink.event({"kind": "cluster"})
    files = run_dir_files(tmp_path / "run")
    assert sorted(files) == ["rank-0/events.jsonl", "rank-0/goodput.json", "rank-0/meta.json", "rank-1/events.jsonl",
                             "rank-1/goodput.json", "rank-1/meta.json"]
    copy = write_run_dir_files(files, tmp_path / "copy")
    assert run_dir_files(copy) == files
    for bad in ("../x", "rank-0/../../x", "/etc/x", "rank-0/.."):
        with pytest.raises(ValueError, match="rank-<r>/<name>"):
            write_run_dir_files({bad: b""}, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_a_sink_moves_to_the_rank_set_before_it_wrote_lines(tmp_path):
    sink = RunDirSink(tmp_path, rank=0)
    sink.set_rank(2)
    assert not (tmp_path / "rank-0").exists()
    assert json.loads((tmp_path / "rank-2" / "meta.json").read_text())["rank"] == 2
    sink.event({"kind": "cluster"})
    with pytest.raises(ValueError, match="cannot move"):
        sink.set_rank(3)
    sink.close()


def test_untimed_collectives_are_written_to_the_meta_data_at_once_and_kept_at_close(tmp_path):
    sink = RunDirSink(tmp_path, rank=1, wall_clock=lambda: BASE)
    with pytest.raises(ValueError, match="why must be a non-empty str, got ''"):
        sink.set_collectives_untimed("")
    assert "collectives_untimed" not in json.loads((tmp_path / "rank-1" / "meta.json").read_text())
    sink.set_collectives_untimed("FSDP2: fully_shard")
    assert json.loads((tmp_path / "rank-1" / "meta.json").read_text())["collectives_untimed"] == "FSDP2: fully_shard"
    sink.close()
    meta = json.loads((tmp_path / "rank-1" / "meta.json").read_text())
    assert meta["collectives_untimed"] == "FSDP2: fully_shard" and meta["ended"] == BASE
    assert load_run(tmp_path).ranks[0].meta["collectives_untimed"] == "FSDP2: fully_shard"


def test_a_line_cut_by_a_crash_does_not_glue_to_the_next_runs_first_line(tmp_path):
    """A restarted run appends to the rank's files; a line its killed predecessor left unfinished ends
    first, so the new lines read back whole."""
    sink = RunDirSink(tmp_path, rank=0, wall_clock=lambda: BASE)
    sink(record(10, 12.5))
    sink(record(20, 13.0))
    sink.spans([(21, BASE, 0.001, 0.01, 0.0)])
    sink.close()
    for name in ("windows.jsonl", "timeline.jsonl"):
        path = tmp_path / "rank-0" / name
        path.write_bytes(path.read_bytes()[:-7])  # the last line's end never reached the disk
    again = RunDirSink(tmp_path, rank=0, wall_clock=lambda: BASE)
    again(record(10, 14.0))
    again.spans([(1, BASE, 0.002, 0.02, 0.0)])
    again.close()
    windows = (tmp_path / "rank-0" / "windows.jsonl").read_text().splitlines()
    assert json.loads(windows[0])["iteration_ms"] == 12.5 and json.loads(windows[-1])["iteration_ms"] == 14.0
    assert len(windows) == 3  # the cut line stays on its own
    spans = (tmp_path / "rank-0" / "timeline.jsonl").read_text().splitlines()
    assert [json.loads(line)["i"] for line in spans[-2:]] == [1, 1]
