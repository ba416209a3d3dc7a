from __future__ import annotations

import json

import pandas as pd

from trainperf import _cli

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
    assert "2 listener lines, 1 other lines skipped" in capsys.readouterr().err
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
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.png", "train.log"]  # no temporary file left
