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


def fail_once(monkeypatch, module, error: OSError) -> None:
    """``module.atomic_write`` raises ``error`` on its next call, then writes as it does."""
    real = module.atomic_write
    failures = iter([True])

    def once(*args, **kwargs):
        if next(failures, False):
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "atomic_write", once)


def rows(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_failed_widening_loses_that_record_only_and_the_sink_goes_on(tmp_path, monkeypatch):
    fail_once(monkeypatch, csv_module, PermissionError(13, "Permission denied"))  # the folder, read-only a moment
    path = tmp_path / "perf.csv"
    raised = []
    with pytest.warns(UserWarning, match="wider header"), CsvSink(path) as sink:
        for i in range(1, 101):
            try:
                sink(record(i, collectors=1 if i < 10 else 2))  # a collector appears at record 10
            except OSError:
                raised.append(i)
    assert raised == [10]  # the lost record is said, never lost silently
    got = rows(path)
    assert [int(r["iteration"]) for r in got] == [i for i in range(1, 101) if i != 10]
    assert "\n\n" not in path.read_text()  # every reopening went on where the file ended: no blank line
    assert got[0]["gc.gen1.count"] == "" and got[-1]["gc.gen1.count"] == "100"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perf.csv"]


def test_in_a_batch_a_failed_widening_loses_that_record_only_and_is_raised_after_the_others(tmp_path, monkeypatch):
    fail_once(monkeypatch, csv_module, PermissionError(13, "Permission denied"))  # the folder, read-only a moment
    path = tmp_path / "perf.csv"
    with pytest.warns(UserWarning, match="wider header"), CsvSink(path) as sink:
        sink.write_many([record(i) for i in range(1, 4)])
        with pytest.raises(PermissionError):  # the batch as the writer thread hands it over
            sink.write_many([record(4), record(5), record(6, collectors=2), record(7, collectors=2), record(8)])
    got = rows(path)
    assert [int(r["iteration"]) for r in got] == [1, 2, 3, 4, 5, 7, 8]
    assert got[4]["gc.gen1.count"] == "" and got[5]["gc.gen1.count"] == "7" and got[6]["gc.gen1.count"] == ""


def test_rows_appended_under_an_older_header_go_under_its_columns(tmp_path):
    """A header from an older trainperf lacks some of today's columns: they are added at its end
    (once), and every value goes under its own column, not where today's header would have it."""
    from trainperf.sinks import CSV_COLUMNS

    older = [c for c in CSV_COLUMNS if c not in ("mfu", "tokens_per_sec")]
    path = tmp_path / "perf.csv"
    path.write_text(",".join(older) + "\n" + ",".join("1" if c == "iteration" else "" for c in older) + "\n")
    full = PerformanceRecord(iteration=2, window_iterations=1, window_s=0.5, warmup=False, timestamp=7.0,
                             etl_ms=3.0, mfu=0.25, tokens_per_sec=1000.0, score=0.5, epoch=4)
    with pytest.warns(UserWarning, match="wider header"), CsvSink(path) as sink:
        sink(full)
        sink.write_many([full, full])
    got = rows(path)
    assert list(got[0]) == [*older, "tokens_per_sec", "mfu"]  # in the schema's order
    for row in got[1:]:
        assert (row["iteration"], row["etl_ms"], row["mfu"], row["tokens_per_sec"], row["score"], row["epoch"],
                row["timestamp"]) == ("2", "3.0", "0.25", "1000.0", "0.5", "4", "7.0")


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
    (rank / ".goodput.json.0123456789ab.tmp").write_text("{")
    RunDirSink(tmp_path / "run", rank=0).close()
    assert sorted(p.name for p in rank.iterdir()) == ["goodput.json", "meta.json"]


def test_meta_data_gets_ended_when_its_first_write_at_close_fails(tmp_path, monkeypatch):
    sink = RunDirSink(tmp_path / "run", rank=0, wall_clock=lambda: 1000.0)
    sink(record(1))
    fail_once(monkeypatch, sink_module, OSError(28, "No space left on device"))
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
