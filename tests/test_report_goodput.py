"""The job's goodput in ``trainperf report``: the JSON holds the account read from the run directory,
the HTML page a section with its headline, one bar of the rows over the wall time, the table of rows
and the attempts on a timeline; a run directory whose account cannot be read still reports, and says why."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from trainperf import PerformanceListener
from trainperf.ranks._report import _analyse, read_goodput, write_report
from trainperf.ranks._report._goodput_html import goodput_section
from trainperf.records import GOODPUT_ROWS

BASE = 1_700_000_000.0


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return BASE + self.t


def _attempt(run_dir: Path, rank: int, clock: _Clock, *, begin: float, first: int, iterations: int,
             close: bool, step_s: float = 0.1) -> PerformanceListener:
    """One process of ``rank``: 5 s of start-up, a checkpoint loaded when resumed, ``iterations`` steps
    from ``first`` with an evaluation every 50, closed or left as a killed process leaves it."""
    clock.t = begin
    listener = PerformanceListener(10, sinks=[], verdict=False, clock=clock.mono, wall_clock=clock.wall, rank=rank,
                                   run_dir=run_dir, sink_thread=False)
    clock.t += 5.0
    if first:
        listener.add_time("checkpoint_load", 2.0)
        clock.t += 2.0
    listener.start(iteration=first)
    for i in range(iterations):
        clock.t += step_s + 0.01 * rank
        if i % 50 == 49:
            listener.add_time("eval", 1.0)
            clock.t += 1.0
        listener.record_iteration(samples=32, etl=0.01)
    if close:
        listener.close()
    return listener


def restarted_run(run_dir: Path, ranks: int = 2) -> list[PerformanceListener]:
    """Each rank killed at iteration 250, then resumed from the checkpoint of iteration 200 to 500."""
    listeners = []
    for rank in range(ranks):
        clock = _Clock()
        listeners.append(_attempt(run_dir, rank, clock, begin=0.0, first=0, iterations=250, close=False))
        listeners.append(_attempt(run_dir, rank, clock, begin=60.0, first=200, iterations=300, close=True))
    return listeners


@pytest.fixture
def run(tmp_path) -> Path:
    restarted_run(tmp_path / "run")
    return tmp_path / "run"


def _section(page: str) -> str:
    match = re.search(r"<section id=goodput>(.*?)</section>", page, re.S)
    assert match, "no goodput section"
    return match.group(1)


def _bar(section: str) -> dict[str, float]:
    """The bar's segments read back: row -> width in the bar's 1000 units."""
    bar = re.search(r"<svg class=gpbar[^>]*>(.*?)</svg>", section, re.S)
    assert bar
    return {row: float(width) for row, width in re.findall(r"<rect data-row=\"(\w+)\" x=\"[0-9.]+\" "
                                                          r"width=\"([0-9.]+)\"", bar.group(1))}


def test_the_json_report_holds_the_account_whose_rows_add_up_to_the_wall_time(run, tmp_path):
    write_report(run, tmp_path / "r.json", "json")
    report = json.loads((tmp_path / "r.json").read_text())
    goodput = report["goodput"]
    assert report["schema"] == 2 and report["goodput_missing"] is None
    assert goodput == json.loads(json.dumps(read_goodput(run).to_dict()))
    assert [r["row"] for r in goodput["rows"]] == [key for key, _ in GOODPUT_ROWS]
    assert math.isclose(sum(r["seconds"] for r in goodput["rows"]), goodput["wall_s"], rel_tol=1e-9)
    assert math.isclose(sum(r["share"] for r in goodput["rows"]), 1.0, rel_tol=1e-9)
    # each rank: a killed attempt from 0 to 250, then one resumed at 200 that closed at 500
    assert [(a["start_iteration"], a["reached"], a["clean"]) for a in goodput["attempts"]] == [
        (0, 250, False), (200, 500, True)]
    assert goodput["lost_iterations"] == 50 and goodput["net_progress"] == 500
    assert sorted(goodput["ranks"]) == ["0", "1"] and goodput["rank"] == 1  # rank 1 steps 10 ms slower
    assert _analyse.build_report(run)["goodput"] == goodput  # the function gives what the command writes


def test_the_page_shows_the_goodput_section_near_the_top(run, tmp_path):
    write_report(run, tmp_path / "r.html", "html")
    page = (tmp_path / "r.html").read_text()
    account = read_goodput(run)
    section = _section(page)
    assert page.index("<section id=goodput>") < page.index("<h2>Stragglers</h2>")
    head = re.sub(r"<[^>]+>", "", section.split("</p>")[0])
    assert f"Goodput {100 * account.goodput:.1f}%" in head
    assert f"{1000 * account.ideal_step_s:.4g} ms" in head and "500 iterations of net progress" in head
    assert "50 iterations lost" in head and "2 attempts" in head
    # one bar: a segment per row with time, productive first, widths in proportion to the seconds
    widths = _bar(section)
    shown = [key for key, _ in GOODPUT_ROWS if account.rows[key] > 0.0]
    assert list(widths) == shown and shown[0] == "productive"
    scale = sum(account.rows[k] for k in shown)
    for key in shown:
        assert widths[key] == pytest.approx(1000.0 * account.rows[key] / scale, abs=0.002), key
    assert sum(widths.values()) == pytest.approx(1000.0, abs=0.01)
    # the legend and the table give every row's seconds and share
    for _, words in GOODPUT_ROWS:
        assert f"<td>{html.escape(words)}" in section
    assert f"{100 * account.share('restart_gaps'):.1f}%" in section
    assert "trainperf&#x27;s own time" in section and "trainperf's own time" not in section


def test_the_attempts_lie_on_a_timeline_with_their_start_up_and_the_gap_between_them(run, tmp_path):
    write_report(run, tmp_path / "r.html", "html")
    section = _section((tmp_path / "r.html").read_text())
    timeline = re.search(r"<svg class=gptimeline[^>]*>(.*?)</svg>", section, re.S)
    assert timeline
    bars = [(float(x), float(w)) for x, w in re.findall(
        r"<rect class=attempt x=\"([0-9.]+)\" y=\"[0-9.]+\" width=\"([0-9.]+)\"", timeline.group(1))]
    startups = [(float(x), float(w)) for x, w in re.findall(
        r"<rect class=startup x=\"([0-9.]+)\" y=\"[0-9.]+\" width=\"([0-9.]+)\"", timeline.group(1))]
    assert len(bars) == len(startups) == 2
    account = read_goodput(run)
    first, second = account.attempts
    scale = bars[0][1] / (first.last_seen - first.process_start)
    # in proportion to the wall times: the second starts after the gap, each start-up is its own length
    assert bars[1][0] - (bars[0][0] + bars[0][1]) == pytest.approx(scale * (second.process_start - first.last_seen),
                                                                   abs=0.01)
    assert bars[1][1] == pytest.approx(scale * (second.last_seen - second.process_start), abs=0.01)
    for (x, _), (sx, sw), a in zip(bars, startups, account.attempts, strict=True):
        assert sx == x and sw == pytest.approx(scale * (a.started - a.process_start), abs=0.01)
    text = re.sub(r"<[^>]+>", " ", timeline.group(1))
    assert "killed" in text and "clean end" in text and "iterations 0-250" in text and "iterations 200-500" in text


def _made_up(rows: dict[str, float], wall: float, attempts: int = 1) -> dict[str, Any]:
    """An account as ``to_dict`` gives it, with these rows and ``attempts`` attempts of 100 s, 10 s apart."""
    seconds = dict.fromkeys((key for key, _ in GOODPUT_ROWS), 0.0) | rows
    return {"wall_s": wall, "goodput": seconds["productive"] / wall, "ideal_step_s": 0.1, "net_progress": 800,
            "lost_iterations": 0, "first_iteration": 0, "last_iteration": 800, "rank": 0,
            "rows": [{"row": k, "what": w, "seconds": seconds[k], "share": seconds[k] / wall} for k, w in GOODPUT_ROWS],
            "attempts": [{"process_start": BASE + 110.0 * k, "started": BASE + 110.0 * k + 2.0,
                          "last_seen": BASE + 110.0 * k + 100.0, "start_iteration": 0, "reached": 800,
                          "clean": k == attempts - 1, "pid": 7} for k in range(attempts)]}


def test_a_negative_row_stays_out_of_the_bar_which_then_marks_the_wall_time():
    """Steps faster than the ideal make the slowdown negative: the bar holds the positive rows and
    marks where the wall time ends, the legend gives the negative row's seconds."""
    goodput = _made_up({"productive": 80.0, "data_wait": 15.0, "restart_gaps": 10.0, "slowdown": -5.0}, 100.0)
    section = goodput_section({"goodput": goodput, "goodput_missing": None})
    widths = _bar(section)
    assert widths == pytest.approx({"productive": 1000 * 80 / 105, "data_wait": 1000 * 15 / 105,
                                    "restart_gaps": 1000 * 10 / 105}, abs=0.002)
    wall = re.search(r"<line class=wall x1=\"([0-9.]+)\"", section)
    assert wall and float(wall.group(1)) == pytest.approx(1000 * 100 / 105, abs=0.002)
    assert "-5.00 s" in section and "-5.0%" in section


def test_the_timeline_draws_the_newest_attempts_of_many_and_counts_the_rest():
    goodput = _made_up({"productive": 80.0, "restart_gaps": 20.0}, 100.0, attempts=45)
    section = goodput_section({"goodput": goodput, "goodput_missing": None})
    assert section.count("<rect class=attempt ") == 40
    assert "The first 5 attempts are not drawn." in section
    assert "attempt 6: " in section and "attempt 45: " in section and "attempt 5: " not in section


def test_a_garbage_ledger_still_reports_from_the_windows_and_says_so(run, tmp_path):
    (run / "rank-0" / "goodput.json").write_bytes(b"\x00{not json")
    write_report(run, tmp_path / "r.json", "json")
    write_report(run, tmp_path / "r.html", "html")
    goodput = json.loads((tmp_path / "r.json").read_text())["goodput"]
    assert any("rank 0: goodput.json: not read" in note for note in goodput["notes"])
    assert math.isclose(sum(r["seconds"] for r in goodput["rows"]), goodput["wall_s"], rel_tol=1e-9)
    section = _section((tmp_path / "r.html").read_text())
    assert "rank 0: goodput.json: not read (JSONDecodeError)" in section


def test_a_run_with_no_account_reports_without_one_and_says_why(tmp_path):
    run = tmp_path / "run <i>&'"
    (run / "rank-0").mkdir(parents=True)
    (run / "rank-0" / "goodput.json").write_bytes(b"garbage")
    (run / "rank-0" / "meta.json").write_text(json.dumps({"schema": 1, "rank": 0, "started": BASE}))
    write_report(run, tmp_path / "r.json", "json")
    write_report(run, tmp_path / "r.html", "html")
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["goodput"] is None
    assert report["goodput_missing"] == f"run_dir {str(run)!r}: no rank wrote a window or a goodput.json"
    assert any(note.startswith("goodput not known: run_dir") for note in report["notes"])
    section = _section((tmp_path / "r.html").read_text())
    assert "Not known: " + html.escape(report["goodput_missing"]) in section
    assert "<i>" not in section and "gpbar" not in section


def test_an_unreadable_account_does_not_stop_the_report(run, tmp_path, monkeypatch):
    def fail(run_dir, folders=None):
        raise OSError("disk <gone>")

    monkeypatch.setattr("trainperf.ranks._report._goodput.read_goodput", fail)
    write_report(run, tmp_path / "r.html", "html")
    section = _section((tmp_path / "r.html").read_text())
    assert "Not known: could not read the run directory: disk &lt;gone&gt;" in section


def test_a_ledger_of_wall_times_no_clock_gives_leaves_the_report_whole(tmp_path):
    """Wall times no clock gives, whose difference would overflow: that attempt is left out, and said."""
    run = tmp_path / "run"
    restarted_run(run, ranks=1)
    ledger = json.loads((run / "rank-0" / "goodput.json").read_text())
    ledger["attempts"][0].update(process_start=-1e308, last_seen=1e308)
    (run / "rank-0" / "goodput.json").write_text(json.dumps(ledger))
    write_report(run, tmp_path / "r.json", "json")
    report = json.loads((tmp_path / "r.json").read_text())
    account = report["goodput"]
    assert report["goodput_missing"] is None and len(account["attempts"]) == 1
    assert any("attempt 1 left out (process_start" in note for note in account["notes"])
    assert all(math.isfinite(row["seconds"]) for row in account["rows"])
