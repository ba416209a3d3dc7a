"""``trainperf report`` lists the profiler captures (``capture`` events of each rank's ``events.jsonl``)
beside the windows that triggered them; a capture event that is not a run's is skipped and counted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FakeClock
from trainperf import CaptureRule, PerformanceListener, run_dir_files, write_run_dir_files
from trainperf.ranks import build_report
from trainperf.ranks._layout import EVENTS, RANK_FILES
from trainperf.ranks._report import _load, write_report
from trainperf.ranks._report._html import _trace_href
from trainperf.ranks._report._notes import read_notes

BASE = 1_700_000_000.0
HOSTILE = "<script>alert(1)</script>"

#: Captures at the first slow window, with no baseline capture: one trace, of iterations 92-94.
AT_ONCE = CaptureRule(baseline=False, confirm=1)


def slow_from_81(i: int) -> float:
    return 0.006 if i >= 81 else 0.001


def run_ranks(root: Path, ranks: int = 2, iterations: int = 100) -> Path:
    """``ranks`` ranks of ``iterations`` iterations, windows of 10; rank 1's from 81 on take 6 ms, 1 ms before."""
    for rank in range(ranks):
        clock = FakeClock()
        listener = PerformanceListener(10, run_dir=root, rank=rank, clock=clock, sinks=[], report_hardware=False,
                                       wall_clock=lambda c=clock: BASE + c.now, sink_thread=False)
        for i in range(1, iterations + 1):
            clock.advance(slow_from_81(i) if rank == 1 else 0.001)
            listener.record_iteration(samples=4)
        listener.close()
    return root


def capture(**fields) -> dict:
    """A capture event as a listener with ``run_dir=`` and ``profile_dir=`` writes it."""
    event = {"kind": "capture", "t": BASE + 100.6, "path": "/abs/traces/rank1-iter92-94.pt.trace.json.gz", "rank": 1,
             "bytes": 2_500_000, "trimmed_events": 0, "trigger_first_iteration": 81, "trigger_last_iteration": 90,
             "reason": "p95 6.00 ms > 3 x the run's median 1.00 ms", "first_iteration": 92, "last_iteration": 94,
             "iterations": 3, "traced_iteration_ms": 6.01, "trigger_median_ms": 5.9, "cost_ms": 1.2,
             "export_ms": 150.0}
    event.update(fields)
    return event


def add_events(root: Path, rank: int, *events: dict | str) -> None:
    with open(root / f"rank-{rank}" / EVENTS, "a") as f:
        for event in events:
            f.write((event if isinstance(event, str) else json.dumps(event)) + "\n")


@pytest.fixture
def run(tmp_path) -> Path:
    return run_ranks(tmp_path / "run")


def test_a_capture_on_rank_1_is_listed_beside_its_triggering_windows_figures(run, tmp_path):
    add_events(run, 1, capture())
    report = build_report(run)
    (c,) = report["captures"]
    assert report["captures_total"] == 1
    c = dict(c)
    window = c.pop("trigger_window")
    assert c == {"rank": 1, "trigger_first_iteration": 81, "trigger_last_iteration": 90,
                 "reason": "p95 6.00 ms > 3 x the run's median 1.00 ms", "first_iteration": 92, "last_iteration": 94,
                 "iterations": 3, "path": "/abs/traces/rank1-iter92-94.pt.trace.json.gz", "bytes": 2_500_000,
                 "trimmed_events": 0, "traced_iteration_ms": 6.01, "trigger_median_ms": 5.9, "cost_ms": 1.2,
                 "export_ms": 150.0, "t": pytest.approx(BASE + 100.6 - report["start"], abs=1e-3)}
    assert window["iteration_ms"] == pytest.approx(6.0) and window["iteration_p95_ms"] == pytest.approx(6.0)
    assert window["iteration_p50_ms"] == pytest.approx(6.0) and window["warmup"] is False
    assert window["t1"] - window["t0"] == pytest.approx(0.06, abs=1e-3)  # ten iterations of 6 ms
    # the JSON file says the same, strictly
    out = tmp_path / "report.json"
    write_report(run, out, "json")
    assert json.loads(out.read_text())["captures"] == report["captures"]
    assert all(r["skipped"]["events"] == 0 for r in report["ranks"])


def test_the_html_lists_the_capture_with_its_text_escaped_and_a_link_to_the_trace(run, tmp_path):
    path = "/abs/tr aces/<img src=x onerror=alert(2)>#.pt.trace.json.gz"
    add_events(run, 1, capture(reason=f"p95 {HOSTILE} & more", path=path, trimmed_events=1234))
    out = tmp_path / "report.html"
    write_report(run, out, "html")
    page = out.read_text()
    assert "<h2>Profiler captures</h2>" in page
    row = re.search(r"<tr><td>1</td><td>iterations 81-90</td>.*?</tr>", page).group(0)
    assert "<td>p95 6.0, mean 6.0</td>" in row and "<td>92-94</td>" in row
    assert "p95 &lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in row
    assert ">&lt;img src=x onerror=alert(2)&gt;#.pt.trace.json.gz</a>" in row
    assert "href='file:///abs/tr%20aces/%3Cimg%20src%3Dx%20onerror%3Dalert%282%29%3E%23.pt.trace.json.gz'" in row
    assert "<td>2.50 (1,234 events left out)</td><td>1.2</td><td>150.0</td>" in row
    assert HOSTILE not in page and "<img" not in page
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert "<" not in data and ">" not in data
    assert json.loads(data)["captures"][0]["reason"] == f"p95 {HOSTILE} & more"
    assert page.count("<script") == 3


def test_a_run_without_captures_has_no_captures_section(run, tmp_path):
    report = build_report(run)
    assert report["captures"] == [] and report["captures_total"] == 0
    out = tmp_path / "report.html"
    write_report(run, out, "html")
    assert "Profiler captures" not in out.read_text()


MALFORMED = {
    "no path": capture(path=None),
    "a path that is a number": capture(path=3),
    "an empty path": capture(path=""),
    "a path longer than any": capture(path="/" + "a" * 5000),
    "no reason": {k: v for k, v in capture().items() if k != "reason"},
    "a reason that is a list": capture(reason=["slow"]),
    "no triggering window": {k: v for k, v in capture().items() if k != "trigger_first_iteration"},
    "an iteration that is a bool": capture(first_iteration=True),
    "an iteration that is a float": capture(last_iteration=94.0),
    "a negative iteration": capture(trigger_first_iteration=-1),
    "a 400-digit iteration": capture(trigger_last_iteration=10**400),
    "a window that ends before it starts": capture(trigger_first_iteration=91),
    "traced iterations backwards": capture(first_iteration=95),
    "a size that is text": capture(bytes="12345"),
    "a negative cost": capture(cost_ms=-1.0),
    "a cost of NaN": '{"kind": "capture", "path": "/x.gz", "reason": "r", "trigger_first_iteration": 1, '
                     '"trigger_last_iteration": 2, "first_iteration": 4, "last_iteration": 6, "cost_ms": NaN}',
    "an export time beyond any run's": capture(export_ms=1e300),
    "a time that is text": capture(t="yesterday"),
    "a time in the year 10**292": capture(t=1e300),
    "a rank that is text": capture(rank="1"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_capture_event_is_skipped_and_counted_and_every_format_is_written(run, tmp_path, case):
    add_events(run, 1, capture(), MALFORMED[case])
    report = build_report(run)
    assert [(c["rank"], c["first_iteration"]) for c in report["captures"]] == [(1, 92)]  # the good one stays
    assert report["ranks"][1]["skipped"]["events"] == 1 and report["ranks"][0]["skipped"]["events"] == 0
    assert "rank 1: skipped 1 line of events" in " ".join(read_notes(report))
    json.dumps(report, allow_nan=False)
    for fmt, out in (("html", "r.html"), ("json", "r.json"), ("perfetto", "r.trace.json")):
        (written,) = write_report(run, tmp_path / out, fmt)
        assert written.stat().st_size > 0


def test_optional_fields_may_be_null_or_absent(run, tmp_path):
    bare = {k: v for k, v in capture().items() if k not in ("t", "bytes", "export_ms", "iterations")}
    add_events(run, 1, capture(rank=None, trimmed_events=None, cost_ms=None, traced_iteration_ms=None,
                               trigger_median_ms=None), bare)
    report = build_report(run)
    assert report["ranks"][1]["skipped"]["events"] == 0
    assert [(c["rank"], c["t"], c["bytes"], c["cost_ms"]) for c in report["captures"]] == [
        (1, pytest.approx(BASE + 100.6 - report["start"], abs=1e-3), 2_500_000, None), (1, None, None, 1.2)]
    out = tmp_path / "report.html"
    write_report(run, out, "html")
    assert out.read_text().count("<td>iterations 81-90</td>") == 2


def test_a_lone_surrogate_in_the_text_does_not_stop_the_page(run, tmp_path):
    add_events(run, 1, capture(reason="slow \ud800", path="/t/\udcff.gz"))
    out = tmp_path / "report.html"
    write_report(run, out, "html")
    (c,) = build_report(run)["captures"]
    assert (c["reason"], c["path"]) == ("slow ?", "/t/?.gz")


def test_captures_are_listed_by_rank_then_iteration_with_their_own_windows(run):
    add_events(run, 1, capture(trigger_first_iteration=91, trigger_last_iteration=100, first_iteration=102,
                               last_iteration=104), capture())
    add_events(run, 0, capture(rank=0, trigger_first_iteration=41, trigger_last_iteration=50, first_iteration=52,
                               last_iteration=54))
    report = build_report(run)
    listed = [(c["rank"], c["trigger_last_iteration"], c["trigger_window"]["iteration_ms"]) for c in report["captures"]]
    assert listed == [(0, 50, pytest.approx(1.0)), (1, 90, pytest.approx(6.0)), (1, 100, pytest.approx(6.0))]
    assert report["silent"] == []  # capture events are no cluster events


def test_a_triggering_window_the_report_did_not_read_has_no_figures(run, tmp_path):
    add_events(run, 1, capture(trigger_first_iteration=500, trigger_last_iteration=509))  # not a window of the run
    (c,) = build_report(run)["captures"]
    assert c["trigger_window"] is None
    out = tmp_path / "report.html"
    write_report(run, out, "html")
    assert "<td>iterations 500-509</td><td>&ndash; (window not read)</td>" in out.read_text()


def test_a_captures_time_moves_onto_rank_0s_clock(run):
    with open(run / "rank-1" / "clock.jsonl", "a") as f:
        f.write(json.dumps({"t": BASE, "offset_s": -5.0, "uncertainty_s": 0.001, "status": "aligned"}) + "\n")
    add_events(run, 1, capture(t=BASE + 105.6))
    report = build_report(run)
    (c,) = report["captures"]
    assert c["t"] == pytest.approx(BASE + 100.6 - report["start"], abs=1e-3)


def test_past_the_limit_captures_are_counted_not_listed(run, tmp_path, monkeypatch):
    monkeypatch.setattr(_load, "MAX_CAPTURES", 2)
    add_events(run, 1, *(capture(first_iteration=92 + k, last_iteration=94 + k) for k in range(3)))
    report = build_report(run)
    assert len(report["captures"]) == 2 and report["captures_total"] == 3
    out = tmp_path / "report.html"
    write_report(run, out, "html")
    assert "1 more capture not listed." in out.read_text()


def test_the_captures_kept_are_the_first_the_report_lists_whatever_the_files_order(run, monkeypatch):
    """Only as many captures as the report lists are held, over all ranks: a file of any number costs no more."""
    monkeypatch.setattr(_load, "MAX_CAPTURES", 3)
    add_events(run, 1, *(capture(trigger_first_iteration=i - 9, trigger_last_iteration=i, first_iteration=i + 2,
                                 last_iteration=i + 4) for i in (90, 30, 70, 50, 10)))  # not in order
    add_events(run, 0, capture(rank=0), capture(rank=0, trigger_first_iteration=1, trigger_last_iteration=10))
    report = build_report(run)
    assert [(c["rank"], c["trigger_last_iteration"]) for c in report["captures"]] == [(0, 10), (0, 90), (1, 10)]
    assert report["captures_total"] == 7
    assert [len(r.captures) for r in _load.load_run(run).ranks] == [2, 1]


def test_trace_links_never_become_another_scheme():
    assert _trace_href("/a b/x#1?.gz") == "file:///a%20b/x%231%3F.gz"
    assert _trace_href("javascript:alert(1)") == "javascript%3Aalert%281%29"  # relative, not a scheme
    assert _trace_href("traces/rank1-iter92-94.pt.trace.json.gz") == "traces/rank1-iter92-94.pt.trace.json.gz"
    assert _trace_href("C:\\traces\\r.gz") == "file:///C:/traces/r.gz"
    assert _trace_href("/t/\ud800") is None


def test_every_ranks_events_are_among_the_files_handed_to_rank_0(run, tmp_path):
    """Spark's driver and rank 0 of a ``torch.distributed`` run get each rank's events, its captures with them."""
    assert EVENTS in RANK_FILES
    add_events(run, 1, capture())
    files = run_dir_files(run)
    assert "rank-1/events.jsonl" in files
    copy = write_run_dir_files(files, tmp_path / "copy")
    assert [c["rank"] for c in build_report(copy)["captures"]] == [1]


class FakeTracer:
    """The profiler a capture drives, without torch: a trace of its iterations' markers."""

    def __init__(self) -> None:
        self.marks: list[int] = []

    def prepare(self) -> None:
        pass

    def start(self) -> None:
        pass

    def mark(self, iteration: int) -> None:
        self.marks.append(iteration)

    def stop(self) -> None:
        pass

    def save(self, path: str) -> None:
        events = [{"ph": "X", "name": f"ProfilerStep#{m}", "ts": float(m), "dur": 1.0, "pid": 1, "tid": 1}
                  for m in self.marks]
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)


def test_a_listener_with_profile_dir_and_run_dir_gets_its_capture_beside_window_81_90(tmp_path):
    root = tmp_path / "run"
    run_ranks(root, ranks=1, iterations=140)  # rank 0, steady
    clock = FakeClock()
    with PerformanceListener(10, clock=clock, wall_clock=lambda: BASE + clock.now, sinks=[], sink_thread=False,
                             profile_dir=tmp_path / "traces", rank=1, run_dir=root, report_hardware=False,
                             profile_rule=AT_ONCE) as lis:
        lis._capture._new_tracer = FakeTracer
        for i in range(1, 141):
            clock.advance(slow_from_81(i))
            lis.record_iteration(samples=4)
            assert lis._capture.wait(10.0)  # the writer's time passes between iterations, as in real training
    (trace,) = (tmp_path / "traces").glob("*.gz")
    report = build_report(root)
    (c,) = report["captures"]
    assert (c["rank"], c["trigger_first_iteration"], c["trigger_last_iteration"], c["first_iteration"],
            c["last_iteration"], c["iterations"]) == (1, 81, 90, 92, 94, 3)
    assert c["path"] == str(trace) and c["bytes"] == trace.stat().st_size and c["trimmed_events"] == 0
    assert c["reason"].startswith("p95 6.00 ms > 3 x the run's median 1.00 ms")
    assert c["traced_iteration_ms"] == pytest.approx(6.0)
    assert c["trigger_median_ms"] == pytest.approx(6.0)  # the triggering window's own median
    assert c["trigger_window"]["iteration_p95_ms"] == pytest.approx(6.0)
    assert c["trigger_window"]["iteration_ms"] == pytest.approx(6.0)
    out = tmp_path / "report.html"
    write_report(root, out, "html")
    page = out.read_text()
    assert f">{trace.name}</a>" in page and "<td>iterations 81-90</td>" in page


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH")
def test_the_page_with_captures_renders_in_headless_chromium_without_errors(run, tmp_path):
    add_events(run, 1, capture(reason=HOSTILE))
    page = tmp_path / "report.html"
    write_report(run, page, "html")
    result = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--disable-background-networking", "--enable-logging=stderr", "--v=0",
                             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert [line for line in result.stderr.splitlines() if ":CONSOLE" in line] == []
    assert re.search(r'<body data-rendered="\d+"', result.stdout), "the page's script ran to its end"
    assert "<script>alert" not in result.stdout and "Profiler captures" in result.stdout


def _handover_rank(rank: int, port: int, out: str) -> None:
    """One rank of a 2-rank gloo run, each with a folder of its own; rank 1 captures its bad window."""
    import os

    import torch.distributed as dist

    from trainperf.torch.shared import join_cluster

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    clock = FakeClock()
    profile = {"profile_dir": os.path.join(out, "traces"), "profile_rule": AT_ONCE} if rank == 1 else {}
    listener = PerformanceListener(10, clock=clock, sinks=[], sink_thread=False, verdict=False, rank=rank,
                                   run_dir=os.path.join(out, f"own-{rank}"), report_hardware=False,
                                   cluster_timeout_s=20.0, **profile)
    assert join_cluster(listener)
    if listener._capture is not None:
        listener._capture._new_tracer = FakeTracer
    for i in range(1, 141):
        clock.advance(slow_from_81(i) if rank == 1 else 0.001)
        listener.record_iteration(samples=4)
        if listener._capture is not None:
            assert listener._capture.wait(10.0)
    listener.close()  # rank 1 hands its files to rank 0; rank 0 waits for them
    dist.destroy_process_group()
    os._exit(0)


@pytest.mark.realtime
def test_rank_1s_capture_reaches_rank_0s_own_folder_when_disks_are_not_shared(tmp_path):
    pytest.importorskip("torch")
    import torch.distributed as dist

    from _ranks import run_forked

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    assert run_forked(_handover_rank, 2, (str(tmp_path),), 120.0) == [0, 0]
    own = tmp_path / "own-0" / "rank-0" / EVENTS  # rank 0's cluster lines; no capture of its own
    assert all(json.loads(line)["kind"] != "capture" for line in (own.read_text().splitlines() if own.exists() else []))
    assert (tmp_path / "own-0" / "rank-1" / EVENTS).exists()  # handed over: only rank 1 wrote it
    (c,) = build_report(tmp_path / "own-0")["captures"]
    assert (c["rank"], c["trigger_first_iteration"], c["trigger_last_iteration"]) == (1, 81, 90)
    assert c["trigger_window"]["iteration_p95_ms"] == pytest.approx(6.0)
    (trace,) = (tmp_path / "traces").glob("*.gz")
    assert c["path"] == str(trace)
