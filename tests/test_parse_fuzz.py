"""Property tests of ``parse_log``: random bytes, mutated listener lines of all three formats and
hostile JSON never make it raise, its two paths (line by line, and in bulk for long logs) return
the same rows, and the figures of well-formed lines read back as written."""

from __future__ import annotations

import json
import math
import os
import re

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from _parse_paths import assert_agree, both_paths  # noqa: E402
from trainperf import GCStat, PerformanceRecord, Verdict, format_line, parse_log  # noqa: E402
from trainperf.records._json import json_line as strict_json_line  # noqa: E402

#: ``ci``: a fixed set of examples, the same on every run; ``fuzz`` (``TRAINPERF_FUZZ=fuzz``, used by
#: ``benchmarks/parse_fuzz.py``): many more, new ones each run.
settings.register_profile(
    "ci", max_examples=300, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fuzz", max_examples=int(os.environ.get("TRAINPERF_FUZZ_EXAMPLES", "5000")), deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("TRAINPERF_FUZZ", "ci"))

finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
score = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.none())
names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
#: Collector names as Deeplearning4j and Python's generations have them (what a well-formed line holds).
plain_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_ -]{0,10}[A-Za-z0-9]", fullmatch=True)


@st.composite
def records(draw, names=names):
    gc = draw(st.lists(st.builds(GCStat, names, st.integers(0, 10**6), st.one_of(finite, st.none())), max_size=3,
                       unique_by=lambda s: s.name))
    verdict = draw(st.one_of(st.none(), st.builds(Verdict, st.sampled_from(["fine", "input-bound", "gc-bound"]),
                                                  st.floats(0, 100), st.just("reason"))))
    if verdict is not None and draw(st.booleans()):
        verdict = Verdict(verdict.kind, verdict.share, f"{verdict.share:.0f}% of step waiting for data")
    return PerformanceRecord(
        iteration=draw(st.integers(1, 10**9)), window_iterations=draw(st.integers(1, 1000)), window_s=draw(finite),
        warmup=draw(st.booleans()), timestamp=draw(finite), etl_ms=draw(st.one_of(finite, st.none())),
        iteration_ms=draw(finite), samples_per_sec=draw(st.one_of(finite, st.none())),
        batches_per_sec=draw(finite), score=draw(score), gc=tuple(gc),
        epoch=draw(st.one_of(st.none(), st.integers(0, 999))),
        verdict=verdict,
    )


def dl4j_line(record: PerformanceRecord) -> str:
    gc = ", ".join(f"[{s.name}: {s.count} ({(s.ms or 0):.0f}ms)]" for s in record.gc)
    return (f"ETL: {record.etl_ms or 0:.0f} ms; iteration {record.iteration}; iteration time: "
            f"{record.iteration_ms:.0f} ms; samples/sec: {record.samples_per_sec or 0:.3f}; batches/sec: "
            f"{record.batches_per_sec:.3f}; score: {record.score}; GC: {gc};")


def json_line(record: PerformanceRecord) -> str:
    return strict_json_line(record.to_dict()).rstrip("\n")


def line_of(kind: str, record: PerformanceRecord) -> str:
    if kind == "json":
        return json_line(record)
    if kind == "dl4j":
        return "12:00:01.123 [main] INFO PerformanceListener - " + dl4j_line(record)
    return "2026-11-22 12:00:01 INFO trainperf - " + format_line(record)


HOSTILE = ["\x1f", "\r", "\n", ";", "ETL: 5 ms; iteration 999;", "{", "}", '"', "\\", "\x00", "true", "[", "]",
           "iteration 7;", " ", "NaN", "1e999", "é", "\u2028"]


@st.composite
def mutated(draw, kind: str):
    text = line_of(kind, draw(records()))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "cut", "drop"]))
        if action == "insert":
            text = text[:at] + draw(st.sampled_from(HOSTILE)) + text[at:]
        elif action == "cut":
            text = text[:at]
        else:
            text = text[:at] + text[at + 1 :]
    return text


def hostile_json():
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(), st.text(max_size=5))
    nested = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                              max_size=3), max_leaves=8)
    keyed = st.dictionaries(st.sampled_from(["iteration", "etl_ms", "warmup", "verdict", "gc", "score", "x"]), nested,
                            max_size=5)
    return st.one_of(keyed.map(lambda d: json.dumps(d, default=str)), st.just("[" * 5000 + "]" * 5000),
                     st.just('{"iteration": ' + "9" * 500 + "}"), st.just('{"a": ' + "[" * 3000 + "]" * 3000 + "}"))


log_lines = st.one_of(mutated("text"), mutated("json"), mutated("dl4j"), hostile_json(),
                      st.text(max_size=80), st.binary(max_size=80).map(lambda b: b.decode("latin-1")))


@given(st.lists(log_lines, max_size=12))
def test_any_text_is_read_alike_on_both_paths_without_raising(lines):
    assert_agree(*both_paths("\n".join(lines) + "\n"))


#: Half a unit in the last decimal written, per column, for trainperf's text lines.
_TEXT_DECIMALS = {"etl_ms": 2, "iteration_ms": 2, "samples_per_sec": 1, "batches_per_sec": 1, "iteration_p50_ms": 2}


def expected_row(kind: str, record: PerformanceRecord) -> dict[str, tuple[float | str | bool, float]]:
    """What each column must read for ``record``'s line: value and tolerance (columns not named must
    read as missing)."""
    def number(value: float | None, tolerance: float) -> list[tuple[float, float]]:
        return [] if value is None or math.isnan(value) else [(value, tolerance)]

    out: dict[str, tuple[float | str | bool, float]] = {"iteration": (float(record.iteration), 0.0)}
    if kind == "json":
        flat = record.to_dict(flat=True)
        for key, value in flat.items():
            if key in ("warmup", "verdict") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            for item in number(float(value), 0.0):
                out[key] = item
        if record.verdict is not None:
            out["verdict"] = (record.verdict.kind, 0.0)
    elif kind == "dl4j":
        written = (("etl_ms", record.etl_ms or 0), ("iteration_ms", record.iteration_ms),
                   ("samples_per_sec", record.samples_per_sec or 0), ("batches_per_sec", record.batches_per_sec))
        for key, value in written:
            out[key] = (float(value), 0.5 if key.endswith("ms") else 0.0005)
        for item in number(record.score, abs(record.score or 0) * 1e-12):
            out["score"] = item
        for stat in record.gc:
            out[f"gc.{stat.name}.count"] = (float(stat.count), 0.0)
            out[f"gc.{stat.name}.ms"] = (float(stat.ms or 0), 0.5)
    else:
        for key, decimals in _TEXT_DECIMALS.items():
            for item in number(getattr(record, key), 0.5 * 10**-decimals + 1e-9):
                out[key] = item
        for item in number(record.score, abs(record.score or 0) * 0.005 + 0.0005):
            out["score"] = item
        if record.epoch is not None:
            out["epoch"] = (float(record.epoch), 0.0)
        for stat in record.gc:
            out[f"gc.{stat.name}.count"] = (float(stat.count), 0.0)
            for item in number(stat.ms, 0.005 + 1e-9):
                out[f"gc.{stat.name}.ms"] = item
        if record.verdict is not None:
            out["verdict"] = (record.verdict.kind, 0.0)
            if record.verdict.kind == "fine":  # the line states a fine verdict's share first, to the percent
                out["verdict_pct"] = (float(f"{record.verdict.share:.0f}"), 0.0)
            elif share := re.match(r"(\d+)%", record.verdict.reason):
                out["verdict_pct"] = (float(share.group(1)), 0.0)
    if record.warmup and kind != "dl4j":
        out["warmup"] = (True, 0.0)
    return out


def assert_reads(log, items) -> None:
    """Every column of every row reads what its line says, and nothing where its line says nothing."""
    assert log.rows == len(items) and log.skipped == 0
    columns = {name: log.column(name) for name in log.columns}
    for row, (kind, record) in enumerate(items):
        expected = expected_row(kind, record)
        assert set(expected) <= set(columns), (kind, sorted(expected), sorted(columns))
        for name, values in columns.items():
            got = values[row]
            if name not in expected:
                assert got in (None, False), (kind, name, got)
                continue
            want, tolerance = expected[name]
            if isinstance(want, (str, bool)):
                assert got == want, (kind, name, got, want)
            elif math.isinf(want):
                assert got == want, (kind, name, got, want)
            else:
                assert got is not None and abs(got - want) <= tolerance * (1 + 1e-9) + 1e-12, (kind, name, got, want)


@given(st.lists(st.tuples(st.sampled_from(["text", "json", "dl4j"]), records(plain_names)), min_size=1, max_size=8))
def test_well_formed_lines_read_back_as_written(items):
    text = "".join(line_of(kind, record) + "\n" for kind, record in items)
    by_line, in_bulk = both_paths(text)
    assert_agree(by_line, in_bulk)
    assert_reads(by_line, items)


@given(records(), st.text(min_size=1, max_size=30))
def test_any_logger_prefix_cannot_change_the_records_fields(record, prefix):
    line = f"{prefix} ETL: 5 ms; iteration 999; " + format_line(record)
    log = parse_log([line])
    assert log.column("iteration") == [float(record.iteration)]


@st.composite
def cut_then_restarted(draw):
    """Well-formed lines; one of them cut in the middle (its writer crashed) and, on the same line with
    no newline between, the line a restarted writer wrote next; then more well-formed lines. The
    kinds: each file holds one writer's kind."""
    kind = draw(st.sampled_from(["text", "json", "dl4j"]))
    before = draw(st.lists(records(plain_names), max_size=3))
    cut_record, restarted = draw(records(plain_names)), draw(records(plain_names))
    after = draw(st.lists(records(plain_names), max_size=3))
    whole = line_of(kind, cut_record)
    # a text line is known as a listener line by its ``ETL:`` (a cut line without one is just text)
    # and the restarted line shows where it starts by its ``ETL:`` (a line without one, report_etl=False,
    # glued to a cut one reads as that cut line's text: its record is read, the cut is not counted)
    hypothesis.assume(kind == "json" or ("ETL: " in whole and "ETL: " in line_of(kind, restarted)))
    start = whole.find("ETL: ") + len("ETL: ") if kind != "json" else 1
    cut = whole[: draw(st.integers(start, len(whole) - 1))]
    if kind == "json":
        hypothesis.assume(not cut.endswith("}"))  # a cut JSON line is not a whole object
    return kind, before, cut, restarted, after


@given(cut_then_restarted())
def test_a_cut_line_followed_on_the_same_line_by_a_restarted_runs_line_is_one_cut_and_one_record(case):
    kind, before, cut, restarted, after = case
    lines = [line_of(kind, r) for r in before] + [cut + line_of(kind, restarted)] + [line_of(kind, r) for r in after]
    by_line, in_bulk = both_paths("\n".join(lines) + "\n")
    assert_agree(by_line, in_bulk)
    items = [(kind, r) for r in (*before, restarted, *after)]
    assert by_line.truncated == 1
    assert_reads(by_line, items)


@given(st.lists(st.tuples(st.sampled_from(["text", "json", "dl4j"]), records(plain_names)), min_size=1, max_size=6),
       st.sampled_from(["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"]))
def test_a_byte_order_mark_or_utf16_reads_as_the_same_log(items, encoding):
    text = "".join(line_of(kind, record) + "\n" for kind, record in items)
    by_line, in_bulk = both_paths(text.encode(encoding))
    assert_agree(by_line, in_bulk)
    assert_reads(by_line, items)
