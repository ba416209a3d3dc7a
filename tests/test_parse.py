from __future__ import annotations

import io
import math

import pytest

import trainperf
from trainperf import GCStat, PerformanceListener, PerformanceRecord, Verdict, format_line
from trainperf.sinks import JsonLinesSink

# The lines of Deeplearning4j's performance guide, with the prefixes its loggers put before them.
GUIDE_LINES = [
    ".d.o.l.PerformanceListener - ETL: 0 ms; iteration 16; iteration time: 65 ms; samples/sec: 492.308; "
    "batches/sec: 15.384; ",
    "o.d.o.l.PerformanceListener - ETL: 0 ms; iteration 30; iteration time: 17 ms; samples/sec: 588.235; "
    "batches/sec: 58.824; score: 0.7229335801186025; GC: [PS Scavenge: 2 (1ms)], [PS MarkSweep: 2 (24ms)];",
]


def test_reads_the_guide_lines_exactly():
    log = trainperf.parse_log(GUIDE_LINES)
    assert len(log) == 2 and log.skipped == 0
    rows = list(log)
    assert rows[0]["iteration"] == 16 and rows[0]["etl_ms"] == 0 and rows[0]["iteration_ms"] == 65
    assert rows[0]["samples_per_sec"] == 492.308 and rows[0]["batches_per_sec"] == 15.384
    assert rows[1]["score"] == 0.7229335801186025
    assert rows[1]["gc.PS Scavenge.count"] == 2 and rows[1]["gc.PS Scavenge.ms"] == 1
    assert rows[1]["gc.PS MarkSweep.count"] == 2 and rows[1]["gc.PS MarkSweep.ms"] == 24
    assert rows[0]["gc.PS Scavenge.count"] is None


def test_reads_prefixes_device_nan_infinity_and_g1_names():
    lines = [
        "2019-03-01 10:00:00,123 INFO  [main] o.d.o.l.PerformanceListener - Device: [3]; ETL: 12 ms; iteration 40; "
        "iteration time: 30 ms; samples/sec: Infinity; batches/sec: 33.3; score: NaN; "
        "GC: [G1 Young Generation: 1 (3ms)], [G1 Old Generation: 0 (0ms)];",
    ]
    (row,) = list(trainperf.parse_log(lines))
    assert row["device"] == 3 and row["etl_ms"] == 12
    # NaN reads as missing in every view: a DataFrame cannot tell the two apart
    assert row["samples_per_sec"] == math.inf and row["score"] is None
    assert row["gc.G1 Young Generation.ms"] == 3 and row["gc.G1 Old Generation.count"] == 0


def full_record(i: int) -> PerformanceRecord:
    return PerformanceRecord(
        iteration=10 * i, window_iterations=10, window_s=0.25, warmup=i == 1, timestamp=0.0,
        etl_ms=0.0412, etl_max_ms=0.09, iteration_ms=24.9, iteration_p50_ms=24.0, iteration_p95_ms=29.5,
        iteration_max_ms=31.0, samples_per_sec=1285.1, batches_per_sec=40.2, score=0.72,
        gc=(GCStat("gen0", 3, 0.41), GCStat("gen1", 0, 0.0), GCStat("gen2", 1, 12.5)), epoch=2, rank=1,
        verdict=Verdict("input-bound", 63.0, "63% of step waiting for data"),
    )


def test_round_trips_our_own_lines_through_logging_prefixes():
    lines = [f"2026-11-22 02:22:02,771 INFO trainperf - {format_line(full_record(i))}" for i in (1, 2)]
    frame = trainperf.parse_log(lines).to_pandas()
    assert list(frame["iteration"]) == [10, 20]
    assert list(frame["warmup"]) == [True, False]
    row = frame.iloc[1]
    assert row["etl_ms"] == 0.04 and row["iteration_p95_ms"] == 29.5 and row["etl_max_ms"] == 0.09  # 2 decimals
    assert row["epoch"] == 2 and row["rank"] == 1
    assert row["verdict"] == "input-bound" and row["verdict_pct"] == 63
    assert row["gc.gen2.count"] == 1 and row["gc.gen2.ms"] == 12.5


def test_columns_follow_the_documented_names():
    frame = trainperf.parse_log(GUIDE_LINES).to_pandas()
    assert list(frame.columns)[:7] == ["iteration", "etl_ms", "iteration_ms", "samples_per_sec", "batches_per_sec",
                                       "score", "gc.PS Scavenge.count"][:5] + list(frame.columns)[5:7]
    for name in ["iteration", "etl_ms", "iteration_ms", "samples_per_sec", "batches_per_sec", "score"]:
        assert name in frame.columns


def test_lines_without_etl_are_read_too():
    rec = PerformanceRecord(iteration=5, window_iterations=5, window_s=0.1, warmup=False, timestamp=0.0,
                            iteration_ms=20.0)
    log = trainperf.parse_log(["INFO trainperf - " + format_line(rec), GUIDE_LINES[1]])
    assert [r["iteration"] for r in log] == [5, 30]
    assert [r["etl_ms"] for r in log] == [None, 0.0]


def test_skips_and_counts_other_lines_and_a_truncated_last_line(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(
        "starting\n" + GUIDE_LINES[1] + "\n\n" + "\x00\xff binary junk" + "\n" + GUIDE_LINES[1][:60]
    )
    log = trainperf.parse_log(path)
    assert len(log) == 1
    assert log.skipped == 3
    assert log.truncated == 1


def test_hostile_input_never_crashes():
    long_line = "x" * 2_000_000 + "iteration 5;" + "y" * 1000
    junk = [long_line, "ETL: ; iteration ;", "ETL: abc ms; iteration 7; samples/sec: 1.2.3;", "iteration 99999999999;"]
    log = trainperf.parse_log(junk)
    frame = log.to_pandas()
    assert len(frame) == len(log)
    row = frame[frame["iteration"] == 7].iloc[0]
    assert math.isnan(row["etl_ms"]) and math.isnan(row["samples_per_sec"])


def test_binary_file_object_and_text_file_object():
    data = ("\n".join(GUIDE_LINES) + "\n").encode()
    assert len(trainperf.parse_log(io.BytesIO(data))) == 2
    assert len(trainperf.parse_log(io.StringIO(data.decode()))) == 2


def test_unreadable_path_names_it(tmp_path):
    missing = tmp_path / "nope.log"
    with pytest.raises(OSError, match="nope.log"):
        trainperf.parse_log(missing)




def test_reads_json_lines_including_a_crash_cut_last_line(tmp_path, clock):
    path = tmp_path / "run.jsonl"
    sink = JsonLinesSink(path)
    listener = PerformanceListener(1, sinks=[sink], clock=clock, report_gc=True, report_score=True)
    for _ in range(3):
        clock.advance(0.01)
        listener.record_iteration(samples=8, score=float("nan"))
    listener.close()
    with open(path, "a") as f:
        f.write('{"iteration": 4, "etl_ms": 1.0, "samp')  # the writer died mid-line
    log = trainperf.parse_log(path)
    assert [r["iteration"] for r in log] == [1, 2, 3]
    assert log.truncated == 1
    frame = log.to_pandas()
    assert frame["samples_per_sec"].tolist() == pytest.approx([800.0] * 3)
    assert frame["score"].isna().all()
    assert "gc.gen0.count" in frame.columns and frame["warmup"].tolist() == [True, False, False]


def test_empty_log():
    log = trainperf.parse_log([])
    assert len(log) == 0 and len(log.to_pandas()) == 0


def test_history_lines_match_parsed_values(clock):
    listener = PerformanceListener(2, sinks=[], clock=clock, report_gc=True)
    sink = listener.history  # filled on the training thread, at each report
    for _ in range(6):
        clock.advance(0.003)
        listener.record_iteration(samples=16, etl=0.0005)
    frame = trainperf.parse_log([format_line(r) for r in sink]).to_pandas()
    for rec, (_, row) in zip(sink, frame.iterrows(), strict=True):
        assert row["iteration"] == rec.iteration
        assert row["iteration_ms"] == pytest.approx(rec.iteration_ms, rel=1e-2)
        assert row["etl_ms"] == pytest.approx(rec.etl_ms, rel=1e-2)


def test_json_lines_and_text_lines_come_out_in_the_order_of_the_log():
    lines = ['{"iteration": 1, "etl_ms": 2.0}', "ETL: 3 ms; iteration 2;", '{"iteration": 3, "etl_ms": 4.0}']
    log = trainperf.parse_log(lines)
    assert [r["iteration"] for r in log] == [1, 2, 3] and [r["etl_ms"] for r in log] == [2.0, 3.0, 4.0]


def test_a_line_cut_in_the_middle_is_skipped_and_counted_not_read(tmp_path):
    """A crash cut a line mid-field, the run restarted and wrote more: the cut line is no record."""
    whole = "INFO trainperf - ETL: 2 ms; iteration {}; iteration time: 4 ms; samples/sec: 100; batches/sec: 5;"
    dl4j = "o.d.o.l.PerformanceListener - ETL: 0 ms; iteration 16; iteration time: 65 ms; samples/sec: 492.308;"
    text = "\n".join([whole.format(10), whole.format(20)[:55], dl4j[:70], whole.format(10), dl4j, ""])
    log = trainperf.parse_log(io.StringIO(text))
    assert log.column("iteration") == [10.0, 10.0, 16.0]
    assert log.truncated == 2
    assert log.column("iteration_ms") == [4.0, 4.0, 65.0]


def test_a_whole_line_without_some_fields_is_still_a_record():
    text = "ETL: 2 ms; iteration 10; score: 0.5;\niteration 11; iteration time: 3 ms;\n"
    log = trainperf.parse_log(io.StringIO(text))
    assert log.column("iteration") == [10.0, 11.0] and log.truncated == 0


# --- which reader, the parsed log's defaults, and the frame path's conversions ----------------------

_LINE = "INFO trainperf - ETL: 2 ms; iteration {}; iteration time: 4 ms; samples/sec: 100; batches/sec: 5;\n"


def _log_of(size: int) -> bytes:
    """Listener lines and one filler line, ``size`` bytes in all, every line whole."""
    line = _LINE.format(7).encode()
    n = size // len(line) - 1
    filler = size - n * len(line)
    return line * n + b"#" * (filler - 1) + b"\n"


@pytest.mark.parametrize("as_path", [True, False], ids=["path", "file object"])
def test_a_log_of_one_mebibyte_is_read_in_bulk_and_one_byte_less_line_by_line(tmp_path, as_path):
    for size, bulk in ((1_048_576, True), (1_048_575, False)):
        data = _log_of(size)
        assert len(data) == size
        path = tmp_path / f"{size}.log"
        path.write_bytes(data)
        log = trainperf.parse_log(path if as_path else io.BytesIO(data))
        assert (log._frame is not None) is bulk
        assert len(log) == size // len(_LINE.format(7)) - 1 and log.skipped == 1 and log.truncated == 0


def test_a_small_log_is_read_line_by_line():
    log = trainperf.parse_log(io.StringIO(_LINE.format(3) * 30))
    assert log._frame is None and log.column("iteration") == [3.0] * 30


def test_an_empty_parsed_log_has_nothing_skipped_nor_truncated_and_keyword_only_counts():
    log = trainperf.ParsedLog()
    assert (len(log), log.skipped, log.truncated, log.columns) == (0, 0, 0, ["iteration"])
    with pytest.raises(TypeError):
        trainperf.ParsedLog(None, None)  # type: ignore[misc]


def test_the_warmup_column_of_a_frame_is_true_and_false_under_any_spelling_of_its_name():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"iteration": [1, 2, 3], "warmup": [True, False, False], "window_s": [0.5, 0.25, 2.0],
                          "verdict": ["fine", "input-bound", ""]})
    log = trainperf.ParsedLog(frame=frame)
    name = "".join(["warm", "up"])  # a name built at run time is not the interned literal
    assert log.column(name) == [True, False, False]
    assert log.column("warmup") == [True, False, False]
    assert log.column("".join(["ver", "dict"])) == ["fine", "input-bound", None]
    assert log.column("window_s") == [0.5, 0.25, 2.0]


def test_to_pandas_counts_a_new_run_each_time_the_iteration_goes_back():
    lines = [_LINE.format(i) for i in (10, 20, 30, 10, 20, 20, 5, 6, 7)]
    frame = trainperf.parse_log(lines).to_pandas()
    assert frame["run"].tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 3]


def test_a_whole_number_beyond_int64_stays_a_float_and_one_below_becomes_an_int():
    big = trainperf.parse_log([_LINE.format(10**19)]).to_pandas()
    assert str(big["iteration"].dtype) == "float64" and big["iteration"].tolist() == [1e19]
    small = trainperf.parse_log([_LINE.format(2**62)]).to_pandas()
    assert str(small["iteration"].dtype) == "int64" and small["iteration"].tolist() == [2**62]


def test_a_directory_given_as_the_log_is_refused_naming_it(tmp_path):
    with pytest.raises(OSError, match=r"^cannot read log '.*" + tmp_path.name + "': Is a directory$"):
        trainperf.parse_log(tmp_path)


def test_a_path_whose_last_line_is_whole_has_nothing_truncated(tmp_path):
    path = tmp_path / "run.log"
    path.write_text(_LINE.format(1) + _LINE.format(2))
    log = trainperf.parse_log(path)
    assert log.column("iteration") == [1.0, 2.0] and log.truncated == 0


def test_a_file_object_whose_last_line_is_cut_has_it_truncated():
    log = trainperf.parse_log(io.BytesIO((_LINE.format(1) + _LINE.format(2)[:40]).encode()))
    assert log.column("iteration") == [1.0] and log.truncated == 1
    whole = trainperf.parse_log(io.BytesIO((_LINE.format(1)).encode()))
    assert whole.column("iteration") == [1.0] and whole.truncated == 0


def test_pandas_copies_on_write_from_version_3_or_when_switched_on():
    from types import SimpleNamespace

    from trainperf.logs._parse import _copies_on_write

    def pandas(version: str, cow: object) -> object:
        return SimpleNamespace(__version__=version, options=SimpleNamespace(mode=SimpleNamespace(copy_on_write=cow)))

    assert _copies_on_write(pandas("3.0.0", False)) is True
    assert _copies_on_write(pandas("4.1.0", False)) is True
    assert _copies_on_write(pandas("2.2.3", False)) is False
    assert _copies_on_write(pandas("2.2.3", "warn")) is False
    assert _copies_on_write(pandas("2.2.3", True)) is True
    old = SimpleNamespace(__version__="1.5.3", options=SimpleNamespace(mode=SimpleNamespace()))
    assert _copies_on_write(old) is False


def test_each_collectors_ms_follows_its_count_in_the_order_the_log_names_them():
    log = trainperf.parse_log(["ETL: 3 ms; iteration 2; GC: [b: 1 (2ms)], [a: 3 (4ms)];"])
    assert log.columns == ["iteration", "etl_ms", "gc.b.count", "gc.b.ms", "gc.a.count", "gc.a.ms"]
    log = trainperf.parse_log(["ETL: 3 ms; iteration 2; GC: [young: 1 (2ms)], [old: 3 (4ms)];"])
    assert log.columns == ["iteration", "etl_ms", "gc.young.count", "gc.young.ms", "gc.old.count", "gc.old.ms"]


def test_json_and_text_lines_together_give_other_columns_then_collectors_in_the_order_the_log_names_them():
    json_line = '{"iteration": 3, "gamma_ms": 4.0, "gc": {"c": {"count": 1, "ms": 2}, "a": {"count": 1, "ms": 2}}}'
    text_line = "ETL: 3 ms; iteration 4; GC: [b: 1 (2ms)], [a: 3 (4ms)];"
    assert trainperf.parse_log([text_line, json_line]).columns == [
        "iteration", "etl_ms", "gamma_ms", "gc.b.count", "gc.b.ms", "gc.a.count", "gc.a.ms", "gc.c.count", "gc.c.ms"]
    assert trainperf.parse_log([json_line, text_line]).columns == [
        "iteration", "etl_ms", "gamma_ms", "gc.c.count", "gc.c.ms", "gc.a.count", "gc.a.ms", "gc.b.count", "gc.b.ms"]


def test_both_paths_give_the_same_columns_in_the_order_of_the_records_fields():
    """A line's fields in the line's order, the record's other fields in the schema's order (as the CSV
    sink writes them), names the record does not have as the log first gives them, then collectors."""
    from _parse_paths import both_paths

    lines = [
        '{"iteration": 1, "gc": {"gen0": {"count": 1, "ms": 2.0}}, "zeta": 1, "window_s": 0.5, "pid": 7, "etl_ms": 1}',
        "ETL: 3 ms; iteration 2; iteration time: 9 ms; GC: [old: 1 (2ms)]; epoch: 1;",
        '{"iteration": 3, "alpha": 2, "timestamp": 1.5, "verdict": {"kind": "fine", "share": 3.0}}',
    ]
    expected = ["iteration", "etl_ms", "iteration_ms", "epoch", "verdict", "verdict_pct", "timestamp", "pid",
                "window_s", "zeta", "alpha", "gc.gen0.count", "gc.gen0.ms", "gc.old.count", "gc.old.ms"]
    for log in both_paths("\n".join(lines) + "\n"):
        assert log.columns == expected
        assert log.to_pandas().columns.tolist() == [*expected, "run"]
        assert list(next(iter(log))) == expected


@pytest.fixture(params=[False, True], ids=["line by line", "in bulk"])
def bulk(request, monkeypatch) -> bool:
    """Whether small logs are read by the bulk reader (as logs of a mebibyte and more are)."""
    if request.param:
        monkeypatch.setattr(trainperf.logs._parse, "BULK_MIN_BYTES", 1)
    return request.param


def test_columns_named_like_a_collectors_count_and_ms_outside_gc_keep_their_own_places(bulk):
    lines = '{"iteration": 1, "wait.count": 2, "beta_ms": 1.0}\n{"iteration": 2, "wait.ms": 4.0}\n'
    log = trainperf.parse_log(io.StringIO(lines))
    assert (log._frame is not None) is bulk
    assert log.columns == ["iteration", "wait.count", "beta_ms", "wait.ms"]


def test_a_collectors_ms_is_a_column_wherever_its_count_is_and_follows_it(bulk):
    counted = '{"iteration": 1, "gc": {"x": {"count": 2}}}\n{"iteration": 2, "gc": {"y": {"ms": 3.0}}}\n'
    log = trainperf.parse_log(io.StringIO(counted))
    assert log.columns == ["iteration", "gc.x.count", "gc.x.ms", "gc.y.ms"]
    assert log.column("gc.x.ms") == [None, None] and log.column("gc.y.ms") == [None, 3.0]
    late = '{"iteration": 1, "gc": {"x": {"ms": 2.0}}}\n{"iteration": 2, "gc": {"x": {"count": 1, "ms": 1.0}}}\n'
    assert trainperf.parse_log(io.StringIO(late)).columns == ["iteration", "gc.x.count", "gc.x.ms"]


def test_collectors_first_named_by_a_later_text_line_take_that_lines_order():
    lines = ["ETL: 3 ms; iteration 4;", "ETL: 3 ms; iteration 5; GC: [young: 1 (2ms)], [old: 3 (4ms)];",
             '{"iteration": 6, "gc": {"old": {"count": 1, "ms": 2}, "young": {"count": 1, "ms": 2}}}']
    assert trainperf.parse_log(lines).columns == [
        "iteration", "etl_ms", "gc.young.count", "gc.young.ms", "gc.old.count", "gc.old.ms"]


@pytest.mark.parametrize("enabled", [True, False])
def test_parsing_leaves_the_cyclic_collector_as_it_found_it(enabled):
    import gc

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        trainperf.parse_log([_LINE.format(1)])
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_without_pandas_a_large_log_is_read_line_by_line_and_to_pandas_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)
    log = trainperf.parse_log(io.BytesIO(_log_of(1_048_576)))
    assert log._frame is None and len(log) == 1_048_576 // len(_LINE.format(7)) - 1
    with pytest.raises(ImportError, match=r"pip install 'trainperf\[pandas\]'"):
        log.to_pandas()


def test_a_file_that_fails_while_streamed_is_named(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    path = tmp_path / "big.log"
    path.write_bytes(_log_of(1_048_576))

    def broken(self, *args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Path, "open", broken)
    with pytest.raises(OSError, match=r"^cannot read log '.*big.log': Input/output error$"):
        trainperf.parse_log(path)


def test_a_line_longer_than_a_block_that_ends_with_the_next_block_is_read_whole(tmp_path, monkeypatch):
    from trainperf.logs import _bulk, _parse

    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 1)
    monkeypatch.setattr(_bulk, "CHUNK_BYTES", 64)
    line = _LINE.format(77)
    long = "2026-11-22 02:22:02,771 " + "w" * (128 - len(line) - 25) + " " + line
    assert len(long) == 128
    path = tmp_path / "edge.log"
    path.write_text("#" * 63 + "\n" + long + _LINE.format(78))  # the long line fills blocks 2 and 3 exactly
    log = trainperf.parse_log(path)
    assert log.column("iteration") == [77.0, 78.0] and (log.skipped, log.truncated) == (1, 0)


def test_lines_given_as_a_list_are_whole_and_nothing_is_truncated():
    log = trainperf.parse_log([_LINE.format(1).rstrip("\n"), _LINE.format(2)])
    assert log.column("iteration") == [1.0, 2.0] and (log.skipped, log.truncated) == (0, 0)


@pytest.mark.parametrize("extra_lines", [0, 2])
def test_a_file_of_a_mebibyte_or_more_is_streamed_not_read_whole(tmp_path, monkeypatch, extra_lines):
    path = tmp_path / "big.log"
    path.write_bytes(_log_of(1_048_576 + extra_lines * len(_LINE.format(7))))

    def refuse(self):
        raise AssertionError("a large log was read whole")

    monkeypatch.setattr(type(path), "read_bytes", refuse)
    log = trainperf.parse_log(path)
    assert log._frame is not None and len(log) == 1_048_576 // len(_LINE.format(7)) - 1 + extra_lines


def test_a_streamed_file_cut_into_small_blocks_keeps_lines_across_them_whole(tmp_path, monkeypatch):
    """Blocks of 64 bytes: lines cross blocks, one line is longer than a block, a crash cut one line
    before a restart wrote more, and the last is cut."""
    from trainperf.logs import _bulk, _parse

    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 1)
    monkeypatch.setattr(_bulk, "CHUNK_BYTES", 64)
    lines = [_LINE.format(i) for i in (5, 6)] + ["x" * 150 + "\n", _LINE.format(20)[:55] + "\n"]
    lines += [_LINE.format(i) for i in (7, 8)]
    path = tmp_path / "blocks.log"
    path.write_text("".join(lines) + _LINE.format(9)[:30])
    log = trainperf.parse_log(path)
    assert log._frame is not None
    assert log.column("iteration") == [5.0, 6.0, 7.0, 8.0]
    assert log.column("iteration_ms") == [4.0] * 4
    assert (log.skipped, log.truncated) == (2, 2)  # a line cut and followed by another, and the last
