"""``trainperf parse``: a CsvSink file as input, a closed pipe, and no pandas."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from trainperf import PerformanceListener
from trainperf.sinks import CsvSink, JsonLinesSink

SCRIPT = "import sys; from trainperf.cli import main; sys.exit(main(sys.argv[1:]))"
WITHOUT_PANDAS = "import sys; sys.modules['pandas'] = None; " + SCRIPT


def trainperf_cli(*args: str, script: str = SCRIPT, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, **kw)


def write_run(tmp_path, clock):
    """The same 6 windows as a CsvSink file and a JSON lines file."""
    with CsvSink(tmp_path / "run.csv") as table, JsonLinesSink(tmp_path / "run.jsonl") as jsonl:
        listener = PerformanceListener(3, sinks=[table, jsonl], clock=clock, sink_thread=False, report_gc=True,
                                       report_hardware=False)
        for i in range(18):
            clock.advance(0.01)
            listener.record_iteration(samples=16, etl=0.002 if i % 2 else 0.0)
        listener.close()
    return listener.history.records


def test_parse_reads_what_a_csv_sink_wrote(tmp_path, clock):
    records = write_run(tmp_path, clock)
    done = trainperf_cli("parse", str(tmp_path / "run.csv"), "-o", str(tmp_path / "out.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "run.csv: 6 records" in done.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [r.iteration for r in records] == [3, 6, 9, 12, 15, 18]
    assert [r["samples"] for r in rows] == [48] * 6
    assert [r["etl_ms"] for r in rows] == pytest.approx([r.etl_ms for r in records])
    to_csv = trainperf_cli("parse", str(tmp_path / "run.csv"))
    assert to_csv.returncode == 0
    with open(tmp_path / "run.csv", newline="") as f:
        assert list(csv.reader(to_csv.stdout.splitlines()))[0] == next(csv.reader(f))


def test_parse_to_a_closed_pipe_ends_quietly(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"ETL: 1 ms; iteration {i}; iteration time: 2 ms;\n" for i in range(1, 50_001)))
    shell = f"{sys.executable} -c '{SCRIPT}' parse {log} | head -n 2"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["iteration,etl_ms,iteration_ms,run", "1,1.0,2.0,0"]
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr and "Exception" not in done.stderr
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_parse_writes_its_tables_without_pandas_as_it_does_with_it(tmp_path, clock, suffix):
    write_run(tmp_path, clock)
    for source in ("run.jsonl", "run.csv"):
        plain = trainperf_cli("parse", str(tmp_path / source), "-o", str(tmp_path / f"plain{suffix}"),
                              script=WITHOUT_PANDAS)
        assert plain.returncode == 0, plain.stderr
        usual = trainperf_cli("parse", str(tmp_path / source), "-o", str(tmp_path / f"usual{suffix}"))
        assert usual.returncode == 0, usual.stderr
        assert (tmp_path / f"plain{suffix}").read_text() == (tmp_path / f"usual{suffix}").read_text()


def test_without_pandas_the_table_is_the_one_to_pandas_gives(tmp_path, clock):
    pd = pytest.importorskip("pandas")
    import io

    from trainperf import parse_log

    write_run(tmp_path, clock)
    plain = trainperf_cli("parse", str(tmp_path / "run.jsonl"), script=WITHOUT_PANDAS)
    assert plain.returncode == 0, plain.stderr
    expected = io.StringIO()
    parse_log(tmp_path / "run.jsonl").to_pandas().to_csv(expected, index=False)
    assert plain.stdout == expected.getvalue()
    assert pd.read_csv(io.StringIO(plain.stdout))["pid"].dtype == "int64"
