"""Sinks under faults: a write that fails loses that record only, files left by a killed process are
cleaned up, and a run directory's meta data gets ``ended`` even after a failed write."""

from __future__ import annotations

import csv
import json

import pytest

from trainperf import GCStat, PerformanceRecord
from trainperf.ranks import _sink as sink_module
from trainperf.sinks import CsvSink, RunDirSink
from trainperf.sinks import _csv as csv_module


def record(i: int, collectors: int = 1) -> PerformanceRecord:
    gc = tuple(GCStat(f"gen{k}", i, 0.5) for k in range(collectors))
    return PerformanceRecord(iteration=i, window_iterations=1, window_s=0.01, warmup=False, timestamp=float(i),
                             gc=gc)


def rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_failed_widening_loses_that_record_only_and_the_sink_goes_on(tmp_path, monkeypatch):
    real = csv_module.atomic_write
    failures = iter([True])

    def once(*args, **kwargs):
        if next(failures, False):
            raise PermissionError(13, "Permission denied")  # the folder, read-only for a moment
        return real(*args, **kwargs)

    monkeypatch.setattr(csv_module, "atomic_write", once)
    path = tmp_path / "perf.csv"
    with pytest.warns(UserWarning, match="wider header"), CsvSink(path) as sink:
        for i in range(1, 101):
            try:
                sink(record(i, collectors=1 if i < 10 else 2))  # a collector appears at record 10
            except OSError:
                assert i == 10
    got = rows(path)
    assert [int(r["iteration"]) for r in got] == [i for i in range(1, 101) if i != 10]
    assert "\n\n" not in path.read_text()  # every reopening went on where the file ended: no blank line
    assert got[0]["gc.gen1.count"] == "" and got[-1]["gc.gen1.count"] == "100"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perf.csv"]


def test_a_row_the_disk_took_only_part_of_loses_that_record_only(tmp_path):
    path = tmp_path / "perf.csv"
    with CsvSink(path) as sink:
        sink(record(1))
        real_flush = sink._file.flush

        def full_disk():
            sink._file.buffer.raw.write(b"2,1,0.0")  # part of the row reached the file
            raise OSError(28, "No space left on device")

        sink._file.flush = full_disk
        with pytest.raises(OSError, match="No space left"):
            sink(record(2))
        assert sink._file.flush is not full_disk and real_flush is not None
        sink(record(3))
    lines = path.read_text().splitlines()
    assert lines[-2] == "2,1,0.0" and "" not in lines  # the cut row stands alone on its line, no blank one
    got = rows(path)
    assert [r["iteration"] for r in got[::2]] == ["1", "3"] and got[1]["iteration"] is None  # a short row
    assert got[2]["gc.gen0.count"] == "3"


def test_temporary_files_a_killed_process_left_are_removed_on_the_next_open(tmp_path):
    (tmp_path / ".perf.csv.1a2b3c4d5e6f.tmp").write_text("half a rewrite")
    (tmp_path / ".other.csv.1a2b3c4d5e6f.tmp").write_text("not ours")
    CsvSink(tmp_path / "perf.csv").close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.csv.1a2b3c4d5e6f.tmp", "perf.csv"]
    rank = tmp_path / "run" / "rank-0"
    rank.mkdir(parents=True)
    (rank / ".meta.json.0123456789ab.tmp").write_text("{")
    RunDirSink(tmp_path / "run", rank=0).close()
    assert sorted(p.name for p in rank.iterdir()) == ["meta.json"]


def test_meta_data_gets_ended_when_its_first_write_at_close_fails(tmp_path, monkeypatch):
    sink = RunDirSink(tmp_path / "run", rank=0, wall_clock=lambda: 1000.0)
    sink(record(1))
    real = sink_module.atomic_write
    failures = iter([True])

    def once(*args, **kwargs):
        if next(failures, False):
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(sink_module, "atomic_write", once)
    sink.close()
    assert json.loads((tmp_path / "run" / "rank-0" / "meta.json").read_text())["ended"] == 1000.0


def test_meta_data_gets_ended_when_a_file_fails_to_close_and_the_error_is_raised(tmp_path):
    sink = RunDirSink(tmp_path / "run", rank=0, wall_clock=lambda: 1000.0)
    sink(record(1))
    windows = next(iter(sink._files.values()))
    real_close = windows.close

    def broken_close():
        real_close()
        raise OSError(28, "No space left on device")

    windows.close = broken_close
    with pytest.raises(OSError, match="No space left"):
        sink.close()
    assert json.loads((tmp_path / "run" / "rank-0" / "meta.json").read_text())["ended"] == 1000.0
    assert sink.closed
