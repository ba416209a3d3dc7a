"""Padded, real and loss tokens in the core: a window's three counts and its padding share from known
counts on a fake clock, MFU on the real tokens, the ``padding`` verdict (a 40%-padded run is one, a
packed run never), the line (unchanged without padding) read back by parse_log, and the JSON and CSV
files round trip."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest

from conftest import FakeClock
from trainperf import MemorySink, PerformanceListener, PerformanceRecord, format_line, parse_log
from trainperf.records import PADDING_SHARE, Verdict, judge_padding, padding_share, real_mfu
from trainperf.sinks import CsvSink, JsonLinesSink


def listener(clock, frequency=4, **kw) -> tuple[PerformanceListener, MemorySink]:
    memory = MemorySink()
    return PerformanceListener(frequency, sinks=[memory], clock=clock, sink_thread=False, report_hardware=False,
                               **kw), memory


def run(clock, counts, *, step_s=0.010, etl_s=0.0, frequency=4, **kw) -> list[PerformanceRecord]:
    """Iterations of ``(padded, real, loss)`` tokens, each a step of ``step_s`` after ``etl_s`` of data wait."""
    lst, memory = listener(clock, frequency, **kw)
    for padded, real, loss in counts:
        clock.advance(etl_s)
        lst.add_etl(etl_s)
        clock.advance(step_s)
        lst.count_tokens(padded, loss)
        lst.record_iteration(samples=4, tokens=real)
    lst.close()
    return memory.records


def test_a_window_carries_its_padded_real_and_loss_tokens_and_the_padding_share():
    counts = [(64, 40, 30), (64, 50, 41), (48, 30, 22), (80, 60, 47), (64, 64, 60), (64, 64, 60), (64, 64, 60),
              (64, 64, 60)]
    first, second = run(FakeClock(), counts)
    assert (first.tokens_padded, first.tokens, first.tokens_loss) == (256, 180, 140)
    assert first.padding_share == pytest.approx(1 - 180 / 256)
    assert (second.tokens_padded, second.tokens, second.tokens_loss) == (256, 256, 240)
    assert second.padding_share == 0.0  # packed: no padding


def test_a_window_where_one_iteration_gave_no_padded_count_has_none_and_no_share():
    clock = FakeClock()
    lst, memory = listener(clock)
    for k in range(4):
        clock.advance(0.010)
        lst.count_tokens(None if k == 1 else 64, 10)
        lst.record_iteration(tokens=32)
    (record,) = memory.records
    assert (record.tokens_padded, record.tokens, record.tokens_loss, record.padding_share) == (None, 128, 40, None)
    assert record.mfu_real is None


def test_mfu_real_is_mfu_times_real_over_padded_tokens():
    (record,) = run(FakeClock(), [(100, 60, 50)] * 4, flops_per_step=2e9, peak_flops=1e12)
    assert record.mfu == pytest.approx(2e9 / 0.010 / 1e12)
    assert record.mfu_real == pytest.approx(record.mfu * 0.6)


def test_without_padding_mfu_real_is_mfu():
    (record,) = run(FakeClock(), [(100, 100, 90)] * 4, flops_per_step=2e9, peak_flops=1e12)
    assert record.mfu_real == record.mfu and record.padding_share == 0.0


def test_a_40_percent_padded_run_is_padding_and_a_packed_one_is_fine():
    padded_run = run(FakeClock(), [(100, 60, 50)] * 12)
    assert [r.verdict.kind for r in padded_run] == ["padding"] * 3
    assert padded_run[0].verdict.share == pytest.approx(40.0)
    assert padded_run[0].verdict.reason == ("40% of step computing padding (40% of its tokens are pads): "
                                            "pack sequences or bucket them by length")
    packed_run = run(FakeClock(), [(100, 100, 90)] * 12)
    assert [r.verdict.kind for r in packed_run] == ["fine"] * 3


def test_the_share_is_of_the_window_so_time_outside_the_step_lowers_it():
    # 40% of the tokens are pads, but half of each iteration waits for data: 20% of the window on pads
    records = run(FakeClock(), [(100, 60, 50)] * 4, step_s=0.010, etl_s=0.010)
    assert records[0].verdict.kind == "input-bound"  # 50% waiting for data outweighs 20% on pads
    records = run(FakeClock(), [(100, 60, 50)] * 4, step_s=0.030, etl_s=0.010)
    assert records[0].verdict.kind == "padding" and records[0].verdict.share == pytest.approx(30.0)


def test_a_little_padding_or_a_step_too_short_to_matter_is_no_verdict():
    assert run(FakeClock(), [(100, 85, 80)] * 4)[0].verdict.kind == "fine"  # 15% < the 20% line
    assert run(FakeClock(), [(100, 60, 50)] * 4, step_s=0.0005)[0].verdict.kind == "fine"  # 0.2 ms a step


def test_judge_padding_keeps_a_larger_bad_verdict_and_cpu_contention_and_holds_its_line_with_hysteresis():
    fine = Verdict("fine", 5.0, "data wait 5%")
    assert judge_padding(fine, 0.4, 1.0, 1.0).kind == "padding"
    assert judge_padding(Verdict("input-bound", 50.0, "..."), 0.4, 0.5, 1.0).kind == "input-bound"
    assert judge_padding(Verdict("input-bound", 25.0, "..."), 0.5, 0.75, 1.0).kind == "padding"
    assert judge_padding(Verdict("cpu-contention", 95.0, "..."), 0.9, 1.0, 1.0).kind == "cpu-contention"
    assert judge_padding(None, 0.9, 1.0, 1.0) is None  # verdicts off
    below = PADDING_SHARE * 0.9 / 100.0
    assert judge_padding(fine, below, 1.0, 1.0).kind == "fine"
    assert judge_padding(fine, below, 1.0, 1.0, previous="padding").kind == "padding"
    assert padding_share(60, 100) == pytest.approx(0.4) and padding_share(None, 100) is None
    assert padding_share(10, 0) is None and padding_share(110, 100) == 0.0


def test_the_line_is_unchanged_without_padding_and_carries_the_counts_with_it():
    plain, = run(FakeClock(), [(64, 64, 60)] * 4, flops_per_step=2e9, peak_flops=1e12)
    line = format_line(plain)
    assert "padding" not in line and "real tokens" not in line and "MFU real" not in line
    before = dataclasses.replace(plain, tokens_padded=None, tokens_loss=None, padding_share=None, mfu_real=None)
    assert line == format_line(before)  # the line of a record without the new fields
    padded, = run(FakeClock(), [(100, 60, 50)] * 4, flops_per_step=2e9, peak_flops=1e12)
    line = format_line(padded)
    assert "real tokens: 240; padded tokens: 400; loss tokens: 200; padding: 0.400;" in line
    assert "MFU: 0.200; MFU real: 0.120;" in line
    parsed = parse_log(io.StringIO(line + "\n"))
    for name, value in (("tokens", 240), ("tokens_padded", 400), ("tokens_loss", 200), ("padding_share", 0.4),
                        ("mfu_real", 0.12), ("verdict", "padding"), ("verdict_pct", 40.0)):
        assert parsed.column(name) == [pytest.approx(value) if isinstance(value, float) else value], name


def test_the_json_and_csv_files_round_trip_the_three_counts(tmp_path):
    clock = FakeClock()
    jsonl, table = tmp_path / "run.jsonl", tmp_path / "run.csv"
    lst, memory = listener(clock)
    lst.add_sink(JsonLinesSink(jsonl))
    lst.add_sink(CsvSink(table))
    for padded, real, loss in [(100, 60, 50)] * 4 + [(64, 64, 60)] * 4:
        clock.advance(0.010)
        lst.count_tokens(padded, loss)
        lst.record_iteration(tokens=real)
    lst.close()
    wanted = [(r.tokens_padded, r.tokens, r.tokens_loss, r.padding_share) for r in memory.records]
    assert wanted == [(400, 240, 200, pytest.approx(0.4)), (256, 256, 240, 0.0)]
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(d["tokens_padded"], d["tokens"], d["tokens_loss"], d["padding_share"]) for d in rows] == wanted
    back = [PerformanceRecord.from_dict(d) for d in rows]
    assert [(r.tokens_padded, r.tokens_loss, r.mfu_real) for r in back] == [(400, 200, None), (256, 240, None)]
    with open(table, newline="") as f:
        cells = list(csv.DictReader(f))
    assert [(int(c["tokens_padded"]), int(c["tokens"]), int(c["tokens_loss"]), float(c["padding_share"]))
            for c in cells] == wanted
    parsed = parse_log(jsonl)  # parse_log reads the JSON lines file (and text lines), not CSV
    assert parsed.column("tokens_padded") == [400, 256] and parsed.column("tokens_loss") == [200, 240]
    assert parsed.column("padding_share") == [pytest.approx(0.4), 0.0]


def test_bad_padded_or_loss_counts_are_named():
    lst, _ = listener(FakeClock())
    with pytest.raises(ValueError, match="padded"):
        lst.count_tokens(-1, 3)
    with pytest.raises(TypeError, match="loss"):
        lst.count_tokens(4, 2.5)  # type: ignore[arg-type]


def test_a_padding_verdict_that_persists_is_one_of_the_runs_bottlenecks_with_its_fixes():
    clock = FakeClock()
    lst, _ = listener(clock)
    for _ in range(16):
        clock.advance(0.010)
        lst.count_tokens(100, 50)
        lst.record_iteration(samples=4, tokens=60)
    summary = lst.summary()
    (bottleneck,) = summary.bottlenecks
    assert bottleneck.kind == "padding" and bottleneck.windows == 3
    assert "padding: judged so in 3 of 3 windows" in str(summary)
    assert any("pack sequences" in fix for fix in summary.recommendations)
    assert any("group_by_length=True" in fix for fix in summary.recommendations)


def test_the_bulk_reader_reads_the_padding_fields_as_the_line_reader_does(tmp_path, monkeypatch):
    from trainperf.logs import _bulk, _parse

    records = run(FakeClock(), [(100, 60, 50)] * 8 + [(64, 64, 60)] * 8 + [(100, 60, 50)] * 8,
                  flops_per_step=2e9, peak_flops=1e12)
    path = tmp_path / "train.log"
    path.write_text("".join(format_line(r) + "\n" for r in records * 20))
    by_line = parse_log(path)
    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 0)
    monkeypatch.setattr(_bulk, "MIN_LINES", 2)
    in_bulk = parse_log(path)
    for name in ("tokens", "tokens_padded", "tokens_loss", "padding_share", "mfu_real", "verdict"):
        assert in_bulk.column(name) == by_line.column(name), name
    assert by_line.column("tokens_padded")[:6] == [400, 400, None, None, 400, 400]  # none in a packed window's line


def test_the_padding_lines_hold_at_their_exact_values():
    fine = Verdict("fine", 0.0, "")
    line = PADDING_SHARE / 100.0
    assert judge_padding(fine, line, 1.0, 1.0).kind == "padding"  # at the line
    assert judge_padding(fine, line - 1e-6, 1.0, 1.0).kind == "fine"
    held = line * 0.8  # hysteresis: a padding window holds down to 80% of the line
    assert judge_padding(fine, held, 1.0, 1.0, previous="padding").kind == "padding"
    assert judge_padding(fine, held - 1e-6, 1.0, 1.0, previous="padding").kind == "fine"
    # material: at least 0.5 ms of pads per iteration
    assert judge_padding(fine, 0.5, 0.001, 0.001).kind == "padding"  # 0.5 ms, one iteration
    assert judge_padding(fine, 0.5, 0.001 - 1e-7, 0.001).kind == "fine"
    assert judge_padding(fine, 0.5, 0.0039, 0.004, iterations=4).kind == "fine"  # 0.49 ms each
    assert judge_padding(fine, 0.5, 0.004, 0.004, iterations=4).kind == "padding"
    # a bad verdict of the same share keeps the window; the share is capped at the whole window
    assert judge_padding(Verdict("loop-bound", 40.0, "..."), 0.4, 1.0, 1.0).kind == "loop-bound"
    capped = judge_padding(fine, 1.0, 2.0, 1.0)
    assert capped.kind == "padding" and capped.share == 100.0
    said = judge_padding(fine, 0.31, 1.0, 1.0)
    assert said.share == 31.0 and said.reason.startswith("31% of step computing padding (31% of its tokens are pads)")


def test_nothing_to_judge_leaves_the_verdict_as_it_is():
    fine = Verdict("fine", 0.0, "")
    for share, window_s in [(None, 1.0), (0.0, 1.0), (-0.1, 1.0), (0.9, 0.0), (0.9, -1.0)]:
        assert judge_padding(fine, share, 1.0, window_s) is fine
    assert padding_share(10, 0) is None and padding_share(None, 10) is None and padding_share(10, None) is None
    assert padding_share(12, 10) == 0.0 and padding_share(6, 10) == pytest.approx(0.4)
    assert real_mfu(None, 0.4) is None and real_mfu(0.5, None) is None
    assert real_mfu(0.5, 0.4) == pytest.approx(0.3)


def test_the_padding_warning_reads_as_a_sentence():
    import warnings

    from trainperf.core import BottleneckWarning

    clock = FakeClock()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with PerformanceListener(2, clock=clock, sinks=[], sink_thread=False, report_hardware=False) as lst:
            for _ in range(8):
                clock.advance(0.010)
                lst.count_tokens(100, None)
                lst.record_iteration(samples=4, tokens=50)
    said = [str(w.message) for w in caught if issubclass(w.category, BottleneckWarning)]
    assert said and said[0].startswith("trainperf: training computes padding (50% of step computing padding"), said
