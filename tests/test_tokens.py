"""Tokens in the core: a window's real tokens and tokens/sec from known counts on a fake clock, the
run's tokens/sec in the summary, the line read back, and bad counts named."""

from __future__ import annotations

import io

import pytest

from conftest import FakeClock
from fake_device import FakeDevice, FakeTimeline
from trainperf import MemorySink, PerformanceListener, format_line, parse_log


def listener(clock, frequency=4, **kw) -> tuple[PerformanceListener, MemorySink]:
    memory = MemorySink()
    return PerformanceListener(frequency, sinks=[memory], clock=clock, sink_thread=False, report_hardware=False,
                               **kw), memory


def test_a_windows_tokens_are_its_iterations_tokens_and_tokens_per_sec_is_them_over_its_time():
    clock = FakeClock()
    lst, memory = listener(clock)
    counts = [100, 250, 80, 300, 120, 120, 120, 120]
    for n in counts:
        clock.advance(0.020)
        lst.record_iteration(samples=4, tokens=n)
    first, second = memory.records
    assert (first.tokens, second.tokens) == (730, 480)
    assert first.tokens_per_sec == pytest.approx(730 / 0.080) and second.tokens_per_sec == pytest.approx(480 / 0.080)
    assert first.tokens_per_sec == pytest.approx(first.tokens / first.window_s)


def test_a_window_where_some_iteration_did_not_count_its_tokens_has_none_and_the_next_is_whole_again():
    clock = FakeClock()
    lst, memory = listener(clock)
    for k in range(8):
        clock.advance(0.010)
        lst.record_iteration(tokens=None if k == 2 else 50)
    first, second = memory.records
    assert (first.tokens, first.tokens_per_sec) == (None, None)
    assert second.tokens == 200 and second.tokens_per_sec == pytest.approx(200 / 0.040)


def test_without_tokens_the_fields_are_none_and_the_line_says_nothing_of_them():
    clock = FakeClock()
    lst, memory = listener(clock)
    for _ in range(4):
        clock.advance(0.010)
        lst.record_iteration(samples=2)
    (record,) = memory.records
    assert (record.tokens, record.tokens_per_sec) == (None, None)
    assert "tokens" not in format_line(record)


def test_the_line_carries_tokens_per_sec_and_reads_back():
    clock = FakeClock()
    lst, memory = listener(clock)
    for _ in range(4):
        clock.advance(0.025)
        lst.record_iteration(samples=2, tokens=512)
    line = format_line(memory.records[0])
    assert "tokens/sec: 20480.0;" in line
    assert parse_log(io.StringIO(line + "\n")).column("tokens_per_sec") == [20480.0]


def test_the_summary_gives_the_runs_tokens_per_sec_over_the_windows_that_counted_them_warm_up_left_out():
    clock = FakeClock()
    lst, _ = listener(clock)
    for k in range(12):
        clock.advance(0.050 if k < 4 else 0.010)  # a slow warm-up window
        lst.record_iteration(tokens=None if 8 <= k else 100)  # the third window counts none
    summary = lst.summary()
    assert summary.tokens == 400 and summary.tokens_wall_s == pytest.approx(0.040)
    assert summary.tokens_per_sec == pytest.approx(10_000.0)
    assert "10000.0 tokens/sec" in str(summary)
    assert summary.to_dict()["tokens_per_sec"] == pytest.approx(10_000.0)


def test_on_a_device_the_window_that_waited_for_it_keeps_its_tokens():
    clock = FakeClock()
    device = FakeDevice(clock)
    timeline = FakeTimeline(device)
    lst, memory = listener(clock, frequency=2)
    lst.set_timeline(timeline)
    for k in range(6):
        timeline.begin()
        device.launch(0.010)
        clock.advance(0.002)
        lst.record_iteration(tokens=10 * (k + 1))
    lst.flush()
    assert [r.tokens for r in memory.records] == [30, 70, 110]


def test_bad_token_counts_are_named():
    lst, _ = listener(FakeClock())
    with pytest.raises(TypeError, match="tokens must be a non-negative int or None, got 'many'"):
        lst.record_iteration(tokens="many")  # the first call checks types
    lst.record_iteration(tokens=3)
    with pytest.raises(ValueError, match="tokens must not be negative, got -1"):
        lst.record_iteration(tokens=-1)
    assert lst.iteration == 1  # nothing recorded by the refused calls
    with pytest.raises(TypeError, match="tokens must be callable, got 3"):
        PerformanceListener(tokens=3)  # type: ignore[arg-type]


def test_the_summary_gives_the_runs_tflops_and_mfu_over_the_windows_that_knew_them():
    clock = FakeClock()
    lst, _ = listener(clock, flops_per_step=2e9, peak_flops=1e12)
    for k in range(12):
        clock.advance(0.050 if k < 4 else 0.010)  # a slow warm-up window, left out
        lst.record_iteration(steps=2 if k >= 8 else 1)  # the third window takes two optimizer steps each
    summary = lst.summary()
    flops = 2e9 * (4 + 8)
    assert summary.flops == pytest.approx(flops) and summary.flops_wall_s == pytest.approx(0.080)
    assert summary.tflops_per_sec == pytest.approx(flops / 0.080 / 1e12)
    assert summary.mfu == pytest.approx(flops / 0.080 / 1e12)
    assert f"MFU {100 * summary.mfu:.1f}%" in str(summary)
    assert summary.to_dict()["mfu"] == pytest.approx(summary.mfu)
