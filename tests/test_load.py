"""Reading one rank's folder back, with hand-written files: what each file's lines become, which
lines are skipped and counted, and how a rank's times move onto rank 0's clock."""

from __future__ import annotations

import json
import math

import pytest

from trainperf.ranks._report._load import Clock, load_run, read_rank
from trainperf.ranks._report._read import num, objects


def write(folder, name, lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def test_num_takes_finite_numbers_only():
    assert [num(v) for v in (2, 2.5, True, "3", None, math.nan, math.inf)] == [2.0, 2.5, None, None, None, None, None]


def test_objects_are_read_one_at_a_time_and_what_is_not_one_is_none(tmp_path):
    write(tmp_path, "e.jsonl", [{"a": 1}, "[1, 2]", "{cut", "", {"b": 2}])
    assert list(objects(tmp_path / "e.jsonl")) == [{"a": 1}, None, None, {"b": 2}]
    assert list(objects(tmp_path / "missing.jsonl")) == []


def test_offsets_between_estimates_are_interpolated_and_held_outside():
    clock = Clock([10.0, 20.0], [1.0, 3.0], [0.001, 0.001], "aligned")
    assert [clock.offset_at(t) for t in (5.0, 10.0, 15.0, 20.0, 25.0)] == [1.0, 1.0, 2.0, 3.0, 3.0]
    assert Clock().offset_at(1.0) == 0.0
    assert Clock([10.0, 10.0], [1.0, 5.0]).offset_at(10.0) == 1.0  # the first of equal times


def test_meta_keeps_typed_fields_only(tmp_path):
    write(tmp_path / "rank-0", "meta.json", [{"host": "h" * 300, "run_name": 5, "pid": True, "local_rank": 2,
                                              "world_size": "4", "timeline_windows": 7, "started": 1.5,
                                              "ended": math.inf, "timeline_capped": 1}])
    meta = read_rank(tmp_path / "rank-0", 0).meta
    assert meta == {"host": "h" * 200, "run_name": None, "pid": None, "local_rank": 2, "world_size": None,
                    "timeline_windows": 7, "started": 1.5, "ended": None, "timeline_capped": False}
    write(tmp_path / "rank-1", "meta.json", ["[1]"])
    assert read_rank(tmp_path / "rank-1", 1).meta == {}


def test_windows_need_whole_increasing_iterations_and_a_positive_count(tmp_path):
    good = {"iteration": 10, "window_iterations": 10, "window_s": 0.5, "timestamp": 100.0, "etl_ms": 2.0,
            "warmup": True, "etl_source": "gap", "extra": {"forward_ms": 3.0, "other": 1}}
    write(tmp_path, "windows.jsonl", [
        good,
        {**good, "iteration": 10},  # not after the last
        {**good, "iteration": 15, "window_iterations": 0},
        {**good, "iteration": True},
        {**good, "iteration": 20, "window_iterations": True},
        {**good, "iteration": 20.0},
        {**good, "iteration": 20, "warmup": 1, "etl_source": "loader", "etl_ms": "x", "extra": [1]},
    ])
    rank = read_rank(tmp_path, 0)
    w = rank.windows
    assert list(w["iteration"]) == [10.0, 20.0] and rank.skipped["windows"] == 5
    assert list(w["warmup"]) == [1.0, 0.0] and list(w["gap"]) == [1.0, 0.0]
    assert w["etl_ms"][0] == 2.0 and math.isnan(w["etl_ms"][1])
    assert w["forward_ms"][0] == 3.0 and math.isnan(w["forward_ms"][1])


def test_spans_need_a_known_phase_increasing_iterations_and_a_length(tmp_path):
    write(tmp_path, "timeline.jsonl", [
        {"i": 1, "ph": "data", "t": 1.0, "d": 0.5},
        {"i": 1, "ph": "compute", "t": 1.5, "d": 0.25},
        {"i": 2, "ph": "nap", "t": 2.0, "d": 0.1},
        {"i": 0, "ph": "data", "t": 2.0, "d": 0.1},
        {"i": 2, "ph": "data", "t": 2.0, "d": -0.1},
        {"i": 2, "ph": "data", "t": "x", "d": 0.1},
        {"i": True, "ph": "data", "t": 2.0, "d": 0.1},
        {"i": 2**62 + 1, "ph": "data", "t": 2.0, "d": 0.1},
        {"i": 2, "ph": "other", "t": 2.0, "d": 0.0},
        "not json",
        {"i": 3, "t": 2.0, "d": 0.0},
    ])
    rank = read_rank(tmp_path, 0)
    assert list(rank.span_iter) == [1, 1, 2] and list(rank.span_t) == [1.0, 1.5, 2.0]
    assert list(rank.span_d) == [0.5, 0.25, 0.0] and rank.skipped["timeline"] == 8


def test_clock_estimates(tmp_path):
    write(tmp_path, "clock.jsonl", [
        {"t": 20.0, "offset_s": 2.0, "uncertainty_s": 0.001, "status": "aligned"},
        {"t": 10.0, "offset_s": 1.0, "status": "aligned"},
        {"t": 15.0, "status": "aligned"},  # no offset: no estimate
        {"t": 16.0, "offset_s": 9.0, "status": "guessed"},
        {"offset_s": 9.0, "status": "aligned"},
    ])
    clock = read_rank(tmp_path, 1).clock
    assert (clock.times, clock.offsets, clock.status) == ([10.0, 20.0], [1.0, 2.0], "aligned")
    assert math.isnan(clock.uncertainties[0]) and clock.uncertainties[1] == 0.001
    assert read_rank(tmp_path, 1).skipped["clock"] == 2
    write(tmp_path / "r0", "clock.jsonl", [{"t": 5.0, "status": "reference"}])
    reference = read_rank(tmp_path / "r0", 0).clock
    assert (reference.offsets, reference.uncertainties, reference.status) == ([0.0], [0.0], "reference")
    assert read_rank(tmp_path / "none", 2).clock.status == "unknown"


def test_a_rank_moves_onto_rank_0s_clock(tmp_path):
    r1 = tmp_path / "rank-1"
    write(r1, "meta.json", [{"started": 10.0, "ended": 30.0}])
    write(r1, "windows.jsonl", [{"iteration": 1, "window_iterations": 1, "timestamp": 15.0}])
    write(r1, "timeline.jsonl", [{"i": 1, "ph": "data", "t": 15.0, "d": 0.1}])
    write(r1, "clock.jsonl", [{"t": 10.0, "offset_s": 1.0, "status": "aligned"},
                              {"t": 20.0, "offset_s": 3.0, "status": "aligned"}])
    write(r1, "events.jsonl", [{"t": 20.0, "kind": "silent", "rank": 3, "last_seen": 10.0},
                               {"t": "x", "kind": "odd"}])
    steady = tmp_path / "rank-0"
    write(steady, "windows.jsonl", [{"iteration": 1, "window_iterations": 1, "timestamp": 15.0}])
    write(steady, "timeline.jsonl", [{"i": 1, "ph": "data", "t": 15.0, "d": 0.1}])
    write(steady, "clock.jsonl", [{"t": 10.0, "offset_s": 0.5, "status": "aligned"},
                                  {"t": 20.0, "offset_s": 0.5, "status": "aligned"}])
    (tmp_path / "rank-2").write_text("a file, not a folder")
    (tmp_path / "notes").mkdir()
    run = load_run(tmp_path)
    ranks = run.ranks
    assert [r.rank for r in ranks] == [0, 1] and run.ignored == [("rank-2", "not a folder")]
    zero, one = ranks
    assert zero.windows["timestamp"][0] == 15.5 and zero.span_t[0] == 15.5  # a constant offset
    assert one.windows["timestamp"][0] == 17.0 and one.span_t[0] == 17.0  # 15 s: halfway, +2 s
    assert (one.meta["started"], one.meta["ended"]) == (11.0, 33.0)
    assert one.events == [{"kind": "silent", "rank": 3, "t": 23.0, "last_seen": 11.0}]  # no other kind is kept


def test_a_folder_without_ranks_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist or is not a folder"):
        load_run(tmp_path / "nope")
    (tmp_path / "rank-x").mkdir()
    with pytest.raises(ValueError, match=r"holds no rank-<r> folder: not a trainperf run directory; 'rank-x' left "
                                         r"out: not rank-<number> \(digits 0-9\)$"):
        load_run(tmp_path)
    (tmp_path / "rank-2147483648").mkdir()  # beyond the ranks torch.distributed numbers
    with pytest.raises(ValueError, match="'rank-2147483648' left out: beyond rank 2147483647"):
        load_run(tmp_path)


def test_offsets_further_along_are_interpolated_between_their_own_estimates():
    clock = Clock([10.0, 20.0, 30.0, 40.0], [0.0, 1.0, 3.0, 7.0])
    assert clock.offset_at(25.0) == 2.0 and clock.offset_at(35.0) == 5.0


def test_a_capped_timeline_is_said_only_by_true(tmp_path):
    write(tmp_path, "meta.json", [{"timeline_capped": True}])
    assert read_rank(tmp_path, 0).meta["timeline_capped"] is True


def test_windows_from_iteration_0_and_none_going_back(tmp_path):
    w = {"window_iterations": 1}
    write(tmp_path, "windows.jsonl", [{**w, "iteration": 0}, {**w, "iteration": 10}, {**w, "iteration": 5},
                                      {**w, "iteration": 11}])
    rank = read_rank(tmp_path, 0)
    assert list(rank.windows["iteration"]) == [0.0, 10.0, 11.0] and rank.skipped["windows"] == 1


def test_spans_from_iteration_0_up_to_2_to_the_62(tmp_path):
    span = {"ph": "data", "t": 1.0, "d": 0.1}
    write(tmp_path, "timeline.jsonl", [{**span, "i": 0}, {**span, "i": 200}, {**span, "i": 2**62},
                                       {**span, "i": 2**62 + 1}])
    rank = read_rank(tmp_path, 0)
    assert list(rank.span_iter) == [0, 200, 2**62] and rank.skipped["timeline"] == 1


def test_an_unknown_clock_estimate_is_no_estimate(tmp_path):
    write(tmp_path, "clock.jsonl", [{"t": 10.0, "offset_s": 1.0, "status": "unknown"}])
    clock = read_rank(tmp_path, 0).clock
    assert (clock.times, clock.status) == ([], "unknown")


def test_events_keep_the_first_silent_word_per_rank_named_up_to_the_runs_budget(tmp_path, monkeypatch):
    from trainperf.ranks._report import _load

    monkeypatch.setattr(_load, "MAX_SILENT", 3)
    silent = [{"kind": "silent", "rank": r, "t": 5.0 + r, "last_seen": 1.0 + k} for k in (0, 1) for r in (2, 3, 4)]
    write(tmp_path / "rank-0", "events.jsonl", [*silent, {"kind": "cluster", "line": "x" * 1000},
                                               {"kind": "silent", "rank": True, "t": 1.0}])
    write(tmp_path / "rank-1", "events.jsonl", [{"kind": "silent", "rank": 9, "t": 9.0}])
    zero, one = load_run(tmp_path).ranks
    assert [(e["rank"], e["last_seen"]) for e in zero.events] == [(2, 1.0), (3, 1.0), (4, 1.0)]
    assert zero.skipped["events"] == 1  # the rank that is a bool; the cluster line is valid, not the report's
    assert one.events == []  # the run's budget is spent
