"""The bulk reader must give exactly what the line patterns give, on every kind of line."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest

import trainperf
from trainperf import GCStat, PerformanceRecord, Verdict, format_line
from trainperf.logs import _bulk as _parse_bulk
from trainperf.logs import _layout, _parse
from trainperf.logs._layout import Layout, learn_layout

PREFIXES = [
    "",
    "2026-11-22 02:22:02,771 INFO trainperf - ",
    "2019-03-01 10:00:00,123 INFO  [main] o.d.o.l.PerformanceListener - ",
    "[rank 3] ",
]


def random_record(rng: random.Random, i: int) -> tuple[PerformanceRecord, str]:
    """A record of one of 40 layouts (which fields, collectors, verdict kind), with random figures."""
    layout = random.Random(rng.randrange(40))

    def maybe(value: float) -> float | None:
        return value if layout.random() > 0.1 else None

    def number() -> float:
        return rng.choice([rng.uniform(0, 50), rng.uniform(100, 9000), rng.uniform(0, 0.01), 0.0, 12.0])

    names = layout.choice([("gen0", "gen1", "gen2"), ("gen1", "gen0", "gen2"), ("PS Scavenge", "PS MarkSweep"), ()])
    share = rng.randint(20, 99)
    verdict = layout.choice([
        None,
        Verdict("fine", 3.0, f"data wait {share % 20}%, GC 0% of step"),
        Verdict("input-bound", float(share), f"{share}% of step waiting for data"),
        Verdict("gc-bound", 12.5, "12.5% of step in garbage collection"),
    ])
    return PerformanceRecord(
        iteration=10 * i, window_iterations=10, window_s=0.1, warmup=layout.random() < 0.05, timestamp=0.0,
        etl_ms=maybe(number()), etl_max_ms=maybe(number()), iteration_ms=maybe(number()),
        iteration_p50_ms=maybe(number()), iteration_p95_ms=maybe(number()), iteration_max_ms=maybe(number()),
        samples_per_sec=maybe(layout.choice([number(), float("inf")])), batches_per_sec=maybe(number()),
        score=maybe(layout.choice([rng.random(), float("nan"), -rng.random(), 1e-5])),
        gc=tuple(GCStat(n, rng.randint(0, 12), layout.choice([number(), None])) for n in names),
        epoch=layout.choice([None, i // 50]), rank=layout.choice([None, 0, 1]), verdict=verdict,
    ), layout.choice(PREFIXES)


NOISE = [
    "Epoch 3: 100%|##########| 50/50 [00:01<00:00, 41.21it/s, loss=0.123]",
    "starting iteration 5 of the warm-up",
    "ETL: ; iteration ;",
    "ETL: abc ms; iteration 7; samples/sec: 1.2.3;",
    "ETL: 1 ms; iteration 8; iteration time: . ms;",
    "iteration 99999999999999999999;",
    "\x00\xff binary junk iteration 3;",
    "",
    "Device: [12]; ETL: 4 ms; iteration 9; iteration time: 5 ms; samples/sec: 6;",
    "ETL: 0 ms; iteration 30; iteration time: 17 ms; samples/sec: 588.235; batches/sec: 58.824; score: "
    "1.0E-5; GC: [G1 Young Generation: 1 (3ms)], [G1 Old Generation: 0 (0ms)];",
    "ETL: 2 ms; iteration 40; iteration time: 17 ms; GC: [gen00: 1 (3ms)], [gen1: 0 (0ms)];",
]


def corpus(lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(1, lines + 1):
        if rng.random() < 0.1:
            out.append(rng.choice(NOISE))
        else:
            record, prefix = random_record(rng, i)
            out.append(prefix + format_line(record))
    return out


@pytest.fixture
def bulk(monkeypatch):
    """Every log is read in bulk, in small blocks, where a shape has two lines or more in a block."""
    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 0)
    monkeypatch.setattr(_parse_bulk, "MIN_LINES", 2)
    monkeypatch.setattr(_parse_bulk, "CHUNK_BYTES", 1 << 16)


def count_bulk_rows(monkeypatch, json_only: bool = False) -> list[int]:
    """Rows each layout read (JSON layouts only, if asked), filled in as the log is parsed."""
    counts: list[int] = []
    read = Layout.read

    def counting(self, block, count, pd):
        frame = read(self, block, count, pd)
        if not json_only or self.separators == _layout._JSON_SEPARATORS:
            counts.append(0 if frame is None else len(frame))
        return frame

    monkeypatch.setattr(Layout, "read", counting)
    return counts


def assert_reads_like_line_patterns(log: trainperf.ParsedLog, source) -> pd.DataFrame:
    """``log`` (read in bulk) holds exactly what the line patterns read from ``source``."""
    assert log._frame is not None
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_parse, "BULK_MIN_BYTES", 1 << 62)
        expected = trainperf.parse_log(source)
    assert expected._frame is None and log.skipped == expected.skipped
    got = log.to_pandas()
    pd.testing.assert_frame_equal(got, expected.to_pandas(), check_exact=True)
    return got


@pytest.mark.parametrize("seed", range(3))
def test_bulk_reads_exactly_what_the_line_patterns_read(bulk, seed, monkeypatch):
    lines = corpus(1500, seed)
    read_in_bulk = count_bulk_rows(monkeypatch)
    log = trainperf.parse_log(lines)
    assert sum(read_in_bulk) > 0.5 * len(log) and len(read_in_bulk) > 20  # many layouts, most lines
    assert_reads_like_line_patterns(log, lines)


def test_regular_log_is_read_in_bulk_and_matches(bulk, monkeypatch):
    rng = random.Random(7)
    regular = [
        "2026-11-22 02:22:02,771 INFO trainperf - " + format_line(
            PerformanceRecord(
                iteration=10 * i, window_iterations=10, window_s=0.1, warmup=i == 1, timestamp=0.0,
                etl_ms=rng.uniform(0, 20), iteration_ms=rng.uniform(5, 50), samples_per_sec=rng.uniform(100, 9000),
                batches_per_sec=7.0, score=rng.random(), epoch=i // 100,
                gc=(GCStat("gen0", i % 7, 0.25), GCStat("gen1", 0, 0.0), GCStat("gen2", 1, rng.uniform(0, 30))),
                verdict=Verdict("fine", 3.0, "data wait 3%, GC 0% of step"),
            )
        )
        for i in range(1, 401)
    ]
    calls = []
    read = Layout.read
    monkeypatch.setattr(_parse_bulk, "MIN_LINES", 50)
    monkeypatch.setattr(_parse_bulk, "CHUNK_BYTES", 1 << 22)
    monkeypatch.setattr(Layout, "read", lambda self, *a: calls.append(a[1]) or read(self, *a))
    got = assert_reads_like_line_patterns(trainperf.parse_log(regular), regular)
    assert calls == [399]  # one read for all lines of the regular shape; the warm-up line on its own
    assert got["warmup"].tolist() == [True] + [False] * 399
    assert got["iteration"].dtype == "int64" and got["gc.gen0.count"].tolist()[:3] == [1.0, 2.0, 3.0]


def test_layout_knows_values_from_label_digits():
    line = (b"2026-11-22 02:22:02,771 INFO trainperf - ETL: 15.2 ms; iteration 10; iteration time: 33.9 ms; "
            b"GC: [gen0: 2 (0.968ms)], [gen1: 0 (0ms)]; iteration p50: 33.9 ms; p95: 40.7 ms; epoch: 0; "
            b"verdict: fine (data wait 3%, GC 0% of step);")
    layout = learn_layout(line)
    assert layout is not None
    words = line.split(b" ")
    named = {layout.values[at]: words[at] for at in layout.values}
    assert named["etl_ms"] == b"15.2" and named["iteration"] == b"10;" and named["gc.gen1.ms"] == b"(0ms)];"
    assert sorted(layout.fixed.values()) == ["0", "1", "50", "95"]  # gen0, gen1, p50, p95
    assert layout.constants == {"verdict": "fine"}  # the 3% and 0% of a "fine" verdict are not a figure


def test_words_with_several_numbers_that_matter_are_left_to_the_line_patterns():
    assert learn_layout(b"ETL: 1 ms; iteration 5; score: 1.0E-5;") is None
    assert learn_layout(b"no listener here 5") is None


def test_collectors_in_another_order_are_not_mixed_up(bulk):
    lines = [
        "ETL: 1 ms; iteration 1; GC: [gen0: 5 (1ms)], [gen1: 6 (2ms)];",
        "ETL: 1 ms; iteration 2; GC: [gen1: 7 (3ms)], [gen0: 8 (4ms)];",
        "ETL: 1 ms; iteration 3; GC: [gen00: 9 (5ms)], [gen1: 1 (6ms)];",
    ]
    frame = trainperf.parse_log(lines).to_pandas()
    assert frame["gc.gen0.count"].tolist()[:2] == [5, 8] and frame["gc.gen1.count"].tolist() == [6, 7, 1]
    assert frame["gc.gen00.count"].tolist()[2] == 9


def test_bulk_skips_and_counts_like_the_line_patterns(bulk, tmp_path):
    path = tmp_path / "train.log"
    good = "ETL: 0 ms; iteration 30; iteration time: 17 ms; samples/sec: 588.235;"
    path.write_bytes(("starting\n" + good + "\n\n\x00\xff junk\n" + good + "\n" + good[:20]).encode())
    log = trainperf.parse_log(path)
    assert log._frame is not None and len(log) == 2 and log.skipped == 3 and log.truncated == 1
    assert list(log)[0]["samples_per_sec"] == 588.235


def test_a_line_of_the_same_shape_without_a_number_sends_its_block_to_the_line_patterns(bulk):
    regular = [f"ETL: {i % 9}.5 ms; iteration {i}; iteration time: {i % 50} ms; samples/sec: {3 * i};"
               for i in range(300)]
    for odd in ("ETL:  ms; iteration 77; iteration time: 4 ms; samples/sec: 1;",  # same shape, ETL empty
                "ETL: . ms; iteration 78; iteration time: 4 ms; samples/sec: 1;"):  # same shape, ETL not a number
        lines = regular[:150] + [odd] + regular[150:]
        got = assert_reads_like_line_patterns(trainperf.parse_log(lines), lines)
        assert len(got) == 301 and got["etl_ms"].isna().sum() == 1


def test_a_log_over_a_mebibyte_is_read_in_bulk_with_the_default_settings(tmp_path):
    lines = corpus(5000, seed=11)
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines * 2) + "\n")
    assert path.stat().st_size >= _parse.BULK_MIN_BYTES
    assert_reads_like_line_patterns(trainperf.parse_log(path), path)


def test_hostile_lines_in_a_large_log_neither_crash_nor_stall(bulk, monkeypatch):
    learned = []
    monkeypatch.setattr(_parse_bulk, "learn_layout", lambda line: learned.append(len(line)) or learn_layout(line))
    many_numbers = "ETL: 1 ms; iteration 5; extra: " + " ".join(str(i) for i in range(20_000)) + ";"
    lines = [many_numbers] * 3 + ["x" * 100_000 + "iteration 6;"] * 3 + ["\x00\xff\xfe iteration 7; \x01: 2;"] * 3
    lines += [f"ETL: 2 ms; iteration {i}; iteration time: 3 ms;" for i in range(10, 20)]
    got = assert_reads_like_line_patterns(trainperf.parse_log(lines), lines)
    assert got["iteration"].tolist() == [5, 5, 5, 6, 6, 6, 7, 7, 7, *range(10, 20)]
    assert learned and max(learned) <= _parse_bulk.MAX_SHAPE_BYTES  # probing a huge line word by word would stall


def json_lines(tmp_path, count: int, seed: int) -> list[str]:
    from trainperf.sinks import JsonLinesSink

    rng = random.Random(seed)
    path = tmp_path / f"run-{seed}.jsonl"
    with JsonLinesSink(path) as sink:
        for i in range(1, count + 1):
            sink(random_record(rng, i)[0])
    return path.read_text().splitlines()


@pytest.mark.parametrize("seed", range(2))
def test_json_lines_among_other_lines_are_read_in_bulk_exactly_and_in_order(bulk, tmp_path, seed, monkeypatch):
    text = corpus(600, seed)
    records = json_lines(tmp_path, 900, seed)
    rng = random.Random(seed)
    lines = [rng.choice([text, records]).pop() if text and records else (text or records).pop() for _ in range(1500)]
    read_in_bulk = count_bulk_rows(monkeypatch, json_only=True)
    got = assert_reads_like_line_patterns(trainperf.parse_log(lines), lines)
    assert sum(read_in_bulk) > 360  # a good share of the 900 JSON lines (some layouts are rare or unreadable)
    assert "window_s" in got.columns and got["window_s"].notna().sum() == 900


def test_a_compact_json_line_has_a_layout():
    line = (b'{"iteration":20,"window_iterations":10,"warmup":false,"etl_ms":17.8,"score":NaN,'
            b'"gc":{"gen0":{"count":2,"ms":0.987},"gen1":{"count":0,"ms":0.0}},"verdict":null}')
    layout = learn_layout(line)
    assert layout is not None
    assert sorted(layout.values.values()) == sorted(
        ["iteration", "window_iterations", "etl_ms", "gc.gen0.count", "gc.gen0.ms", "gc.gen1.count", "gc.gen1.ms"]
    )
    assert sorted(layout.fixed.values()) == ["0", "1"]
    assert list(layout.constants) == ["score"] and math.isnan(layout.constants["score"])


def _plain_lines(n: int) -> list[str]:
    rng = random.Random(7)
    return [
        format_line(PerformanceRecord(
            iteration=10 * i, window_iterations=10, window_s=0.1, warmup=False, timestamp=0.0, etl_ms=rng.random(),
            etl_max_ms=rng.random(), iteration_ms=rng.random(), iteration_p50_ms=1.0, iteration_p95_ms=rng.random(),
            iteration_max_ms=2.0, samples_per_sec=100.0, batches_per_sec=10.0, score=rng.random(),
            gc=(GCStat("gen0", 1, 0.5),), epoch=1, verdict=Verdict("input-bound", 53.0, "53% of step waiting for data"),
        ))
        for i in range(1, n + 1)
    ]


def test_a_shapes_odd_first_line_does_not_cost_the_other_lines_their_fields():
    """``p9: `` and ``p95: `` have one shape: a layout learned from the odd line alone would take the
    digits of ``p95`` as meaningless and drop the figures after it from every line of the shape."""
    from _parse_paths import assert_agree, both_paths

    lines = _plain_lines(300)
    assert " p95: " in lines[0]
    lines[0] = lines[0].replace(" p95: ", " p9: ")
    by_line, in_bulk = both_paths("\n".join(lines) + "\n")
    assert "iteration_p95_ms" in by_line.columns
    assert_agree(by_line, in_bulk)


def test_whole_numbers_beyond_what_a_float_holds_exactly_read_alike_on_both_paths():
    from _parse_paths import assert_agree, both_paths

    lines = _plain_lines(300)
    lines[150] = lines[150].replace("iteration 1510;", "iteration 9007199254740993;")
    assert "9007199254740993" in lines[150]
    by_line, in_bulk = both_paths("\n".join(lines) + "\n")
    assert_agree(by_line, in_bulk)
    assert by_line.to_pandas()["iteration"][150] == in_bulk.to_pandas()["iteration"][150] == 2**53


def test_bulk_reads_hand_written_deeplearning4j_lines_to_hand_written_figures(bulk):
    """Expected figures typed from the lines themselves, not from the parser's other path."""
    lines = [
        "2019-03-01 10:00:00,123 INFO  [main] o.d.o.l.PerformanceListener - ETL: 0 ms; iteration 16; iteration time: "
        "65 ms; samples/sec: 492.308; batches/sec: 15.384; score: 0.72; GC: [PS Scavenge: 2 (1ms)], "
        "[PS MarkSweep: 2 (24ms)];",
        "2019-03-01 10:00:01,123 INFO  [main] o.d.o.l.PerformanceListener - ETL: 3 ms; iteration 32; iteration time: "
        "17 ms; samples/sec: 588.235; batches/sec: 18.382; score: 0.5; GC: [PS Scavenge: 5 (3ms)], "
        "[PS MarkSweep: 2 (0ms)];",
        "2019-03-01 10:00:02,123 INFO  [main] o.d.o.l.PerformanceListener - ETL: 12 ms; iteration 48; iteration time: "
        "21 ms; samples/sec: 476.19; batches/sec: 14.881; score: 0.25; GC: [PS Scavenge: 0 (0ms)], "
        "[PS MarkSweep: 3 (7ms)];",
    ]
    log = trainperf.parse_log(lines)
    assert log._frame is not None  # read in bulk
    assert log.column("iteration") == [16.0, 32.0, 48.0]
    assert log.column("etl_ms") == [0.0, 3.0, 12.0]
    assert log.column("iteration_ms") == [65.0, 17.0, 21.0]
    assert log.column("samples_per_sec") == [492.308, 588.235, 476.19]
    assert log.column("batches_per_sec") == [15.384, 18.382, 14.881]
    assert log.column("score") == [0.72, 0.5, 0.25]
    frame = log.to_pandas()
    assert list(frame["gc.PS Scavenge.count"]) == [2, 5, 0] and list(frame["gc.PS Scavenge.ms"]) == [1.0, 3.0, 0.0]
    assert list(frame["gc.PS MarkSweep.count"]) == [2, 2, 3] and list(frame["gc.PS MarkSweep.ms"]) == [24.0, 0.0, 7.0]


# --- the reader's paths: which shape a block is taken by, when a shape is learned and read ---------

def _spy(monkeypatch, name: str) -> list[tuple[bytes, list[int]]]:
    """Calls of ``_BulkReader.<name>`` as (shape, line numbers), in order."""
    import numpy as np

    calls: list[tuple[bytes, list[int]]] = []
    original = getattr(_parse_bulk._BulkReader, name)

    def spy(self, shape, rows, *args):
        calls.append((shape, np.asarray(rows).tolist()))
        return original(self, shape, rows, *args)

    monkeypatch.setattr(_parse_bulk._BulkReader, name, spy)
    return calls


def _reader():
    import numpy as np

    return _parse_bulk._BulkReader(pd, np)


def _lines(*texts: str) -> bytes:
    return "".join(t + "\n" for t in texts).encode()


A = "ETL: {0} ms; iteration {0};"
B = "iteration {0}; iteration time: {0} ms;"
SHAPE_A, SHAPE_B = b"ETL:  ms; iteration ;", b"iteration ; iteration time:  ms;"


def test_a_block_of_one_shape_is_taken_whole_under_that_shape(monkeypatch):
    taken, split = _spy(monkeypatch, "_take"), _spy(monkeypatch, "_take_rows")
    reader = _reader()
    reader.add(_lines(*(A.format(i) for i in range(1, 6))))
    reader.add(_lines(*(A.format(i) for i in range(6, 8))))
    assert taken == [(SHAPE_A, [0, 1, 2, 3, 4]), (SHAPE_A, [5, 6])] and split == [] and reader.lines == 7


@pytest.mark.parametrize("order, calls", [
    ("BABAABAB", [(SHAPE_A, [1, 3, 4, 6]), (SHAPE_B, [0, 2, 5, 7])]),  # a tie: the middle line's shape first
    ("AAABAAA", [(SHAPE_A, [0, 1, 2, 4, 5, 6]), (SHAPE_B, [3])]),  # the middle is rare: the most common first
    ("AB", [(SHAPE_B, [1]), (SHAPE_A, [0])]),
])
def test_a_mixed_block_is_taken_by_its_common_shape_first_then_by_each_other_shape(monkeypatch, order, calls):
    split = _spy(monkeypatch, "_take_rows")
    reader = _reader()
    reader.add(_lines(*((A if c == "A" else B).format(i + 1) for i, c in enumerate(order))))
    assert split == calls


def test_cut_lines_are_counted_in_a_mixed_block_whose_common_shape_is_them():
    reader = _reader()
    reader.add(_lines("ETL: 1 ms; iteration 1", "ETL: 2 ms; iteration 2", B.format(3)))
    assert reader.cut == 2


def test_a_shape_is_learned_with_its_128th_line_across_blocks_of_one_line(monkeypatch):
    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 0)
    line = "ETL: 5 ms; iteration {}; iteration time: 7 ms;"
    monkeypatch.setattr(_parse_bulk, "CHUNK_BYTES", len(line.format(1000)) + 1)  # a block per line
    read_in_bulk = count_bulk_rows(monkeypatch)
    log = trainperf.parse_log([line.format(i) for i in range(1000, 1300)])
    assert sum(read_in_bulk) == 300 - 127 and log.column("iteration") == [float(i) for i in range(1000, 1300)]


def test_one_shape_over_many_blocks_is_read_at_once_and_exactly(monkeypatch):
    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 0)
    monkeypatch.setattr(_parse_bulk, "MIN_LINES", 2)
    line = "ETL: {0} ms; iteration {1}; iteration time: 7 ms;"
    monkeypatch.setattr(_parse_bulk, "CHUNK_BYTES", 1000)
    reads: list[tuple[str, int]] = []
    read = Layout.read

    def counting(self, block, count, pandas):
        reads.append((type(block).__name__, count))
        return read(self, block, count, pandas)

    monkeypatch.setattr(Layout, "read", counting)
    log = trainperf.parse_log([line.format(i % 10, i) for i in range(400)])
    assert reads == [("list", 400)]
    assert log.column("iteration") == [float(i) for i in range(400)]
    assert log.column("etl_ms") == [float(i % 10) for i in range(400)]


def test_a_piece_that_does_not_fit_its_layout_goes_to_the_line_patterns_alone(monkeypatch):
    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 0)
    monkeypatch.setattr(_parse_bulk, "MIN_LINES", 2)
    lines = [f"ETL: {i % 10} ms; iteration {1000 + i}; iteration time: 7 ms;" for i in range(100)]
    monkeypatch.setattr(_parse_bulk, "CHUNK_BYTES", 50 * (len(lines[0]) + 1))  # two blocks of 50 lines
    lines[70] = "ETL: . ms; iteration 1070; iteration time: 7 ms;"  # same shape, no number
    reads: list[int | None] = []
    read = Layout.read

    def counting(self, block, count, pandas):
        frame = read(self, block, count, pandas)
        reads.append(None if frame is None else len(frame))
        return frame

    monkeypatch.setattr(Layout, "read", counting)
    log = trainperf.parse_log(lines)
    assert reads == [None, 50, None]  # both blocks at once, then each: the second goes to the line patterns
    assert log.column("iteration") == [1000.0 + i for i in range(100)]
    assert log.column("etl_ms")[70] is None and log.column("etl_ms")[71] == 1.0
    reads.clear()
    trainperf.parse_log(lines[50:])  # one block only: not read twice
    assert reads == [None]


@pytest.mark.parametrize("shape_bytes, learned", [(4096, True), (4097, False)])
def test_a_shape_of_at_most_4096_bytes_is_learned(monkeypatch, shape_bytes, learned):
    monkeypatch.setattr(_parse, "BULK_MIN_BYTES", 0)
    monkeypatch.setattr(_parse_bulk, "MIN_LINES", 2)
    body = "ETL: {} ms; iteration {};"
    prefix = "w" * (shape_bytes - len(body.replace("{}", "")) - 1) + " "
    lines = [prefix + body.format(i % 10, i) for i in range(10)]
    assert len(lines[0].encode().translate(None, b"0123456789.")) == shape_bytes
    read_in_bulk = count_bulk_rows(monkeypatch)
    log = trainperf.parse_log(lines)
    assert (sum(read_in_bulk) == 10) is learned and log.column("iteration") == [float(i) for i in range(10)]


def test_two_shapes_taking_turns_line_by_line_come_out_in_line_order(bulk):
    lines = [A.format(1), B.format(2), A.format(3), B.format(4)]
    log = trainperf.parse_log(lines)
    assert log.column("iteration") == [1.0, 2.0, 3.0, 4.0]
    assert log.column("etl_ms") == [1.0, None, 3.0, None]
    assert log.column("iteration_ms") == [None, 2.0, None, 4.0]


def test_a_cut_last_line_of_a_file_object_read_in_bulk_is_truncated_not_read(bulk):
    import io

    log = trainperf.parse_log(io.BytesIO(_lines(*(A.format(i) for i in range(1, 5))) + b"ETL: 9 ms; itera"))
    assert log._frame is not None and log.column("iteration") == [1.0, 2.0, 3.0, 4.0] and log.truncated == 1


def test_long_collector_names_read_in_bulk_keep_each_ms_after_its_count(bulk):
    lines = [f"ETL: 1 ms; iteration {i}; GC: [young: {i} (2ms)], [old: 3 ({i}ms)];" for i in range(1, 5)]
    log = trainperf.parse_log(lines)
    assert log._frame is not None
    assert log.columns == ["iteration", "etl_ms", "gc.young.count", "gc.young.ms", "gc.old.count", "gc.old.ms"]
    assert log.column("gc.old.ms") == [1.0, 2.0, 3.0, 4.0]


def test_lines_are_counted_as_whole_numbers(bulk):
    reader = _reader()
    reader.add(_lines(*(A.format(i) for i in range(1, 4))))
    assert type(reader.lines) is int
    log = trainperf.parse_log([A.format(i) for i in range(1, 4)] + ["not a listener line"])
    assert type(log.skipped) is int and log.skipped == 1


def test_listener_lines_in_a_block_mostly_of_other_lines_are_read(bulk):
    lines = ["loading the data", "loading the data", "loading the data", A.format(5), A.format(6)]
    log = trainperf.parse_log(lines)
    assert log.column("iteration") == [5.0, 6.0] and log.skipped == 3


@pytest.mark.parametrize("at", [0, -1], ids=["first", "last"])
def test_an_odd_line_of_a_shape_first_or_last_costs_no_line_its_fields(at):
    from _parse_paths import assert_agree, both_paths

    lines = _plain_lines(300)
    lines[at] = lines[at].replace(" p95: ", " p9: ")
    by_line, in_bulk = both_paths("\n".join(lines) + "\n")
    assert_agree(by_line, in_bulk)
    assert in_bulk.to_pandas()["iteration_p95_ms"].notna().sum() == 299


def test_at_most_ten_thousand_rare_shapes_are_counted():
    reader = _reader()
    reader.counted = {str(i).encode(): 1 for i in range(_parse_bulk.MAX_COUNTED_SHAPES - 1)}
    reader._layout(b"new shape iteration", 1, b"new shape iteration 1\n")
    assert reader.counted[b"new shape iteration"] == 1
    reader._layout(b"newer shape iteration", 1, b"newer shape iteration 1\n")
    assert b"newer shape iteration" not in reader.counted
    reader._layout(b"new shape iteration", 1, b"new shape iteration 2\n")
    assert reader.counted[b"new shape iteration"] == 2  # a shape already counted still is


def test_extra_columns_of_layouts_read_apart_take_the_order_of_their_first_lines(bulk):
    zeta, alpha = '{{"iteration": {}, "zeta_ms": 1.5}}', '{{"iteration":{},"alpha_ms":2.5}}'
    lines = [zeta.format(1), alpha.format(2), alpha.format(3), zeta.format(4)]
    read_in_bulk = count_bulk_rows(monkeypatch := pytest.MonkeyPatch())
    try:
        log = trainperf.parse_log(lines)
    finally:
        monkeypatch.undo()
    assert sorted(read_in_bulk) == [2, 2]
    assert log.columns == ["iteration", "zeta_ms", "alpha_ms"]


def test_a_column_a_layout_writes_before_the_line_patterns_do_takes_the_layouts_place(bulk):
    lines = ['{"iteration": 0, "odd_ms": 1}', '{"iteration":1,"alpha_ms":2.5}', '{"iteration":2,"alpha_ms":3.5}',
             '{"iteration": 3, "beta_ms": 2, "alpha_ms": 1, "zzz_ms": 4}']
    log = trainperf.parse_log(lines)
    assert log.columns == ["iteration", "odd_ms", "alpha_ms", "beta_ms", "zzz_ms"]
    assert log.column("alpha_ms") == [None, 2.5, 3.5, 1.0]
