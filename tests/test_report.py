from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from urllib.parse import urlparse

import pytest

from _pictures import assert_drawn
from _simulate import BASE, simulate
from trainperf import PerformanceRecord, RunDirSink, build_report
from trainperf.cli import main
from trainperf.ranks._report import write_report
from trainperf.ranks._report._html import script_json
from trainperf.ranks._report._load import Clock

HOSTILE = "</script><img src=x onerror=alert(1)>"


def slow_loader(tmp_path, **kw):
    simulate(tmp_path, ranks=4, iterations=200, etl_ms=lambda r, i: 41.0 if r == 3 else 2.0, **kw)
    return tmp_path


def test_slow_loader_on_one_rank_is_reported_as_a_data_straggler(tmp_path):
    report = build_report(slow_loader(tmp_path))
    assert [(s["rank"], s["cause"]) for s in report["stragglers"]] == [(3, "data")]
    straggler = report["stragglers"][0]
    assert straggler["excess_ms"] == pytest.approx(39.0)
    assert straggler["windows"] == report["analysed_windows"] == 19  # every window after the warm-up
    assert straggler["evidence"] == ("rank 3: data wait 41.0 ms vs 2.0 ms median of the others; "
                                     "the others wait 39.0 ms longer in the collective")
    assert straggler["iterations"] == list(range(20, 201, 10))
    # the headline names the same rank, cause and windows as the table
    assert "slowest rank 3" in report["cluster"] and "(data, +39.0 ms)" in report["cluster"]
    assert "(in 19 of 19 windows)" in report["cluster"]
    assert report["ranks"][3]["etl_ms"]["mean"] == pytest.approx(41.0)


def test_slow_compute_on_one_rank_is_reported_as_a_compute_straggler(tmp_path):
    """Ranks not in lock-step (each timed on its own), nothing but whole steps known: the slow step
    makes it arrive late."""
    simulate(tmp_path, ranks=3, iterations=100, forward_ms=lambda r, i: 40.0 if r == 1 else 10.0, sync=False,
             timed=False)
    assert [(s["rank"], s["cause"]) for s in build_report(tmp_path)["stragglers"]] == [(1, "compute")]


def test_host_work_on_rank_zero_is_named_host_and_no_waiting_rank_is_listed(tmp_path):
    """Rank 0 logs after each step: the others wait for it in their collective."""
    simulate(tmp_path, ranks=3, iterations=100, other_ms=lambda r, i: 25.0 if r == 0 else 0.5)
    report = build_report(tmp_path)
    assert [(s["rank"], s["cause"]) for s in report["stragglers"]] == [(0, "host")]
    assert report["ranks"][0]["other_ms"] == pytest.approx(25.0)
    assert report["ranks"][1]["wait_ms"] == pytest.approx(25.5, abs=0.01)


def test_an_intermittent_straggler_names_its_windows(tmp_path):
    slow = range(41, 61)  # iterations 41..60: the windows ending at 50 and 60
    simulate(tmp_path, ranks=3, iterations=200, etl_ms=lambda r, i: 30.0 if r == 2 and i in slow else 2.0)
    report = build_report(tmp_path)
    assert [(s["rank"], s["cause"], s["windows"], s["iterations"]) for s in report["stragglers"]] == [
        (2, "data", 2, [50, 60])]


def test_slow_forward_under_lock_step_is_a_forward_straggler_when_forward_is_recorded(tmp_path):
    """Under DDP the step times are equal; the forward time in ``extra`` tells the late rank."""
    for rank in range(4):
        forward = 35.0 if rank == 2 else 10.0
        with RunDirSink(tmp_path, rank=rank) as sink:
            for k in range(1, 11):
                compute = 35.0 + 20.0  # own forward, the wait for rank 2's forward, backward and step
                sink(PerformanceRecord(iteration=10 * k, window_iterations=10, window_s=0.57, warmup=k == 1,
                                       timestamp=BASE + 0.57 * k, etl_ms=2.0, compute_ms=compute, other_ms=0.0,
                                       iteration_ms=57.0, extra={"forward_ms": forward}, rank=rank))
    report = build_report(tmp_path)
    assert [(s["rank"], s["cause"], s["excess_ms"]) for s in report["stragglers"]] == [(2, "forward", 25.0)]
    assert report["ranks"][2]["forward_ms"] == 35.0


def _untimed(run_dir, ranks=3, **kw):
    """An FSDP-like run: lock-step, nothing of the step timed, every rank's meta data saying so."""
    from _simulate import run_dir_sink

    for listener in simulate(run_dir, ranks=ranks, iterations=100, timed=False, **kw):
        run_dir_sink(listener).set_collectives_untimed("FSDP2: fully_shard")
    return build_report(run_dir)


def test_untimed_collectives_name_a_late_data_rank_and_a_late_forward_names_nobody(tmp_path):
    """Without timed collectives the comparison is what precedes them: a slow loader shows on its own
    rank, a slow forward pass only makes the others' steps as long as its own."""
    report = _untimed(tmp_path / "data", etl_ms=lambda r, i: 30.0 if r == 1 else 2.0)
    assert [(s["rank"], s["cause"]) for s in report["stragglers"]] == [(1, "data")]
    assert _untimed(tmp_path / "forward", forward_ms=lambda r, i: 40.0 if r == 1 else 10.0)["stragglers"] == []


def test_the_report_says_which_ranks_collectives_were_not_timed_and_what_that_leaves_out(tmp_path):
    report = _untimed(tmp_path)
    assert report["collectives_untimed"] == [{"why": "FSDP2: fully_shard", "ranks": [0, 1, 2]}]
    assert [r["collectives_untimed"] for r in report["ranks"]] == ["FSDP2: fully_shard"] * 3
    line = ("collectives not timed (FSDP2: fully_shard) on ranks 0-2: stragglers are named only from what "
            "precedes the collectives (data wait, host time after the step, GC); a late forward pass, backward "
            "pass or optimizer step names no rank")
    write_report(tmp_path, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert f"<li>{line}</li>" in page  # among the notes
    assert f"<p class=note>C{line[1:]}.</p>" in page  # and beside the stragglers
    assert build_report(slow_loader(tmp_path / "ddp"))["collectives_untimed"] == []


def test_clock_offsets_put_the_same_iteration_at_the_same_aligned_time(tmp_path):
    simulate(tmp_path, ranks=3, iterations=60, shifts={1: 5.0, 2: -3.25}, clock_estimates=True)
    report = build_report(tmp_path)
    assert [(c["rank"], c["status"], c["offset_ms"]) for c in report["clocks"]] == [
        (0, "reference", 0.0), (1, "aligned", -5000.0), (2, "aligned", 3250.0)]
    spans = report["slowest"][0]["spans"]
    first = {}
    for rank, _phase, t, _d, i in spans:
        first.setdefault((i, rank), t)
    iteration = spans[0][4]
    assert first[(iteration, 0)] == pytest.approx(first[(iteration, 1)]) == pytest.approx(first[(iteration, 2)])
    assert report["start"] == pytest.approx(BASE)


def test_ranks_without_clock_estimates_are_marked_unknown(tmp_path):
    simulate(tmp_path, ranks=2, iterations=20)
    clocks = build_report(tmp_path)["clocks"]
    assert [(c["status"], c["offset_ms"], c["uncertainty_ms"]) for c in clocks] == [("unknown", 0.0, None)] * 2


def test_offset_drift_is_interpolated_between_estimates():
    clock = Clock([10.0, 20.0], [1.0, 2.0], [0.001, 0.001], "aligned")
    assert [clock.offset_at(t) for t in (0.0, 10.0, 15.0, 20.0, 99.0)] == [1.0, 1.0, 1.5, 2.0, 2.0]
    assert Clock().offset_at(5.0) == 0.0


def test_a_killed_rank_is_reported_silent_from_its_last_window(tmp_path):
    listeners = simulate(tmp_path, ranks=3, iterations=200, killed={1: 80})
    report = build_report(tmp_path)
    assert [s["rank"] for s in report["silent"]] == [1]
    since = report["ranks"][1]["silent_since"]
    assert since == pytest.approx(BASE + 80 * 0.032)  # 80 iterations of 2 + 10 + 20 ms
    assert report["ranks"][1]["iterations"] == 80 and report["ranks"][0]["silent_since"] is None
    assert not listeners[1].closed


def test_silent_event_from_rank_0_is_reported(tmp_path):
    simulate(tmp_path, ranks=2, iterations=20)
    with open(tmp_path / "rank-0" / "events.jsonl", "w") as f:
        f.write(json.dumps({"t": BASE + 1, "kind": "silent", "rank": 1, "last_seen": BASE + 0.5}) + "\n")
    assert build_report(tmp_path)["silent"] == [{"rank": 1, "since": BASE + 0.5}]


def test_cut_last_lines_are_tolerated(tmp_path):
    slow_loader(tmp_path)
    for name in ("windows.jsonl", "timeline.jsonl"):
        path = tmp_path / "rank-2" / name
        path.write_bytes(path.read_bytes()[:-7])
    report = build_report(tmp_path)
    assert report["ranks"][2]["skipped_lines"] == 2 and report["ranks"][2]["iterations"] == 190
    assert [(s["rank"], s["cause"]) for s in report["stragglers"]] == [(3, "data")]


def test_json_report_has_the_documented_keys(tmp_path):
    report = build_report(slow_loader(tmp_path))
    assert {"ranks", "stragglers", "clocks", "windows", "slowest", "silent", "cluster", "start"} <= set(report)
    rank = report["ranks"][0]
    keys = {"rank", "host", "pid", "iterations", "iteration_ms", "etl_ms", "samples_per_sec", "silent_since"}
    assert keys <= set(rank)
    assert set(rank["iteration_ms"]) == set(rank["etl_ms"]) == {"p50", "p95", "max", "mean"}
    assert set(report["stragglers"][0]) >= {"rank", "cause", "excess_ms", "evidence", "windows"}
    assert set(report["clocks"][0]) >= {"rank", "offset_ms", "uncertainty_ms", "status"}
    assert 0 < len(report["windows"]) <= 300 and report["windows"][-1]["samples_per_sec"] > 0
    assert {"iteration_first", "iteration_last", "spans"} <= set(report["slowest"][0])
    json.dumps(report, allow_nan=False)


def test_window_series_stay_bounded_for_long_runs(tmp_path):
    simulate(tmp_path, ranks=2, iterations=5000, frequency=5)
    report = build_report(tmp_path)
    assert len(report["windows"]) == 300 and all(len(r["rows"]) == 300 for r in report["rank_windows"])
    assert len(report["slowest"]) <= 5


def hostile_run(tmp_path):
    slow_loader(tmp_path)
    for rank in (0, 3):
        path = tmp_path / f"rank-{rank}" / "meta.json"
        meta = json.loads(path.read_text())
        meta.update(host=HOSTILE + "\u2028&", run_name=HOSTILE)
        path.write_text(json.dumps(meta))
    return tmp_path


def test_hostile_host_and_run_names_are_escaped_in_html(tmp_path):
    out = tmp_path / "report.html"
    write_report(hostile_run(tmp_path / "run"), out, "html")
    page = out.read_text()
    assert "<img" not in page and HOSTILE not in page
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert "<" not in data and ">" not in data and "&" not in data and "\u2028" not in data
    assert json.loads(data)["run_name"] == HOSTILE
    assert page.count("<script") == 3  # two data blocks and the page's own script


def test_script_json_escapes_markup_characters():
    text = script_json({"a": "</script>&\u2028\u2029"})
    assert text == '{"a":"\\u003c/script\\u003e\\u0026\\u2028\\u2029"}'
    assert json.loads(text) == {"a": "</script>&\u2028\u2029"}


def test_html_is_self_contained(tmp_path):
    out = tmp_path / "report.html"
    write_report(slow_loader(tmp_path / "run"), out, "html")
    page = out.read_text()
    assert not re.search(r"(https?:)?//[a-z0-9]", page, re.I), "the page names no URL"
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", page, re.I)
    assert "default-src 'none'" in page


def test_perfetto_trace_has_one_process_per_rank_on_aligned_time(tmp_path):
    simulate(tmp_path / "run", ranks=3, iterations=40, shifts={2: 7.0}, clock_estimates=True)
    out = tmp_path / "trace.json"
    write_report(tmp_path / "run", out, "perfetto")
    trace = json.loads(out.read_text())
    assert trace["displayTimeUnit"] == "ms" and trace["distributedInfo"]["world_size"] == 3
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == [0, 1, 2] and all(names[r].startswith(f"rank {r} (") for r in names)
    steps = [e for e in events if e["ph"] == "X" and e.get("cat") == "step" and e["args"]["iteration"] == 1]
    assert {e["pid"] for e in steps} == {0, 1, 2}
    assert len({e["ts"] for e in steps if e["name"] == "data"}) == 1  # rank 2's 7 s shift is taken out
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events if e["ph"] == "X")


def test_perfetto_folder_gets_one_trace_per_rank(tmp_path):
    simulate(tmp_path / "run", ranks=2, iterations=20)
    written = write_report(tmp_path / "run", str(tmp_path / "traces") + "/", "perfetto")
    assert [p.name for p in written] == ["rank-0.json", "rank-1.json"]
    for rank, path in enumerate(written):
        trace = json.loads(path.read_text())
        assert trace["distributedInfo"]["rank"] == rank
        assert {e["pid"] for e in trace["traceEvents"]} == {rank}


def test_perfetto_trace_loads_in_the_trace_processor(tmp_path):
    tp_module = pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed")
    simulate(tmp_path / "run", ranks=3, iterations=40)
    out = tmp_path / "trace.json"
    write_report(tmp_path / "run", out, "perfetto")
    binary = os.environ.get("TRACE_PROCESSOR_SHELL")  # a local trace_processor_shell, for machines offline
    try:
        tp = tp_module.TraceProcessor(trace=str(out), config=tp_module.TraceProcessorConfig(bin_path=binary))
    except Exception as exc:  # noqa: BLE001 - the package fetches its trace_processor_shell binary on first use
        pytest.skip("perfetto's trace processor could not start: it downloads trace_processor_shell on first use "
                    f"(set TRACE_PROCESSOR_SHELL to a local copy): {exc}")
    try:
        processes = {row.name for row in tp.query("select name from process where name like 'rank %'")}
        slices = next(iter(tp.query("select count(*) as n from slice"))).n
    finally:
        tp.close()
    assert len(processes) == 3 and slices > 0


def test_cli_writes_each_format(tmp_path, capsys):
    run = slow_loader(tmp_path / "run")
    assert main(["report", str(run), "-o", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["stragglers"][0]["rank"] == 3
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(run), "-o", str(tmp_path / "t.json"), "--format", "perfetto"]) == 0
    assert "traceEvents" in json.loads((tmp_path / "t.json").read_text())
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize(("setup", "message"), [
    ("missing", "run_dir '{run}' does not exist or is not a folder"),
    ("empty", "run_dir '{run}' holds no rank-<r> folder"),
])
def test_cli_names_a_missing_or_empty_run_dir(tmp_path, capsys, setup, message):
    run = tmp_path / "run"
    if setup == "empty":
        run.mkdir()
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert f"trainperf report: error: {message.format(run=run)}" in err and "Traceback" not in err


def test_cli_rejects_a_bad_format_and_an_unwritable_output(tmp_path, capsys):
    run = slow_loader(tmp_path / "run")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(run), "-o", str(tmp_path / "r.html"), "--format", "pdf"])
    assert exit_info.value.code == 2 and "argument --format: invalid choice: 'pdf'" in capsys.readouterr().err
    assert main(["report", str(run), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert f"cannot write '{tmp_path / 'no' / 'r.html'}'" in capsys.readouterr().err


def test_cli_runs_as_a_module_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "trainperf", "report", str(tmp_path / "nope"), "-o", "x.html"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "does not exist" in result.stderr


# ---------------------------------------------------------------------------- headless Chromium
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: Hosts the browser itself calls in the background (time, accounts, spell-check dictionaries).
BROWSER_OWN = re.compile(r"(^|\.)(google\.com|googleapis\.com|gvt1\.com|gstatic\.com)$")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--enable-logging=stderr", "--v=0"]


def chromium(tmp_path, page, *args):
    if CHROMIUM is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium; .ci/run installs it)")
    net = tmp_path / "net.json"
    result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--log-net-log={net}",
                             *args, page.as_uri()], capture_output=True, text=True, timeout=120)
    urls = set(re.findall(r'"url":"([^"]+)"', net.read_text())) if net.exists() else set()
    fetched = {u for u in urls if not u.startswith("file:") and not BROWSER_OWN.search(urlparse(u).hostname or "")}
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result, fetched, console


def test_html_renders_in_headless_chromium_without_errors_or_requests(tmp_path):
    page = tmp_path / "report.html"
    write_report(hostile_run(tmp_path / "run"), page, "html")
    result, fetched, console = chromium(tmp_path, page, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console == [] and fetched == set()
    assert re.search(r'<body data-rendered="\d+"', result.stdout), "the page's script ran to its end"
    assert "<img" not in result.stdout
    for rank in range(4):
        assert f"<td>{rank}</td>" in result.stdout


def test_html_screenshot(tmp_path):
    page = tmp_path / "report.html"
    write_report(slow_loader(tmp_path / "run", killed={1: 120}), page, "html")
    shot = tmp_path / "shot.png"
    result, fetched, console = chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1400,1000")
    assert result.returncode == 0, result.stderr[-2000:]
    assert_drawn(shot)
    assert console == [] and fetched == set()
