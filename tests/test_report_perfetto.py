from __future__ import annotations

import json
import re

import pytest

from _needs import integration
from _simulate import simulate
from trainperf.ranks._report import _perfetto, write_report

ITERATIONS = 20


def per_rank_traces(tmp_path, ranks=2):
    simulate(tmp_path / "run", ranks=ranks, iterations=ITERATIONS)
    return write_report(tmp_path / "run", f"{tmp_path}/traces/", "perfetto")


def test_each_file_names_its_rank_as_holistic_trace_analysis_looks_for_it(tmp_path):
    written = per_rank_traces(tmp_path)
    for rank, path in enumerate(written):
        text = path.read_text()
        first = next(m for line in text.splitlines() if (m := re.search(r'"rank":\s+(\d+)', line)))
        assert int(first.group(1)) == rank and f'"distributedInfo": {{"backend": "unknown", "rank": {rank}, ' in text
        trace = json.loads(text)
        assert '"rank":' not in json.dumps(trace["traceEvents"], separators=(",", ": "))  # no event says a rank


def test_the_one_file_of_every_rank_is_rank_0_of_the_world(tmp_path):
    simulate(tmp_path / "run", ranks=3, iterations=ITERATIONS)
    [path] = write_report(tmp_path / "run", tmp_path / "trace.json", "perfetto")
    text = path.read_text()
    assert re.search(r'"rank":\s+(\d+)', text.splitlines()[0]).group(1) == "0"
    assert json.loads(text)["distributedInfo"] == {"backend": "unknown", "rank": 0, "world_size": 3}


def test_each_iteration_gets_a_profiler_step_around_its_spans(tmp_path):
    for rank, path in enumerate(per_rank_traces(tmp_path)):
        events = json.loads(path.read_text())["traceEvents"]
        steps = {int(e["name"].split("#")[1]): e for e in events if e["name"].startswith("ProfilerStep#")}
        assert sorted(steps) == list(range(1, ITERATIONS + 1))
        assert all(e["ph"] == "X" and e["pid"] == rank and e["tid"] == _perfetto.STEPS_TID for e in steps.values())
        spans = [e for e in events if e.get("cat") == "step"]
        assert {e["args"]["iteration"] for e in spans} == set(steps)  # the phases are still there
        for e in spans:
            step = steps[e["args"]["iteration"]]
            assert step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-3


def test_profiler_steps_only_cover_the_spans_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(_perfetto, "MAX_SPANS_PER_RANK", 5)
    simulate(tmp_path / "run", ranks=1, iterations=ITERATIONS)
    [path] = write_report(tmp_path / "run", tmp_path / "trace.json", "perfetto")
    events = json.loads(path.read_text())["traceEvents"]
    kept = [e["args"]["iteration"] for e in events if e.get("cat") == "step"]
    steps = [e["name"] for e in events if e["name"].startswith("ProfilerStep#")]
    assert len(kept) == 5 and steps == [f"ProfilerStep#{i}" for i in sorted(set(kept))]


@pytest.mark.integration
@pytest.mark.parametrize("last", [False, True])
def test_holistic_trace_analysis_reads_every_rank_and_iteration(tmp_path, last):
    integration("hta")
    from hta.trace_analysis import TraceAnalysis

    per_rank_traces(tmp_path)
    analyzer = TraceAnalysis(trace_dir=str(tmp_path / "traces"), include_last_profiler_step=last)
    assert sorted(analyzer.t.get_ranks()) == [0, 1]
    expected = set(range(1, ITERATIONS + (1 if last else 0)))  # HTA drops the last step unless told
    phases = {i for i, name in enumerate(analyzer.t.symbol_table.sym_table) if name in ("data", "compute")}
    for rank in (0, 1):
        df = analyzer.t.get_trace(rank)
        assert set(df["pid"]) == {rank}
        assert set(df["iteration"]) - {-1} == expected
        steps = df[df["name"].isin(phases)]
        assert len(steps) and (steps["iteration"] != -1).all()  # every span lies in its ProfilerStep
