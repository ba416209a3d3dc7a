"""Text that once made ``parse_log`` raise, read values into the wrong field, or take for a record
what is not one; each is read on both paths (line by line, and in bulk), which must agree."""

from __future__ import annotations

import io
import json
import time
import tracemalloc

import pytest

from _parse_paths import read_both
from trainperf import GCStat, PerformanceRecord, Verdict, format_line, parse_log
from trainperf.logs._lines import MAX_COLLECTORS, to_float

pytest.importorskip("pandas")

LINE = "ETL: 2.00 ms; iteration {i}; iteration time: 30.00 ms; samples/sec: 100.0; batches/sec: 33.3; score: 0.5;"


def record(iteration: int = 10, **changes: object) -> PerformanceRecord:
    base = PerformanceRecord(
        iteration=iteration, window_iterations=10, window_s=0.3, warmup=False, timestamp=1.0, etl_ms=2.0,
        iteration_ms=30.0, samples_per_sec=100.0, batches_per_sec=33.3, score=0.5,
        gc=(GCStat("gen0", 1, 0.5),), verdict=Verdict("fine", 3.0, "data wait 3%, GC 0% of step"),
    )
    return PerformanceRecord(**{**base.to_dict(), "gc": base.gc, "verdict": base.verdict, **changes})


def test_thousands_of_collectors_on_one_line_cost_neither_time_nor_memory():
    many = ", ".join(f"[c{i}: 1 (2ms)]" for i in range(10_000))
    text = f"ETL: 1 ms; iteration 5; iteration time: 3 ms; GC: {many};\n" + LINE.format(i=6) + "\n"
    tracemalloc.start()
    started = time.perf_counter()
    log = read_both(text)
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert log.column("iteration") == [6.0] and log.skipped == 1  # a line no runtime writes is not a record
    assert elapsed < 10 and peak < 100 << 20, (elapsed, peak)


def test_as_many_collectors_as_allowed_are_all_read():
    stats = ", ".join(f"[c{i}: {i} ({i}.5ms)]" for i in range(MAX_COLLECTORS))
    log = read_both(f"ETL: 1 ms; iteration 5; GC: {stats};\n")
    assert log.column(f"gc.c{MAX_COLLECTORS - 1}.count") == [MAX_COLLECTORS - 1.0]
    assert log.column(f"gc.c{MAX_COLLECTORS - 1}.ms") == [MAX_COLLECTORS - 0.5]
    as_json = json.dumps({"iteration": 1, "gc": {f"c{i}": {"count": 1, "ms": 0.5} for i in range(MAX_COLLECTORS + 1)}})
    assert read_both(as_json + "\n").rows == 0


def test_separator_and_line_break_characters_in_a_json_string_do_not_shift_columns():
    lines = []
    for i, odd in enumerate(["\x1f", "\r", "\n", "\u2028", "\x00"]):
        lines.append(json.dumps({"iteration": i + 1, "host": f"a{odd}b", "etl_ms": 1.5 + i, "verdict": {"kind": "fine"},
                                 "iteration_ms": 10.0 + i}))
    log = read_both("\n".join(lines) + "\n")
    frame = log.to_pandas()
    assert frame["etl_ms"].tolist() == [1.5, 2.5, 3.5, 4.5, 5.5] == log.column("etl_ms")
    assert frame["iteration_ms"].tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]
    assert frame["verdict"].tolist() == ["fine"] * 5


def test_a_unit_separator_inside_a_field_of_a_large_log_neither_raises_nor_shifts_values():
    odd = "ETL: 3\x1f ms; iteration 7; iteration time: 9 ms;"
    text = "\n".join([LINE.format(i=i) for i in range(1, 4)] + [odd, LINE.format(i=8)]) + "\n"
    log = read_both(text)
    assert log.column("iteration") == [1.0, 2.0, 3.0, 7.0, 8.0]
    assert log.column("etl_ms") == [2.0, 2.0, 2.0, None, 2.0]
    assert log.column("iteration_ms") == [30.0, 30.0, 30.0, 9.0, 30.0]


def test_json_lines_that_hold_no_record_give_an_empty_frame_not_an_error():
    log = read_both('{"epoch": 3}\n{"iteration": "soon"}\n{not json\n')
    assert log.rows == 0 and log.skipped == 3
    assert log.to_pandas().columns.tolist() == ["iteration", "run"]


def test_booleans_are_no_figures_in_any_view():
    log = read_both(json.dumps({"iteration": 1, "etl_ms": True, "score": False, "warmup": True}) + "\n")
    assert log.column("warmup") == [True]
    assert "etl_ms" not in log.columns and "score" not in log.columns


@pytest.mark.parametrize("text", ["1_0", "\x1f1", " 1", "0x10", "1e", "--1", "nan(1)", "١"])
def test_only_plain_numbers_are_numbers(text):
    assert to_float(text) is None
    log = read_both(f"ETL: {text} ms; iteration 4; iteration time: 9 ms;\n")
    assert log.column("iteration") == [4.0] and log.column("iteration_ms") == [9.0]
    assert "etl_ms" not in log.columns or log.column("etl_ms") == [None]


def test_digits_moved_into_a_label_are_not_read_as_the_labels_figure():
    lines = [LINE.format(i=i) for i in range(1, 5)]
    lines.insert(2, LINE.format(i=77).replace("iteration 77;", "iteration77 421;"))
    log = read_both("\n".join(lines) + "\n")
    assert log.column("iteration") == [1.0, 2.0, 3.0, 4.0] and log.skipped == 1


@pytest.mark.parametrize("number", ["01", "1.", ".5", "1.2.3", "-.5"])
def test_numbers_json_does_not_allow_make_the_line_no_record(number):
    good = [json.dumps({"iteration": i, "etl_ms": 1.5}) for i in range(1, 4)]
    bad = '{"iteration": 9, "etl_ms": ' + number + "}"
    log = read_both("\n".join([*good, bad, good[0]]) + "\n")
    assert log.column("iteration") == [1.0, 2.0, 3.0, 1.0] and log.skipped == 1


def test_another_loggers_line_with_an_iteration_is_not_a_record():
    lines = ["epoch done; iteration 500; loss 0.2", "epoch done; iteration 501; loss 0.2;", "step; iteration 502;x",
             LINE.format(i=3)]
    log = read_both("\n".join(lines) + "\n")
    assert log.column("iteration") == [3.0] and log.skipped == 3


def test_a_line_without_etl_is_read_among_lines_that_fool_a_count_of_etl_fields():
    lines = [LINE.format(i=1), "took 5 ms; iteration 2 began", "iteration 3; iteration time: 9 ms;", LINE.format(i=4)]
    log = read_both("\n".join(lines) + "\n")
    assert log.column("iteration") == [1.0, 3.0, 4.0]
    assert log.column("etl_ms") == [2.0, None, 2.0]


@pytest.mark.parametrize(
    "prefix", ["ETL: 5 ms; iteration 999; ", "iteration 999; ", "{", "[x] ETL: 5 ms; iteration 999; a: b; "]
)
def test_hand_picked_prefixes_that_look_like_fields_cannot_change_the_records_fields(prefix):
    lines = [f"2026-11-22 INFO {prefix}" + format_line(record(i)) for i in (10, 20)]
    lines.append(f"INFO {prefix}" + format_line(record(30, etl_ms=None)))
    log = read_both("\n".join(lines) + "\n")
    assert log.column("iteration") == [10.0, 20.0, 30.0]
    assert log.column("etl_ms") == [2.0, 2.0, None]


def test_a_nan_reads_as_missing_in_every_view():
    nan_json = json.dumps({"iteration": 6, "score": "NaN"})
    log = read_both(format_line(record(5, score=float("nan"))) + "\n" + nan_json + "\n")
    assert log.column("score") == [None, None]
    assert log.to_pandas()["score"].isna().all()


def test_a_collector_name_that_would_break_a_line_reads_back_as_one_record():
    names = ["a\nb", "x]; iteration 99;", "c: 1 (2ms)], [d"]
    lines = [format_line(record(i, gc=(GCStat(name, 1, 0.5),))) for i, name in enumerate(names, 1)]
    log = read_both("\n".join(lines) + "\n")
    assert log.column("iteration") == [1.0, 2.0, 3.0] and log.skipped == 0


def test_a_huge_integer_is_no_figure_and_never_overflows():
    log = read_both('{"iteration": 5, "etl_ms": ' + "9" * 400 + "}\n" + "ETL: " + "9" * 400 + " ms; iteration 6;\n")
    assert log.column("iteration") == [5.0, 6.0]
    assert log.column("etl_ms") == [None, None]  # more digits than a float holds: no figure, not infinity



def full_record(iteration: int, **changes: object) -> PerformanceRecord:
    """A record with every field a line can hold, a reason with ``;`` and brackets, and a capture after it."""
    reason = "75% of step waiting for data (workers at 180%; the step got 95% of a core): add workers"
    return record(
        iteration, gc=(GCStat("gen0", 2, 1.5), GCStat("cuda_alloc_retries", 1, None)), tokens_per_sec=900.0,
        tflops_per_sec=1.25, mfu=0.4, iteration_p50_ms=29.0, iteration_p95_ms=41.0, iteration_max_ms=50.0,
        etl_max_ms=3.0, other_ms=1.0, device_idle_ms=2.5, speedup_if_data_free=1.07, skipped_steps=1, epoch=3,
        rank=0, warmup=True, verdict=Verdict("input-bound", 75.0, reason), capture="/tmp/trace-10.json",
        **changes,
    )


def glued(etl: bool, prefix: str, every: int = 1) -> tuple[str, int]:
    """A log of lines cut after every ``every``-th character (past where a cut line is known as one),
    each glued to the restarted run's first line and followed by its second; and how many were cut."""
    changes = {} if etl else {"etl_ms": None}
    dead, restarted = format_line(full_record(500, **changes)), format_line(full_record(10, **changes))
    after = format_line(full_record(20, **changes))
    start = len("ETL: ") if etl else dead.index("iteration 500;")
    cuts = range(start, len(dead), every)  # a line with all its characters is not cut
    lines = [line for cut in cuts for line in (prefix + dead[:cut] + prefix + restarted, prefix + after)]
    return "\n".join(lines) + "\n", len(cuts)


def assert_restarted_runs_records(log, cuts: int, etl: bool) -> None:
    assert log.column("iteration") == [10.0, 20.0] * cuts
    # a cut line is known by its ``ETL:``; without one, it cannot be told from the line glued to it
    assert log.truncated == (cuts if etl else 0) and log.skipped == 0
    for name in ("etl_max_ms", "iteration_p95_ms", "mfu", "verdict_pct", "gc.gen0.ms", "gc.cuda_alloc_retries.count"):
        assert log.column(name) == log.column(name)[:1] * 2 * cuts, name  # the restarted run's, not the dead one's
    assert set(log.column("verdict")) == {"input-bound"} and set(log.column("verdict_pct")) == {75.0}


@pytest.mark.parametrize("etl", [True, False], ids=["with ETL", "without ETL"])
@pytest.mark.parametrize("prefix", ["", "2026-11-22 12:00:01 INFO trainperf - "], ids=["bare", "logger prefix"])
def test_a_line_cut_anywhere_and_glued_to_a_restarted_runs_line_keeps_the_restarted_runs_record(etl, prefix):
    """A crash cut a line; the restarted run's first line was appended to it with no newline between:
    wherever the cut fell, the restarted run's record is read and the dead run's is not."""
    text, cuts = glued(etl, prefix)
    assert_restarted_runs_records(parse_log(io.StringIO(text)), cuts, etl)


@pytest.mark.parametrize("etl", [True, False], ids=["with ETL", "without ETL"])
def test_lines_cut_and_glued_to_a_restarted_runs_line_read_alike_on_both_paths(etl):
    text, cuts = glued(etl, "2026-11-22 12:00:01 INFO trainperf - ", every=37)
    assert_restarted_runs_records(read_both(text), cuts, etl)
