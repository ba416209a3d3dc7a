"""The distributed report's world figures: every rank's tokens/sec and TFLOP/s added up, and the
world's MFU as all ranks' FLOP/s over all their peaks, from run directories two listeners wrote."""

from __future__ import annotations

import pytest

from conftest import FakeClock
from trainperf import PerformanceListener, build_report


def write_rank(run_dir, rank: int, step_s: float, tokens: int, peak: float | None) -> None:
    clock = FakeClock()
    wall = [1.7e9]

    def wall_clock() -> float:
        return wall[0] + clock.now

    listener = PerformanceListener(4, sinks=[], clock=clock, wall_clock=wall_clock, rank=rank, run_dir=run_dir,
                                   report_hardware=False, flops_per_step=1e9, peak_flops=peak)
    for _ in range(16):
        clock.advance(step_s)
        listener.record_iteration(samples=8, tokens=tokens)
    listener.close()


def test_world_throughput_adds_the_ranks_and_mfu_weighs_each_by_its_peak(tmp_path):
    write_rank(tmp_path, 0, 0.010, 100, 1e12)  # 10,000 tokens/s, 0.1 TFLOP/s, MFU 0.1
    write_rank(tmp_path, 1, 0.020, 100, 4e12)  # 5,000 tokens/s, 0.05 TFLOP/s, MFU 0.0125
    report = build_report(tmp_path)
    by_rank = {e["rank"]: e for e in report["ranks"]}
    assert by_rank[0]["tokens_per_sec"] == pytest.approx(10_000.0)
    assert by_rank[1]["mfu"] == pytest.approx(0.0125)
    world = report["world"]
    assert world["tokens_per_sec"] == pytest.approx(15_000.0)
    assert world["samples_per_sec"] == pytest.approx(1_200.0)
    assert world["tflops_per_sec"] == pytest.approx(0.15)
    assert world["mfu"] == pytest.approx(0.15 / 5.0, abs=1e-4)  # not the mean of 0.1 and 0.0125
    assert world["mfu_ranks"] == 2


def test_without_tokens_or_peaks_the_world_says_none(tmp_path):
    for rank in (0, 1):
        clock = FakeClock()
        listener = PerformanceListener(4, sinks=[], clock=clock, rank=rank, run_dir=tmp_path, report_hardware=False)
        for _ in range(8):
            clock.advance(0.01)
            listener.record_iteration(samples=2)
        listener.close()
    world = build_report(tmp_path)["world"]
    assert (world["tokens_per_sec"], world["tflops_per_sec"], world["mfu"], world["mfu_ranks"]) == (None, None, None, 0)
    assert world["samples_per_sec"] == pytest.approx(400.0)


def test_the_page_states_the_world_line(tmp_path):
    from trainperf.ranks._report._html import render_html, world_words

    write_rank(tmp_path, 0, 0.010, 100, 1e12)
    write_rank(tmp_path, 1, 0.020, 100, 4e12)
    report = build_report(tmp_path)
    words = world_words(report["world"])
    assert words == "World: 1,200.0 samples/s, 15,000.0 tokens/s, 0.15 TFLOP/s, MFU 3.0% (over 2 ranks with a peak)"
    assert words in render_html(report)
    assert world_words({"samples_per_sec": None, "tokens_per_sec": None, "tflops_per_sec": None, "mfu": None,
                        "mfu_ranks": 0}) is None
