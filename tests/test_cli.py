from __future__ import annotations

import json

import pandas as pd
import pytest

from _pictures import assert_drawn
from trainperf import cli as _cli

GUIDE = (
    "o.d.o.l.PerformanceListener - ETL: 0 ms; iteration 30; iteration time: 17 ms; samples/sec: 588.235; "
    "batches/sec: 58.824; score: 0.7229335801186025; GC: [PS Scavenge: 2 (1ms)], [PS MarkSweep: 2 (24ms)];"
)



def write_log(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("starting\n" + "\n".join(GUIDE.replace("iteration 30", f"iteration {i}") for i in (10, 20)) + "\n")
    return path


def test_parse_to_csv_and_json_lines(tmp_path, capsys):
    log = write_log(tmp_path)
    assert _cli.main(["parse", str(log), "-o", str(tmp_path / "out.csv")]) == 0
    assert "2 listener lines, 1 other line skipped" in capsys.readouterr().err
    frame = pd.read_csv(tmp_path / "out.csv")
    assert frame["iteration"].tolist() == [10, 20] and frame["gc.PS MarkSweep.ms"].tolist() == [24, 24]
    assert _cli.main(["parse", str(log), "-o", str(tmp_path / "out.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["samples_per_sec"] for r in rows] == [588.235, 588.235]


def test_parse_rejects_an_unknown_output_before_reading(tmp_path, capsys):
    assert _cli.main(["parse", str(tmp_path / "missing.log"), "-o", str(tmp_path / "out.xlsx")]) == 2
    assert "--output must end in .csv or .jsonl" in capsys.readouterr().err
    assert not (tmp_path / "out.xlsx").exists()


def test_parse_names_an_unreadable_log(tmp_path, capsys):
    assert _cli.main(["parse", str(tmp_path / "missing.log")]) == 2
    assert "missing.log" in capsys.readouterr().err


def test_plot_writes_an_image_and_nothing_else(tmp_path):
    log = write_log(tmp_path)
    out = tmp_path / "run.png"
    assert _cli.main(["plot", str(log), "-o", str(out), "--title", "guide"]) == 0
    assert_drawn(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.png", "train.log"]  # no temporary file left


def test_parse_without_output_writes_csv_to_stdout_and_reads_stdin(tmp_path, capsys, monkeypatch):
    import io

    log = write_log(tmp_path)
    assert _cli.main(["parse", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("iteration,") and len(out.splitlines()) == 3
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(log.read_bytes())))
    assert _cli.main(["parse", "-"]) == 0
    assert capsys.readouterr().out == out


def test_plot_reads_what_the_csv_sink_wrote(tmp_path):
    from trainperf import PerformanceListener
    from trainperf.sinks import CsvSink

    clock = iter(range(1000))
    with CsvSink(tmp_path / "perf.csv") as sink:
        lst = PerformanceListener(2, sinks=[sink], clock=lambda: next(clock) / 100, verdict=False)
        for _ in range(10):
            lst.record_iteration(samples=8)
        lst.close()
    assert _cli.main(["plot", str(tmp_path / "perf.csv"), "-o", str(tmp_path / "perf.png")]) == 0
    assert_drawn(tmp_path / "perf.png")


def test_bad_numbers_and_paths_are_named(tmp_path, capsys):
    for argv, text in ((["bench", "--epochs", "0"], "--epochs: must be a positive integer, got '0'"),
                       (["demo", "--iterations", "0"], "--iterations: must be a positive integer, got '0'")):
        with pytest.raises(SystemExit) as exit_:
            _cli.main(argv)
        assert exit_.value.code == 2 and text in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"not": "a record"}\n')
    assert _cli.main(["parse", str(empty), "-o", str(tmp_path / "x.csv")]) == 2
    assert "empty.jsonl: no listener lines found" in capsys.readouterr().err
    assert _cli.main(["plot", str(empty), "-o", str(tmp_path / "x.png")]) == 2
    assert _cli.main(["plot", str(tmp_path / "perf.log"), "-o", str(tmp_path / "x.gif")]) == 2
    assert "--output must end in .png, .svg, .pdf, got" in capsys.readouterr().err
    assert _cli.main(["parse", str(write_log(tmp_path)), "-o", str(tmp_path / "no" / "x.csv")]) == 2
    assert "cannot write" in (err := capsys.readouterr().err) and str(tmp_path / "no" / "x.csv") in err


def test_console_script_finds_factories_in_the_current_folder(tmp_path, monkeypatch):
    (tmp_path / "mytrain_cwd.py").write_text("import torch\ndef make_model():\n    return torch.nn.Linear(1, 1)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    from trainperf.cli._main import _factory

    assert _factory("mytrain_cwd:make_model", "model").out_features == 1


def test_files_written_whole_get_the_umask_permissions(tmp_path):
    import os
    import stat

    from trainperf.sinks import CsvSink

    old = os.umask(0o022)
    try:
        log = write_log(tmp_path)
        assert _cli.main(["parse", str(log), "-o", str(tmp_path / "t.csv")]) == 0
        assert _cli.main(["plot", str(log), "-o", str(tmp_path / "t.png")]) == 0
        with CsvSink(tmp_path / "wide.csv") as sink:  # a new collector widens the header: the file is rewritten
            from trainperf import GCStat, PerformanceRecord

            sink(PerformanceRecord(iteration=1, window_iterations=1, window_s=1.0, warmup=False, timestamp=0.0))
            with pytest.warns(UserWarning, match="new columns"):
                sink(PerformanceRecord(iteration=2, window_iterations=1, window_s=1.0, warmup=False, timestamp=0.0,
                                       gc=(GCStat("gen0", 1, 0.1),)))
        import torch

        from trainperf.data import presave

        presave([(torch.ones(2, 2), torch.zeros(2))] * 3, tmp_path / "cache", batches_per_shard=2)
        shards = [p.relative_to(tmp_path) for p in (tmp_path / "cache").iterdir()]
        assert len(shards) >= 3  # two shards and the manifest
        for name in ("t.csv", "t.png", "wide.csv", *shards):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    finally:
        os.umask(old)


def _wait_for_progress(command):
    """Stand-in for slow work: returns once the command's progress line has been said (at most 30 s)."""
    import sys
    import time

    deadline = time.monotonic() + 30
    while f"trainperf {command}: " not in sys.stderr.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_report_or_a_doctor_that_lasts_says_what_it_is_doing_on_stderr(tmp_path, monkeypatch, capsys):
    import trainperf.diagnosis
    import trainperf.ranks._report
    from trainperf.base import _progress
    from trainperf.diagnosis import DoctorReport

    monkeypatch.setattr(_progress, "EVERY_S", 0.05)  # "lasts": 50 ms here, a few seconds for users
    monkeypatch.setattr(trainperf.ranks._report, "write_report",
                        lambda run_dir, output, fmt, say, **_: _wait_for_progress("report") or [output])
    monkeypatch.setattr(trainperf.diagnosis, "doctor", lambda **kw: _wait_for_progress("doctor") or DoctorReport(()))
    out = str(tmp_path / "report.html")
    assert _cli.main(["report", str(tmp_path), "-o", out]) == 0
    report = capsys.readouterr()
    assert f"trainperf report: reading {tmp_path} and writing {out} (" in report.err and report.out == ""
    assert _cli.main(["doctor"]) == 0
    doctor = capsys.readouterr()
    assert "trainperf doctor: reading the environment (" in doctor.err and "trainperf doctor" not in doctor.out

