"""``trainperf report`` on run directories whose files hold what no run writes: never a traceback,
what cannot be read is skipped and counted, and every format is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainperf import PerformanceListener
from trainperf.ranks import build_report
from trainperf.ranks._report import write_report


@pytest.fixture
def run(tmp_path, clock) -> Path:
    root = tmp_path / "run"
    for rank in (0, 1):
        listener = PerformanceListener(2, run_dir=root, rank=rank, clock=clock, sinks=[], report_hardware=False,
                                       wall_clock=lambda: 1.7e9)
        for _ in range(8):
            clock.advance(0.01 * (rank + 1))
            listener.record_iteration(samples=4)
        listener.close()
    return root


DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = {
    "windows nested deeper than the interpreter reads": ("rank-1/windows.jsonl", DEEP, "windows"),
    "events nested deeper than the interpreter reads": ("rank-0/events.jsonl", '{"a":' + DEEP + "}", "events"),
    "spans nested deeper than the interpreter reads": ("rank-1/timeline.jsonl", DEEP, "timeline"),
    "clock estimates nested deeper than the interpreter reads": ("rank-1/clock.jsonl", DEEP, "clock"),
    "a 309-digit iteration": ("rank-1/windows.jsonl",
                              '{"iteration": ' + "9" * 309 + ', "window_iterations": 2}', "windows"),
    "a 400-digit figure": ("rank-1/windows.jsonl", json.dumps({"iteration": 100, "window_iterations": 2,
                                                              "window_s": 10**309, "etl_ms": 10**400}), None),
    "an event in the year 10**292": ("rank-0/events.jsonl",
                                     json.dumps({"kind": "silent", "rank": 1, "t": 1e300, "last_seen": 1e300}),
                                     "events"),
    "a span whose end overflows": ("rank-1/timeline.jsonl", json.dumps({"i": 100, "ph": "data", "t": 1e308,
                                                                        "d": 1e308}), "timeline"),
    "a clock offset that overflows a time": ("rank-1/clock.jsonl", json.dumps(
        {"t": 1.7e9, "offset_s": 1.7e308, "status": "aligned", "uncertainty_s": 0.001}), "clock"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_line_is_skipped_and_counted_and_every_format_is_written(run, tmp_path, case):
    file, line, counted_in = HOSTILE[case]
    before = {r["rank"]: r["skipped"] for r in build_report(run)["ranks"]}
    with open(run / file, "a") as f:
        f.write(line + "\n")
    report = build_report(run)
    json.dumps(report, allow_nan=False)  # every figure finite
    after = {r["rank"]: r["skipped"] for r in report["ranks"]}
    if counted_in is not None:
        rank = int(file[5])
        assert after[rank][counted_in] == before[rank][counted_in] + 1, (before, after)
    for fmt, out in (("html", "r.html"), ("json", "r.json"), ("perfetto", "r.trace.json"), ("perfetto", "pf/")):
        written = write_report(run, tmp_path / out if not out.endswith("/") else f"{tmp_path}/{out}", fmt)
        assert written and all(p.stat().st_size > 0 for p in written)


def test_a_start_and_an_offset_that_would_overflow_are_left_out_not_the_whole_report(run, tmp_path):
    meta = json.loads((run / "rank-1" / "meta.json").read_text())
    meta.update(started=1e308, ended=1e308)
    (run / "rank-1" / "meta.json").write_text(json.dumps(meta))
    with open(run / "rank-1" / "clock.jsonl", "a") as f:
        f.write(json.dumps({"t": 1e308, "offset_s": 1e308, "status": "aligned", "uncertainty_s": 0.001}) + "\n")
    report = build_report(run)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    json.dumps(report, allow_nan=False)
    for fmt, out in (("html", "r.html"), ("perfetto", "r.trace.json")):
        assert write_report(run, tmp_path / out, fmt)


def _report_cli(run, out):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "trainperf", "report", str(run), "-o", str(out)], capture_output=True,
                          text=True, timeout=120)


def test_skipped_lines_and_unreadable_files_are_said_per_rank_on_the_page_and_the_command_line(run, tmp_path):
    with open(run / "rank-1" / "windows.jsonl", "a") as f:
        f.write("not json\n" * 3 + '{"cut": \n')
    (run / "rank-0" / "clock.jsonl").unlink(missing_ok=True)
    (run / "rank-0" / "clock.jsonl").mkdir()  # a folder named like a run file
    done = _report_cli(run, tmp_path / "r.html")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text()
    for words in ("rank 1: skipped 4 lines of windows (cut, not JSON, or values no run writes)",
                  "rank 0: clock.jsonl could not be read: a folder, not read"):
        assert words in page and f"note: {words}" in done.stderr, words
    report = build_report(run)
    assert report["ranks"][1]["skipped"]["windows"] == 4


def test_a_clean_run_says_every_file_was_read(run, tmp_path):
    done = _report_cli(run, tmp_path / "r.html")
    assert "Every file of every rank was read whole." in (tmp_path / "r.html").read_text()
    assert "note:" not in done.stderr


def test_missing_ranks_are_named_and_a_duplicate_folder_is_named_not_read(run, tmp_path):
    import shutil

    for rank in (5, 99):
        shutil.copytree(run / "rank-1", run / f"rank-{rank}")
    shutil.copytree(run / "rank-1", run / "rank-01")
    with open(run / "rank-01" / "windows.jsonl", "a") as f:
        f.write("garbage\n")
    report = build_report(run)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 5, 99]
    assert report["missing_ranks_total"] == 96 and report["missing_ranks"] == [[2, 4], [6, 98]]
    assert report["ranks"][1]["folder"] == "rank-1" and report["ranks"][1]["duplicates"] == ["rank-01"]
    assert report["ranks"][1]["skipped"]["windows"] == 0  # rank-01's garbage was not read
    from trainperf.ranks._report._notes import read_notes

    notes = read_notes(report)
    assert notes[0] == "ranks 2-4, 6-98 absent (96 ranks without a folder)"
    assert "rank 1: folder rank-01 names the same rank as rank-1; only rank-1 was read" in notes


def test_a_rank_restarted_into_its_folder_keeps_both_runs_apart(run, tmp_path, clock):
    listener = PerformanceListener(2, run_dir=run, rank=1, clock=clock, sinks=[], report_hardware=False,
                                   wall_clock=lambda: 1.8e9)
    for _ in range(4):  # the restarted run counts from 1 again, in the same folder
        clock.advance(0.05)
        listener.record_iteration(samples=4)
    listener.close()
    report = build_report(run)
    rank = report["ranks"][1]
    assert rank["attempts_total"] == 2
    assert rank["attempts"] == [{"first": 2, "last": 8, "windows": 4}, {"first": 2, "last": 4, "windows": 2}]
    assert rank["iterations"] == 4  # the report reads the newest run, whole
    from trainperf.ranks._report._notes import read_notes

    assert any(n.startswith("rank 1: 2 runs wrote into its folder (restarted); the report reads the last, "
                            "iterations 2-4; earlier: iterations 2-8 (4 windows)") for n in read_notes(report))


def test_a_fifo_or_a_device_named_like_a_run_file_is_refused_not_read(run, tmp_path):
    import os
    import threading

    (run / "rank-1" / "timeline.jsonl").unlink()
    os.mkfifo(run / "rank-1" / "timeline.jsonl")  # reading it would wait forever for a writer
    (run / "rank-0" / "events.jsonl").unlink(missing_ok=True)
    os.symlink("/dev/zero", run / "rank-0" / "events.jsonl")  # reading it would never end
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(report=build_report(run)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the report hung on a FIFO or a device"
    report = result["report"]
    assert report["ranks"][1]["unreadable"] == {"timeline.jsonl": "a FIFO, not read"}
    assert report["ranks"][0]["unreadable"] == {"events.jsonl": "not a regular file, not read"}


def test_past_the_runs_budget_windows_are_sampled_over_the_whole_run_and_spans_cut_both_said(run, monkeypatch):
    from trainperf.ranks._report import _load
    from trainperf.ranks._report._notes import read_notes

    monkeypatch.setattr(_load, "RUN_WINDOWS", 6)  # two ranks: 3 windows each at most
    monkeypatch.setattr(_load, "MIN_WINDOWS_PER_RANK", 3)
    monkeypatch.setattr(_load, "RUN_SPANS", 10)
    monkeypatch.setattr(_load, "MIN_SPANS_PER_RANK", 5)
    ranks = _load.load_run(run).ranks
    for rank in ranks:  # 4 windows each (iterations 2, 4, 6, 8): the 3rd made it drop every other one
        assert rank.window_stride == 2 and list(rank.windows["iteration"]) == [2.0, 6.0]
        assert len(rank.span_t) == 5 and rank.spans_not_read > 0
    report = build_report(run)
    notes = read_notes(report)
    assert "rank 1: more windows than the report holds; one in 2 was read, over the whole run" in notes
    assert any(n.startswith("rank 0: ") and "of the timeline beyond what the report holds were not read" in n
               for n in notes)


def test_an_empty_folder_of_a_far_rank_costs_nothing_per_absent_rank(run):
    """``rank-9999999`` beside ranks 0 and 1: the ranks between are one range, never a list of them."""
    import tracemalloc

    from trainperf.ranks._report._notes import read_notes

    (run / "rank-9999999").mkdir()
    tracemalloc.start()
    try:
        report = build_report(run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, f"{peak / 1e6:.0f} MB"
    assert report["missing_ranks"] == [[2, 9999998]] and report["missing_ranks_total"] == 9_999_997
    assert "ranks 2-9999998 absent (9,999,997 ranks without a folder)" in read_notes(report)


def test_every_folder_named_like_a_rank_that_is_left_out_is_said_with_why(run):
    from trainperf.ranks._report._notes import read_notes

    for name in ("rank-99999999", "rank-2147483648", "rank-x1", "rank-\u0663", "rank-", "rank-1 "):
        (run / name).mkdir()
    (run / "rank-7").write_text("a file")
    report = build_report(run)
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 99999999]  # eight digits are a rank like any other
    why = {f["name"]: f["why"] for f in report["ignored_folders"]}
    assert why == {"rank-2147483648": "beyond rank 2147483647, the largest torch.distributed numbers",
                   "rank-x1": "not rank-<number> (digits 0-9)", "rank-\u0663": "not rank-<number> (digits 0-9)",
                   "rank-": "not rank-<number> (digits 0-9)", "rank-1 ": "not rank-<number> (digits 0-9)",
                   "rank-7": "not a folder"}
    assert report["ignored_folders_total"] == 6
    notes = read_notes(report)
    assert "folder 'rank-2147483648' left out: beyond rank 2147483647, the largest torch.distributed numbers" in notes
    assert "folder 'rank-7' left out: not a folder" in notes
    assert "ranks 2-99999998 absent (99,999,997 ranks without a folder)" in notes


def test_lone_surrogates_in_the_meta_data_do_not_stop_the_page(run, tmp_path, capsys):
    """JSON can hold a lone surrogate (``"\\ud800"``); UTF-8 cannot write one: it becomes ``?``."""
    from trainperf.cli import main

    meta = json.loads((run / "rank-0" / "meta.json").read_text())
    meta.update(host="node\ud800", run_name="\udcff", collectives_untimed="FSDP\ud800")
    (run / "rank-0" / "meta.json").write_text(json.dumps(meta))
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "trainperf report: ?" in page and "<td>node?</td>" in page
    assert "collectives not timed (FSDP?) on rank 0" in capsys.readouterr().err
