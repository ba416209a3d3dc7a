"""Each file sink killed (SIGKILL) at random points while writing: the file reads back to its last
complete record, and nothing after a cut line is lost when the file is appended to again."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainperf import parse_log

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")

WRITER = textwrap.dedent(
    """
    import sys
    from trainperf import PerformanceListener
    kind, path, append = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if kind == "jsonl":
        from trainperf.sinks import JsonLinesSink
        sink = JsonLinesSink(path, append=append)
    elif kind == "csv":
        from trainperf.sinks import CsvSink
        sink = CsvSink(path)
    else:
        from trainperf.sinks import TensorBoardSink
        sink = TensorBoardSink(path)
    import time
    listener = PerformanceListener(1, sinks=[sink], report_gc=True, report_score=True)
    listener.record_iteration(32, etl=0.001, score=1.0)
    listener.flush()  # the first record reached the file: the writer thread is running
    print("ready", flush=True)
    i = 1
    while True:  # a fast loop that reports every iteration, with the sink on the writer thread
        i += 1
        time.sleep(0.0005)
        listener.record_iteration(32, etl=0.001, score=1.0 / i)
    """
)


def kill_mid_write(kind: str, path: Path, rng: random.Random, *, append: bool = False) -> None:
    """Start a process that writes records as fast as it can and SIGKILL it at a random moment."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, kind, str(path), "1" if append else "0"],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    time.sleep(rng.uniform(0.02, 0.4))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


TRIALS = 6


@pytest.mark.parametrize("trial", range(TRIALS))
def test_json_lines_killed_mid_write_read_back_to_the_last_complete_record(tmp_path, trial):
    rng = random.Random(trial)
    path = tmp_path / "run.jsonl"
    kill_mid_write("jsonl", path, rng)
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: b"" when the last write was whole
    records = [json.loads(line) for line in complete]  # every complete line is strict JSON
    assert [r["iteration"] for r in records] == list(range(1, len(records) + 1))
    log = parse_log(path)
    assert log.column("iteration") == [float(r["iteration"]) for r in records]
    assert log.truncated == (1 if tail else 0)

    # The next run appends after the cut line: its records start on a line of their own.
    kill_mid_write("jsonl", path, rng, append=True)
    again = parse_log(path)
    iterations = again.column("iteration")
    assert iterations[: len(records)] == [float(r["iteration"]) for r in records]
    second = iterations[len(records) :]
    assert second and second == [float(i) for i in range(1, len(second) + 1)]


@pytest.mark.parametrize("trial", range(TRIALS))
def test_csv_killed_mid_write_reads_back_to_the_last_complete_row(tmp_path, trial):
    rng = random.Random(100 + trial)
    path = tmp_path / "run.csv"
    kill_mid_write("csv", path, rng)
    text = path.read_text(encoding="utf-8")
    complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    rows = list(csv.DictReader(complete.splitlines()))
    header = next(csv.reader(complete.splitlines()))
    assert header[:3] == ["timestamp", "host", "pid"]
    assert all(None not in row and len(row) == len(header) for row in rows)
    assert [int(r["iteration"]) for r in rows] == list(range(1, len(rows) + 1))
    assert all(float(r["score"]) == pytest.approx(1.0 / int(r["iteration"])) for r in rows)


@pytest.mark.parametrize("trial", range(3))
def test_tensorboard_killed_mid_write_reads_back_to_the_last_complete_event(tmp_path, trial):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rng = random.Random(200 + trial)
    kill_mid_write("tensorboard", tmp_path, rng)
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    scores = accumulator.Scalars("trainperf/score")
    assert scores, "no complete event was read back"
    steps = [s.step for s in scores]
    assert steps == list(range(1, len(steps) + 1))
    assert all(s.value == pytest.approx(1.0 / s.step) for s in scores)


def _records(n: int):
    from trainperf import PerformanceListener

    out = []
    listener = PerformanceListener(1, sinks=[out.append], verdict=False, clock=iter(range(1000)).__next__)
    for _ in range(n):
        listener.record_iteration(32, etl=0.001)
    listener.close()
    return out


@pytest.mark.parametrize("keep", [1, 2, 17, -2, -1])  # bytes of the last line that reached the disk
def test_a_json_line_cut_at_any_byte_reads_back_without_it_and_the_next_run_starts_a_new_line(tmp_path, keep):
    """The cut a crash leaves, made by hand at a chosen byte (a killed writer rarely cuts a line)."""
    from trainperf.sinks import JsonLinesSink

    path = tmp_path / "run.jsonl"
    with JsonLinesSink(path) as sink:
        for record in _records(3):
            sink(record)
    whole = path.read_bytes()
    last_start = whole.rstrip(b"\n").rfind(b"\n") + 1
    last = whole[last_start:]
    cut = whole[: last_start + (keep if keep > 0 else len(last) + keep - 1)]
    assert not cut.endswith(b"\n") and len(cut) > last_start
    path.write_bytes(cut)
    log = parse_log(path)
    assert log.column("iteration") == [1.0, 2.0] and log.truncated == 1

    with JsonLinesSink(path, append=True) as sink:  # the next run appends after the cut
        sink(_records(1)[0])
    lines = path.read_bytes().split(b"\n")
    assert lines[2] == cut[last_start:]  # the cut line stays on its own line, untouched
    assert json.loads(lines[3])["iteration"] == 1 and lines[4] == b""
    again = parse_log(path)
    assert again.column("iteration") == [1.0, 2.0, 1.0]
    assert again.truncated == 0 and again.skipped == 1  # the cut line is skipped, not read


RESTARTED = textwrap.dedent(
    """
    import sys, time
    from trainperf import PerformanceListener
    from trainperf.sinks import CsvSink, JsonLinesSink
    folder = sys.argv[1]
    listener = PerformanceListener(1, sinks=[CsvSink(folder + "/run.csv"), JsonLinesSink(folder + "/run.jsonl")],
                                   run_dir=folder + "/run", report_gc=True)
    listener.record_iteration(32, etl=0.001)
    listener.flush()  # the first record reached the files: the writer thread is running
    print("ready", flush=True)
    while True:  # a fast loop that reports every iteration, with the sinks on the writer thread
        time.sleep(0.0005)
        listener.record_iteration(32, etl=0.001)
    """
)


def _complete_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)


def test_every_row_of_every_killed_attempt_survives_the_restarts_in_each_file_sink(tmp_path):
    """The same training restarted after SIGKILL, four attempts: the CSV, JSON lines and run directory
    files each keep every complete row of every attempt, in order, with the CSV header once."""
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    files = {"csv": tmp_path / "run.csv", "jsonl": tmp_path / "run.jsonl",
             "run_dir": tmp_path / "run" / "rank-0" / "windows.jsonl"}
    kept: dict[str, list[bytes]] = {kind: [] for kind in files}
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", RESTARTED, str(tmp_path)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.05, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for kind, path in files.items():
            lines = _complete_lines(path)
            assert lines[: len(kept[kind])] == kept[kind], (attempt, kind)  # nothing earlier lost or changed
            new = lines[len(kept[kind]):]
            if kind == "csv":
                header = next(csv.reader([lines[0].decode()]))
                assert header[:3] == ["timestamp", "host", "pid"] and sum(line.startswith(b"timestamp,") for line in
                                                                          lines) == 1
                new = new[1:] if attempt == 0 else new
                rows = list(csv.reader(line.decode() for line in new))
                whole = [r for r in rows if len(r) == len(header)]
                iterations = [int(r[header.index("iteration")]) for r in whole]
            else:
                iterations = []
                for line in new:
                    try:
                        iterations.append(json.loads(line)["iteration"])
                    except ValueError:  # a line the kill cut, on its own
                        pass
            assert iterations[:1] == [1] and iterations == list(range(1, len(iterations) + 1)), (attempt, kind)
            kept[kind] = lines
