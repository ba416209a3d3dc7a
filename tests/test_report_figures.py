"""The report's figures say what they hold: each column of the ranks table is the JSON field of the
same name and meaning, a rate that was not measured is not shown as 0, a tiny measured rate keeps
its significant digits, an MFU above 100% is flagged wherever it is shown, and the slowest windows
are not the warm-up's start-up costs."""

from __future__ import annotations

import html
import re

import pytest

from _simulate import simulate
from conftest import FakeClock
from trainperf import PerformanceListener, build_report
from trainperf.ranks._report._html import render_html, world_words
from trainperf.ranks._report._notes import read_notes


def ranks_table(page: str) -> tuple[list[str], list[list[str]]]:
    """The headers and the rows of the page's table of ranks, as plain text."""
    table = next(t for t in re.findall(r"<table>.*?</table>", page, re.S) if "<th>host</th>" in t)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)

    def cells(row: str, tag: str) -> list[str]:
        return [html.unescape(re.sub(r"<[^>]+>", " ", c)).strip() for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>",
                                                                                        row, re.S)]

    return cells(rows[0], "th"), [cells(r, "td") for r in rows[1:]]


#: Each column of the ranks table that holds a mean time, and the JSON field it shows.
COLUMNS = {"data wait mean": ("etl_ms", "mean"), "forward mean": ("forward_ms",),
           "optimizer step mean": ("step_ms",), "collective wait mean": ("wait_ms",),
           "compute mean": ("compute_ms",), "host time mean": ("other_ms",)}


def test_each_column_of_the_ranks_table_is_the_json_field_it_is_named_after(tmp_path):
    simulate(tmp_path / "run", ranks=2, iterations=40, forward_ms=lambda r, i: 10.0 + 5.0 * r)
    report = build_report(tmp_path / "run")
    headers, rows = ranks_table(render_html(report))
    assert "step mean" not in headers  # the column that held compute_ms under that name
    for entry, row in zip(report["ranks"], rows, strict=True):
        cell = dict(zip(headers, row, strict=True))
        for label, path in COLUMNS.items():
            value = entry
            for key in path:
                value = value[key]
            assert cell[label] == f"{value:.1f}", (label, cell, entry)
    # the optimizer step and the whole step differ: the table no longer shows one under the other's name
    assert report["ranks"][0]["step_ms"] != report["ranks"][0]["compute_ms"]


def test_the_pages_own_words_call_compute_ms_compute(tmp_path):
    simulate(tmp_path / "run", ranks=2, iterations=40)
    page = render_html(build_report(tmp_path / "run"))
    assert "\\nstep \" + c[4]" not in page and "\\ncompute \" + c[4]" in page  # the whole-run timeline's tooltip
    assert "data wait, compute (the whole step) and other host time" in page


def write_rank(run_dir, rank: int, step_s: float, flops_per_step: float | None, peak: float | None) -> None:
    clock = FakeClock()
    listener = PerformanceListener(4, sinks=[], clock=clock, wall_clock=lambda: 1.7e9 + clock.now, rank=rank,
                                   run_dir=run_dir, report_hardware=False, flops_per_step=flops_per_step,
                                   peak_flops=peak)
    for _ in range(16):
        clock.advance(step_s)
        listener.record_iteration(samples=8)
    listener.close()


def test_a_tiny_measured_rate_keeps_its_significant_digits(tmp_path):
    """A small model on a CPU: 1e6 FLOPs per 10 ms step is 0.0001 TFLOP/s, not 0."""
    for rank in (0, 1):
        write_rank(tmp_path, rank, 0.010, 1e6, 1e12)
    report = build_report(tmp_path)
    assert [e["tflops_per_sec"] for e in report["ranks"]] == [pytest.approx(1e-4, rel=1e-3)] * 2
    assert [e["mfu"] for e in report["ranks"]] == [pytest.approx(1e-4, rel=1e-3)] * 2
    world = report["world"]
    assert world["tflops_per_sec"] == pytest.approx(2e-4, rel=1e-3) and world["mfu"] == pytest.approx(1e-4, rel=1e-3)
    words = world_words(world)
    assert "0.0002 TFLOP/s" in words and "MFU 0.01%" in words and " 0 TFLOP/s" not in words
    headers, rows = ranks_table(render_html(report))
    assert [dict(zip(headers, row, strict=True))["TFLOP/s"] for row in rows] == ["0.0001"] * 2


def test_a_rate_not_measured_is_not_shown_as_zero(tmp_path):
    for rank in (0, 1):
        write_rank(tmp_path, rank, 0.010, None, None)
    report = build_report(tmp_path)
    assert report["world"]["tflops_per_sec"] is None and report["world"]["mfu"] is None
    page = render_html(report)
    assert "TFLOP/s," not in world_words(report["world"]) and "MFU" not in world_words(report["world"])
    headers, rows = ranks_table(page)
    for row in rows:
        cell = dict(zip(headers, row, strict=True))
        assert cell["TFLOP/s"] == cell["MFU"] == "not measured"
    assert "not measured: no FLOP count per step" in page


def test_an_mfu_above_100_percent_is_flagged_wherever_it_is_shown(tmp_path, capsys):
    from trainperf.cli import main

    write_rank(tmp_path / "run", 0, 0.010, 1e9, 1e11 / 1.105)  # 1e11 FLOP/s against a peak 1.105 times lower
    write_rank(tmp_path / "run", 1, 0.010, 1e9, 1e12)
    report = build_report(tmp_path / "run")
    assert report["ranks"][0]["mfu"] == pytest.approx(1.105, rel=1e-3)
    why = "above 100%: the peak FLOP/s is likely wrong (too low for the device) or the FLOP count per step too high"
    assert f"rank 0: MFU 110.5% is {why}" in read_notes(report)
    assert f"rank 0: MFU 110.5% is {why}" in report["notes"]  # the JSON says it too
    assert not any(n.startswith("rank 1: MFU") for n in read_notes(report))
    headers, rows = ranks_table(render_html(report))
    assert dict(zip(headers, rows[0], strict=True))["MFU"] == "110.5% (above 100%)"
    assert dict(zip(headers, rows[1], strict=True))["MFU"] == "10.0%"
    assert main(["report", str(tmp_path / "run"), "-o", str(tmp_path / "r.html")]) == 0
    assert f"note: rank 0: MFU 110.5% is {why}" in capsys.readouterr().err
    over = world_words({"samples_per_sec": None, "tokens_per_sec": None, "tflops_per_sec": 2.2, "mfu": 1.1,
                        "mfu_ranks": 2})
    assert over == f"World: 2.2 TFLOP/s, MFU 110.0% (over 2 ranks with a peak; {why})"


def test_the_slowest_windows_rank_the_warm_up_window_after_the_others_and_mark_it(tmp_path):
    """The warm-up window (the run's first, as the listener marks it) holds start-up costs: it is the
    slowest, yet the others are listed first."""
    simulate(tmp_path / "run", ranks=2, iterations=60, etl_ms=lambda r, i: 80.0 if i <= 10 else 2.0 + (i == 35))
    report = build_report(tmp_path / "run")
    slowest = report["slowest"]
    assert slowest and slowest[0]["iteration_first"] != 1 and not slowest[0]["warmup"]
    warm = [w for w in slowest if w["warmup"]]
    assert [(w["iteration_first"], w["iteration_last"]) for w in warm] in ([], [(1, 10)])
    assert all(not w["warmup"] for w in slowest[: len(slowest) - len(warm)])
    ms = [w["iteration_ms"] for w in slowest if not w["warmup"]]
    assert ms == sorted(ms, reverse=True)


def test_the_warm_up_window_is_the_only_one_with_spans_it_is_listed_marked(tmp_path):
    simulate(tmp_path / "run", ranks=2, iterations=60)
    for rank in (0, 1):  # spans of the first window only
        path = tmp_path / "run" / f"rank-{rank}" / "timeline.jsonl"
        path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if '"i":1,' in line or
                                re.search(r'"i":([1-9]|10),', line)))
    report = build_report(tmp_path / "run")
    assert [(w["iteration_first"], w["warmup"]) for w in report["slowest"]] == [(1, True)]
