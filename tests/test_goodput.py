"""The job's time account on a fake clock: a job with known start-up, evaluations, checkpoint saves and
loads, a slow loader for a stretch, a kill and a restart from an earlier checkpoint. Every row is what
was injected, the rows add up to the wall time, and the live listener, the ledger and the reader of the
run directory all say the same."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import FakeClock
from trainperf import PerformanceListener, read_goodput
from trainperf.records import AttemptAccount, StepHistogram, account_job, account_rank

EPOCH = 1.7e9
STEP_S, WAIT_S, SLOW_WAIT_S = 0.010, 0.002, 0.020
SLOW = range(121, 171)  # the iterations whose batch took 20 ms to load
STARTUP_S, LOAD_S, GAP_S, EVAL_S, SAVE_S = 3.0, 0.7, 5.0, 1.0, 2.0


class Job:
    """Processes on one fake clock: each starts (the operating system's start time), builds a listener,
    trains, and is killed or closes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, clock: FakeClock, run_dir: Path | None) -> None:
        self.clock, self.run_dir = clock, run_dir
        self.wall = lambda: EPOCH + clock.now
        self.process_start = 0.0
        age = lambda: (clock.now - self.process_start, True)  # noqa: E731
        monkeypatch.setattr("trainperf.ranks._ledger.process_age", age)
        monkeypatch.setattr("trainperf.core._goodput_live.process_age", age)
        self.pid = 1000
        self.injected = dict.fromkeys(("startup", "other_host", "eval", "checkpoint_save", "checkpoint_load",
                                       "data_wait", "restart_gaps"), 0.0)

    def attempt(self, start_iteration: int, last: int, *, killed: bool, rank: int = 0,
                same_process: bool = False, rank_later: bool = False) -> PerformanceListener:
        clock = self.clock
        if not same_process:
            self.process_start = clock.now
            self.pid += 1
        clock.advance(STARTUP_S - 0.5)  # imports, the model (or, in the same process, its own work)
        listener = PerformanceListener(10, sinks=[], clock=clock, wall_clock=self.wall, rank=0 if rank_later else rank,
                                       run_dir=self.run_dir, sink_thread=False)
        listener.pid = listener._publisher.pid = self.pid  # another process: its records say so
        clock.advance(0.5)
        if rank_later:  # an adapter finds the process group before training starts
            listener.set_rank(rank)
        self.injected["other_host" if same_process else "startup"] += STARTUP_S
        if start_iteration:
            clock.advance(LOAD_S)  # the checkpoint, loaded before training starts
            listener.add_time("checkpoint_load", LOAD_S)
            self.injected["checkpoint_load"] += LOAD_S
        listener.start(iteration=start_iteration)
        other = 0.0
        for i in range(start_iteration + 1, last + 1):
            wait = SLOW_WAIT_S if i in SLOW else WAIT_S
            clock.advance(wait)
            clock.advance(STEP_S)
            listener.record_iteration(samples=8, etl=wait, other=other)
            self.injected["data_wait"] += wait
            if killed and i == last:
                return listener  # killed right after this iteration's window was written
            other = self.between(listener, i)
        if not killed:
            listener.close()
        return listener

    def between(self, listener: PerformanceListener, i: int) -> float:
        """Evaluation every 50 iterations and a checkpoint every 100, between steps: other host time of
        the next iteration."""
        spent = 0.0
        if i % 50 == 0:
            self.clock.advance(EVAL_S)
            listener.add_time("eval", EVAL_S)
            self.injected["eval"] += EVAL_S
            spent += EVAL_S
        if i % 100 == 0:
            self.clock.advance(SAVE_S)
            listener.add_time("checkpoint", SAVE_S)
            self.injected["checkpoint_save"] += SAVE_S
            spent += SAVE_S
        return spent

    def gap(self) -> None:
        self.clock.advance(GAP_S)
        self.injected["restart_gaps"] += GAP_S


def killed_and_resumed(monkeypatch: pytest.MonkeyPatch, clock: FakeClock, run_dir: Path | None):
    job = Job(monkeypatch, clock, run_dir)
    began = clock.now
    job.attempt(0, 250, killed=True)
    job.gap()
    last = job.attempt(200, 300, killed=False)
    return job, last, clock.now - began


def check_rows(account, job: Job, wall_s: float) -> None:
    rows = account.rows
    for row, seconds in job.injected.items():
        assert rows[row] == pytest.approx(seconds, abs=1e-6), row
    assert account.ideal_step_s == pytest.approx(STEP_S, rel=1e-3)
    assert account.lost_iterations == 50
    assert account.net_progress == 300
    assert rows["lost_progress"] == pytest.approx(50 * account.ideal_step_s)
    assert rows["productive"] == pytest.approx(300 * account.ideal_step_s)
    # the step's time is 350 steps of 10 ms: productive, lost, and what the ideal's 0.05% bin leaves
    assert rows["productive"] + rows["lost_progress"] + rows["slowdown"] + rows["warmup"] == pytest.approx(3.5)
    assert abs(rows["slowdown"]) < 0.005 and rows["warmup"] < 0.005
    assert account.wall_s == pytest.approx(wall_s)
    assert sum(rows.values()) == pytest.approx(wall_s)
    assert account.goodput == pytest.approx(300 * account.ideal_step_s / wall_s)


def test_a_killed_and_resumed_job_s_rows_are_what_was_injected(monkeypatch, clock, tmp_path):
    job, listener, wall_s = killed_and_resumed(monkeypatch, clock, tmp_path)
    check_rows(read_goodput(tmp_path), job, wall_s)  # the reader of the run directory
    check_rows(listener.summary().goodput, job, wall_s)  # the live listener, with the earlier attempt
    attempts = read_goodput(tmp_path).attempts
    assert [(a.start_iteration, a.reached, a.clean) for a in attempts] == [(0, 250, False), (200, 300, True)]


def test_the_killed_attempt_s_last_windows_come_from_its_windows_past_its_ledger(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 250, killed=True)
    ledger = json.loads((tmp_path / "rank-0" / "goodput.json").read_text())["attempts"]
    assert len(ledger) == 1 and ledger[0]["last_iteration"] < 250  # rewritten once a second: behind
    assert ledger[0]["windows_to"] < (tmp_path / "rank-0" / "windows.jsonl").stat().st_size
    assert read_goodput(tmp_path).last_iteration == 250


def test_each_record_carries_the_job_s_goodput_so_far(monkeypatch, clock, tmp_path):
    job, listener, wall_s = killed_and_resumed(monkeypatch, clock, tmp_path)
    last = listener.history.records[-1]
    assert last.goodput == pytest.approx(300 * STEP_S / (wall_s - SAVE_S - EVAL_S), rel=2e-3)  # before the tail
    first = PerformanceListener(10, sinks=[], clock=clock, wall_clock=job.wall, sink_thread=False)
    first.start()
    for _ in range(10):
        clock.advance(STEP_S)
        first.record_iteration()
    assert first.history.records[-1].goodput is None  # the warm-up sets no ideal step
    first.close()


def test_a_checkpoint_storm_shows_in_the_goodput_of_the_records(monkeypatch, clock):
    job = Job(monkeypatch, clock, None)
    job.process_start = clock.now
    listener = PerformanceListener(10, sinks=[], clock=clock, wall_clock=job.wall, sink_thread=False)
    listener.start()
    for i in range(1, 301):
        clock.advance(STEP_S)
        spent = 0.0
        if i > 150:  # a save every iteration from here on
            clock.advance(STEP_S)
            listener.add_time("checkpoint", STEP_S)
            spent = STEP_S
        listener.record_iteration(other=spent)
    values = [r.goodput for r in listener.history.records]
    assert values[0] is None and values[1] == pytest.approx(1.0, rel=2e-3)  # after the warm-up: all steps
    assert values[14] == pytest.approx(1.0, rel=2e-3)  # the 150th iteration
    assert values[-1] == pytest.approx(300 / (300 + 150), rel=2e-3) and values[-1] < values[20] < values[14]
    listener.close()
    assert listener.summary().goodput.rows["checkpoint_save"] == pytest.approx(150 * STEP_S)


def test_without_a_run_directory_the_summary_accounts_for_this_process(monkeypatch, clock):
    job = Job(monkeypatch, clock, None)
    listener = job.attempt(0, 120, killed=False)
    account = listener.summary().goodput
    assert account.rows["startup"] == pytest.approx(STARTUP_S)
    assert account.rows["eval"] == pytest.approx(2 * EVAL_S)
    assert account.rows["checkpoint_save"] == pytest.approx(SAVE_S)
    assert sum(account.rows.values()) == pytest.approx(account.wall_s)
    assert "goodput of rank 0" in str(listener.summary())


def test_two_ranks_the_job_s_wall_time_is_the_slowest_rank_s(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 100, killed=False, rank=0)
    clock.advance(1.0)
    job.attempt(0, 100, killed=False, rank=1)  # later, and as long: its wall time ends later
    account = read_goodput(tmp_path)
    assert set(account.ranks) == {0, 1}
    assert account.rank == 0 or account.ranks[1].wall_s >= account.ranks[0].wall_s
    assert account.wall_s == max(a.wall_s for a in account.ranks.values())


def test_a_resumed_rank_with_no_earlier_attempt_counts_progress_from_where_it_resumed(monkeypatch, clock):
    job = Job(monkeypatch, clock, None)
    listener = job.attempt(200, 300, killed=False)
    account = listener.summary().goodput
    assert account.net_progress == 100 and account.lost_iterations == 0
    assert listener.history.records[0].first_iteration == 201


def test_the_reader_survives_a_garbled_ledger_and_reads_the_windows_instead(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 100, killed=False)
    (tmp_path / "rank-0" / "goodput.json").write_text("{not json")
    account = read_goodput(tmp_path)
    assert account.last_iteration == 100
    assert any("goodput.json" in note for note in account.notes)


def test_ledger_entries_of_the_wrong_kind_are_left_out_and_said(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 100, killed=False)
    path = tmp_path / "rank-0" / "goodput.json"
    data = json.loads(path.read_text())
    bad = dict(data["attempts"][0], iterations=-1)
    path.write_text(json.dumps({"attempts": [bad, *data["attempts"], 7]}))
    account = read_goodput(tmp_path)
    assert len(account.attempts) == 1
    assert any("left out" in note for note in account.notes) and any("not objects" in n for n in account.notes)


def test_the_step_histogram_s_median_is_the_lower_middle_window_s_within_its_bin():
    values = [0.010, 0.012, 0.011, 0.5, 0.0, 0.0105]
    histogram = StepHistogram()
    for value in values:
        histogram.add(value)
    assert histogram.median() == pytest.approx(sorted(values)[(len(values) + 1) // 2 - 1], rel=1e-3)
    merged = StepHistogram()
    merged.merge(histogram)
    merged.merge(histogram)
    assert merged.median() == histogram.median() and merged.total == 12


def test_an_account_round_trips_through_its_dict():
    account = AttemptAccount(10.0, started=12.0, start_iteration=5, pid=3)
    account.add_window(15, 10, 1.0, False, 13.0, etl_total_ms=100.0, gc_total_ms=None, compute_ms=80.0,
                       other_ms=10.0, overhead_ms=1.0, extra={"eval_ms": 5.0, "wait_ms": 10.0})
    again = AttemptAccount.from_dict(json.loads(json.dumps(account.to_dict())))
    assert again.to_dict() == account.to_dict()
    assert again.parts["eval"] == pytest.approx(0.05) and again.parts["other_host"] == pytest.approx(0.05)
    assert again.parts["collective_wait"] == pytest.approx(0.1) and again.steady_step_s == pytest.approx(0.7)
    with pytest.raises(ValueError, match="process_start"):
        AttemptAccount.from_dict({"process_start": math.nan})


def test_an_empty_job_is_refused_naming_what_is_missing():
    with pytest.raises(ValueError, match="attempts"):
        account_rank([])
    with pytest.raises(ValueError, match="ranks"):
        account_job({})


def test_a_second_training_in_the_same_process_is_no_restart(monkeypatch, clock, tmp_path):
    """Two fits in one process (two listeners, one after the other): one start-up, the time between them
    other host time, no restart gap and no lost progress."""
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 100, killed=False)
    job.attempt(100, 200, killed=False, same_process=True)
    account = read_goodput(tmp_path)
    assert account.rows["startup"] == pytest.approx(STARTUP_S)
    assert account.rows["other_host"] == pytest.approx(STARTUP_S + LOAD_S - LOAD_S)
    assert account.rows["restart_gaps"] == 0.0 and account.lost_iterations == 0 and account.net_progress == 200
    assert account.rows["checkpoint_load"] == pytest.approx(LOAD_S)
    assert sum(account.rows.values()) == pytest.approx(account.wall_s)
    assert account.wall_s == pytest.approx(clock.now - job.process_start, rel=1e-9)


def test_a_rank_found_after_the_listener_was_built_reads_its_own_folder_s_earlier_attempts(monkeypatch, clock,
                                                                                           tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 250, killed=True, rank=1)
    job.gap()
    listener = job.attempt(200, 300, killed=False, rank=1, rank_later=True)
    assert not (tmp_path / "rank-0").exists()
    live = listener.summary().goodput
    assert (live.rank, live.lost_iterations, len(live.attempts)) == (1, 50, 2)
    assert live.rows["restart_gaps"] == pytest.approx(GAP_S)
    assert read_goodput(tmp_path).ranks.keys() == {1}


def test_trainperf_goodput_says_the_account_on_one_screen_and_as_json(monkeypatch, clock, tmp_path, capsys):
    from trainperf.cli import main

    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 100, killed=False, rank=0)
    job.attempt(0, 100, killed=False, rank=1)
    assert main(["goodput", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("goodput of the job: ") and "start-up" in out and "per rank: 0 " in out
    assert main(["goodput", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == json.loads(json.dumps(read_goodput(tmp_path).to_dict()))
    assert main(["goodput", str(tmp_path / "missing")]) == 2
    assert "run_dir" in capsys.readouterr().err


def test_every_sink_sees_the_record_s_goodput_set_and_the_history_within_a_few_reports(monkeypatch, clock):
    """The account counts records a few at a time: by the writer thread before its sinks write them, or by
    the training thread once 16 wait; a flush counts the rest."""
    from trainperf.core._goodput_live import CATCH_UP_AT

    job = Job(monkeypatch, clock, None)
    seen: list[float | None] = []
    for sinks in ([], [lambda record: seen.append(record.goodput)]):
        job.process_start = clock.now
        listener = PerformanceListener(1, sinks=sinks, clock=clock, wall_clock=job.wall, history=None)
        listener.start()
        for i in range(100):
            clock.advance(STEP_S)
            listener.record_iteration()
            uncounted = [r for r in listener.history.records[1:] if r.goodput is None]
            assert len(uncounted) < CATCH_UP_AT, i
        listener.flush()
        assert all(r.goodput is not None for r in listener.history.records[1:])
        listener.close()
    assert len(seen) == 100 and seen[0] is None and all(g == pytest.approx(1.0, rel=2e-3) for g in seen[1:])


def test_hostile_lines_past_the_ledger_are_skipped_and_the_rest_counted(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 250, killed=True)
    windows = tmp_path / "rank-0" / "windows.jsonl"
    before = read_goodput(tmp_path)
    with open(windows, "a") as f:
        for line in ("[" * 100_000 + "]" * 100_000, '{"iteration": ' + "9" * 309 + ', "window_iterations": 2}',
                     json.dumps({"iteration": 260, "window_iterations": 10, "window_s": 10**309}),
                     json.dumps({"iteration": 270, "window_iterations": 10, "window_s": 0.1, "compute_ms": 10**400,
                                 "extra": {"eval_ms": "x", "wait_ms": 10**400}, "timestamp": 10**400}),
                     "7", "not json", '{"iteration": 280, "window_iterations": 0}'):
            f.write(line + "\n")
        f.write('{"iteration": 290, "window_')  # cut
    after = read_goodput(tmp_path)
    assert after.last_iteration == 270  # the one window of those that is a window's, its bad figures none
    assert after.rows["eval"] == before.rows["eval"] and math.isfinite(after.wall_s)
    assert sum(after.rows.values()) == pytest.approx(after.wall_s)
    (tmp_path / "rank-0" / "goodput.json").write_text("[" * 100_000 + "]" * 100_000)
    assert read_goodput(tmp_path).notes  # read from the windows alone, and said


def test_the_report_reads_a_resumed_attempt_s_windows_and_spans_as_the_newest_run(monkeypatch, clock, tmp_path):
    from trainperf import build_report

    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 250, killed=True)
    job.gap()
    job.attempt(200, 300, killed=False)
    rank = build_report(tmp_path)["ranks"][0]
    assert rank["skipped"]["windows"] == 0 and rank["skipped"]["timeline"] == 0
    assert rank["attempts"] == [{"first": 10, "last": 250, "windows": 25}, {"first": 210, "last": 300, "windows": 10}]


def test_the_reader_counts_a_killed_attempt_s_last_windows_as_steady_and_says_nothing_of_a_clean_run(monkeypatch,
                                                                                                   clock, tmp_path):
    from trainperf.ranks._ledger import read_attempts

    job = Job(monkeypatch, clock, tmp_path / "killed")
    job.attempt(0, 250, killed=True)
    attempts, notes = read_attempts(tmp_path / "killed" / "rank-0")
    assert (attempts[0].warmup_iterations, attempts[0].steady_iterations, attempts[0].last_iteration) == (10, 240, 250)
    assert len(notes) == 1
    job.run_dir = tmp_path / "clean"
    job.attempt(0, 100, killed=False)
    assert read_attempts(tmp_path / "clean" / "rank-0")[1] == [] and read_goodput(tmp_path / "clean").notes == ()


def test_ledger_entries_are_numbered_and_counted_as_the_file_holds_them(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 100, killed=False)
    path = tmp_path / "rank-0" / "goodput.json"
    good = json.loads(path.read_text())["attempts"][0]
    empty = dict(good, process_start=good["process_start"] - 50.0, windows_from=None, windows_to=None, windows=0)
    path.write_text(json.dumps({"attempts": [7, "x", empty, dict(good, pid="one"), good]}))
    account = read_goodput(tmp_path)
    assert len(account.attempts) == 2
    assert "rank 0: goodput.json: 2 entries are not objects" in account.notes
    assert any(note.startswith("rank 0: goodput.json: attempt 2 left out (pid") for note in account.notes)


def test_windows_with_no_iterations_or_a_negative_time_are_no_window_s(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 250, killed=True)
    with open(tmp_path / "rank-0" / "windows.jsonl", "a") as f:
        for line in ({"iteration": 260, "window_iterations": 0, "window_s": 0.1},
                     {"iteration": 270, "window_iterations": 10, "window_s": -0.1}):
            f.write(json.dumps(line) + "\n")
    assert read_goodput(tmp_path).last_iteration == 250


def test_without_a_ledger_each_attempt_starts_where_its_first_window_started(monkeypatch, clock, tmp_path):
    job = Job(monkeypatch, clock, tmp_path)
    job.attempt(0, 250, killed=True)
    job.gap()
    job.attempt(200, 300, killed=False)
    folder = tmp_path / "rank-0"
    (folder / "goodput.json").unlink()
    lines = (folder / "windows.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    lines.insert(3, "7")  # a line that is no window's, in the middle
    (folder / "windows.jsonl").write_text("\n".join(lines) + "\n")
    account = read_goodput(tmp_path)
    begun = first["timestamp"] - first["window_s"] - first["overhead_ms"] / 1000.0
    assert account.attempts[0].process_start == pytest.approx(begun)
    assert [(a.start_iteration, a.reached) for a in account.attempts] == [(0, 250), (200, 300)]
    assert account.lost_iterations == 50 and any("no goodput.json" in note for note in account.notes)


def test_the_live_ideal_step_is_the_median_of_every_attempt_s_steady_windows(monkeypatch, clock, tmp_path):
    """Steps chosen so that the earlier attempt's median (10 ms), the resumed one's (60 ms), the earlier
    one's with the resumed one's warm-up (10 ms) and both together (40 ms) differ: each record's goodput
    follows the last."""
    job = Job(monkeypatch, clock, tmp_path)

    def attempt(start: int, steps_ms: list[float]) -> PerformanceListener:
        job.process_start = clock.now
        job.pid += 1
        listener = PerformanceListener(1, sinks=[], clock=clock, wall_clock=job.wall, run_dir=tmp_path,
                                       sink_thread=False)
        listener._publisher.pid = job.pid
        listener.start(iteration=start)
        for ms in steps_ms:
            clock.advance(ms / 1000.0)
            listener.record_iteration()
        listener.close()
        return listener

    began = job.process_start = clock.now
    attempt(0, [10.0] * 4 + [40.0] * 3)  # a warm-up window, then three of 10 ms and three of 40 ms
    clock.advance(1.0)
    last = attempt(7, [5.0] + [20.0] * 2 + [60.0] * 3)
    record = last.history.records[-1]
    account = read_goodput(tmp_path)
    assert account.ideal_step_s == pytest.approx(0.040, rel=2e-3)
    assert record.goodput == pytest.approx(account.ideal_step_s * 13 / (record.timestamp - EPOCH - began), rel=1e-9)
    wall = last.summary().goodput.wall_s
    clock.advance(5.0)
    assert last.summary().goodput.wall_s == wall  # a closed attempt's time does not grow


def test_a_process_start_the_system_does_not_say_is_noted_in_the_account(monkeypatch, clock):
    job = Job(monkeypatch, clock, None)
    monkeypatch.setattr("trainperf.core._goodput_live.process_age", lambda: (0.0, False))
    listener = job.attempt(0, 20, killed=False)
    assert any("did not say when this process started" in note for note in listener.summary().goodput.notes)
