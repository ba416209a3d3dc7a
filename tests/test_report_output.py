"""Where ``trainperf report`` writes: never over a file of the run it reads (through a symlink or a
hard link too), with an error that names the option, and whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _simulate import simulate
from trainperf.cli import main
from trainperf.ranks._report import write_report


@pytest.fixture
def run(tmp_path) -> Path:
    simulate(tmp_path / "run", ranks=2, iterations=20)
    return tmp_path / "run"


def files_of(run: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", ["perfetto", "json", "html"])
def test_the_command_refuses_to_write_over_a_file_of_the_run_it_reads(run, capsys, fmt):
    before = files_of(run)
    target = run / "rank-0" / "windows.jsonl"
    assert main(["report", str(run), "--format", fmt, "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert (f"trainperf report: error: -o/--output {str(target)!r} is rank 0's windows.jsonl in the run directory "
            "being read; write the report outside its rank folders") in err
    assert files_of(run) == before  # nothing written, nothing left beside


def test_a_path_into_a_rank_folder_is_refused_however_it_is_spelled(run, tmp_path):
    before = files_of(run)
    (tmp_path / "into").symlink_to(run / "rank-1")  # a folder link into the run
    (tmp_path / "windows.jsonl").symlink_to(run / "rank-1" / "windows.jsonl")  # a link to a run file
    os.link(run / "rank-1" / "meta.json", tmp_path / "meta-copy.json")  # a second name of a run file
    for out in (tmp_path / "into" / "timeline.jsonl", tmp_path / "into" / "new.html",
                tmp_path / "windows.jsonl", tmp_path / "meta-copy.json",
                run / "rank-1" / ".." / "rank-0" / "clock.jsonl", run / "rank-0"):
        with pytest.raises(ValueError, match=r"^out .* (is|lies in) rank \d's "):
            write_report(run, out, "json")
    with pytest.raises(ValueError, match="is rank 0's folder"):
        write_report(run, f"{run / 'rank-0'}/", "perfetto")
    with pytest.raises(ValueError, match="lies in rank 0's folder"):
        write_report(run, f"{run / 'rank-0' / 'traces'}/", "perfetto")
    assert files_of(run) == before


def test_a_run_file_that_is_a_link_protects_what_it_points_to(run, tmp_path):
    """A rank's windows kept elsewhere and linked into its folder: the file it points to is the run's."""
    elsewhere = tmp_path / "kept" / "w.jsonl"
    elsewhere.parent.mkdir()
    (run / "rank-1" / "windows.jsonl").rename(elsewhere)
    (run / "rank-1" / "windows.jsonl").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    with pytest.raises(ValueError, match="is rank 1's windows.jsonl"):
        write_report(run, elsewhere, "perfetto")
    assert elsewhere.read_bytes() == before


def test_a_report_beside_the_rank_folders_is_written(run):
    assert write_report(run, run / "report.html", "html") == [run / "report.html"]
    assert write_report(run, f"{run}/traces/", "perfetto") == [run / "traces" / "rank-0.json",
                                                               run / "traces" / "rank-1.json"]


def test_a_write_that_fails_half_way_leaves_the_previous_report_whole(run, tmp_path, monkeypatch):
    import trainperf.ranks._report as report_module

    out = tmp_path / "trace.json"
    write_report(run, out, "perfetto")
    before = out.read_bytes()

    def half(trace, file):
        file.write('{"traceEvents": [')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report_module, "write_trace", half)
    with pytest.raises(OSError, match="No space left on device"):
        write_report(run, out, "perfetto")
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run", "trace.json"]
