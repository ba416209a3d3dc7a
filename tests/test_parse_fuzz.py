"""Property tests of ``parse_log``: random bytes, mutated and hostile logs of all three formats
(truncated and glued lines, restarts, garbage bytes, huge numbers, NaN, missing and reordered
fields) never make it raise, its two paths (line by line, and in bulk for long logs) return the
same columns in the same order and the same rows, and the figures of well-formed lines read back
as written.

The test suite runs a few examples of each property, the same ones on every run. The long run,
``pytest -m long tests/test_parse_fuzz.py -s`` (or ``python benchmarks/parse_fuzz.py``), runs
:data:`PROPERTIES`' counts, over 25,000 inputs, new ones on every run, and prints for each property
how many inputs it read, in how long, how many made a path raise and how many the paths read apart.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, replace
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("pandas")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from _parse_paths import assert_agree, both_paths  # noqa: E402
from trainperf import GCStat, ParsedLog, PerformanceRecord, Verdict, format_line  # noqa: E402
from trainperf.records import DL4J_FIELDS, TRAINPERF_FIELDS  # noqa: E402
from trainperf.records._json import json_line as strict_json_line  # noqa: E402

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
#: The test suite's examples: few, and the same on every run.
SUITE = settings(max_examples=40, derandomize=True, deadline=None, database=None, print_blob=True,
                 suppress_health_check=_QUIET)
#: The long run's: new ones on every run (counts per property in :data:`PROPERTIES`).
LONG = settings(deadline=None, database=None, print_blob=True, suppress_health_check=_QUIET)


@dataclass
class Tally:
    """What the paths made of the inputs of one property: how many were read, how many made a path
    raise, and how many the two paths read apart."""

    inputs: int = 0
    exceptions: int = 0
    disagreements: int = 0

    def read(self, text: str | bytes) -> ParsedLog:
        """``text`` read on both paths, which must neither raise nor disagree; the line path's result."""
        self.inputs += 1
        try:
            by_line, in_bulk = both_paths(text)
        except Exception:
            self.exceptions += 1
            raise
        try:
            assert_agree(by_line, in_bulk)
        except AssertionError:
            self.disagreements += 1
            raise
        return by_line


# --- records and their lines -------------------------------------------------------------------

finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
maybe_finite = st.one_of(finite, st.none())
score = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.none())
names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
#: Collector names as Deeplearning4j and Python's generations have them (what a well-formed line holds).
plain_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_ -]{0,10}[A-Za-z0-9]", fullmatch=True)
_KINDS = st.sampled_from(["fine", "input-bound", "gc-bound", "loop-bound", "cpu-contention"])
_SHARES = st.floats(0, 100)
#: Reasons as the verdicts write them: a share first or not, brackets, ``;`` and ``:`` inside.
_REASONS = st.sampled_from([
    "reason", "{share:.0f}% of step waiting for data",
    "{share:.0f}% of step waiting for data (workers at 180%; the step got 95% of a core): add workers",
    "the training process (95%) and its workers (180%) use 100% of the 2 cores; the step got 95%: compete",
])
_CAPTURES = st.one_of(st.none(), st.sampled_from(["/tmp/trace-10.json", "run (2)/trace.json"]))
_ITERATIONS = st.integers(1, 10**9)
#: Collectors, with any names or with plain ones.
_GC_STATS = {
    plain: st.lists(st.builds(GCStat, plain_names if plain else names, st.integers(0, 10**6), maybe_finite),
                    max_size=3, unique_by=lambda s: s.name).map(tuple)
    for plain in (False, True)
}


@st.composite
def verdicts(draw):
    if draw(st.integers(0, 3)) == 0:
        return None
    share = draw(_SHARES)
    return Verdict(draw(_KINDS), share, draw(_REASONS).format(share=share))


_VERDICTS = verdicts()


@st.composite
def records(draw, plain_names: bool = False):
    """A record with any of the fields a line can hold."""
    return PerformanceRecord(
        iteration=draw(_ITERATIONS), window_iterations=draw(st.integers(1, 1000)), window_s=draw(finite),
        warmup=draw(st.booleans()), timestamp=draw(finite), etl_ms=draw(maybe_finite), iteration_ms=draw(finite),
        samples_per_sec=draw(maybe_finite), batches_per_sec=draw(finite), score=draw(score),
        gc=draw(_GC_STATS[plain_names]), epoch=draw(st.one_of(st.none(), st.integers(0, 999))),
        tokens_per_sec=draw(maybe_finite), iteration_p95_ms=draw(maybe_finite), etl_max_ms=draw(maybe_finite),
        other_ms=draw(maybe_finite), rank=draw(st.one_of(st.none(), st.integers(0, 7))),
        skipped_steps=draw(st.sampled_from([0, 0, 2])), capture=draw(_CAPTURES), verdict=draw(_VERDICTS),
    )


_RECORDS = records()
_PLAIN_RECORDS = records(plain_names=True)


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


LINE_KINDS = st.sampled_from(["text", "json", "dl4j"])


# --- what a well-formed line must read back as ---------------------------------------------------

def _text_figures(record: PerformanceRecord) -> dict[str, tuple[float, float]]:
    """What each field of trainperf's text line reads: value and tolerance, from the line's field table."""
    out: dict[str, tuple[float, float]] = {}
    for f in (*DL4J_FIELDS, *TRAINPERF_FIELDS):
        value = getattr(record, f.name)
        if value is None or (f.hide_zero and value == 0) or (isinstance(value, float) and math.isnan(value)):
            continue
        if f.integer:
            out[f.name] = (float(value), 0.0)
        elif f.decimals is not None:
            out[f.name] = (float(value), 0.5 * 10**-f.decimals + 1e-9)
        else:  # three significant digits at least
            out[f.name] = (float(value), abs(value) * 0.005 + 0.0005)
    for stat in record.gc:
        out[f"gc.{stat.name}.count"] = (float(stat.count), 0.0)
        if stat.ms is not None:
            out[f"gc.{stat.name}.ms"] = (stat.ms, 0.005 + 1e-9)
    return out


def expected_row(kind: str, record: PerformanceRecord) -> dict[str, tuple[float | str | bool, float]]:
    """What each column must read for ``record``'s line: value and tolerance (columns not named must
    read as missing)."""
    out: dict[str, tuple[float | str | bool, float]] = {"iteration": (float(record.iteration), 0.0)}
    if kind == "json":
        for key, value in record.to_dict(flat=True).items():
            if key in ("warmup", "verdict") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isnan(value):
                out[key] = (float(value), 0.0)
    elif kind == "dl4j":
        written = (("etl_ms", record.etl_ms or 0), ("iteration_ms", record.iteration_ms),
                   ("samples_per_sec", record.samples_per_sec or 0), ("batches_per_sec", record.batches_per_sec))
        for key, value in written:
            out[key] = (float(value), 0.5 if key.endswith("ms") else 0.0005)
        if record.score is not None and not math.isnan(record.score):
            out["score"] = (record.score, abs(record.score) * 1e-12)
        for stat in record.gc:
            out[f"gc.{stat.name}.count"] = (float(stat.count), 0.0)
            out[f"gc.{stat.name}.ms"] = (float(stat.ms or 0), 0.5)
    else:
        out.update(_text_figures(record))
        if record.verdict is not None:
            if record.verdict.kind == "fine":  # the line states a fine verdict's share first, to the percent
                out["verdict_pct"] = (float(f"{record.verdict.share:.0f}"), 0.0)
            elif share := re.match(r"(\d+)%", record.verdict.reason):
                out["verdict_pct"] = (float(share.group(1)), 0.0)
    if record.verdict is not None and kind != "dl4j":
        out["verdict"] = (record.verdict.kind, 0.0)
    if record.warmup and kind != "dl4j":
        out["warmup"] = (True, 0.0)
    return out


def assert_reads(log: ParsedLog, items: list[tuple[str, PerformanceRecord]]) -> None:
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
            if isinstance(want, (str, bool)) or math.isinf(want):
                assert got == want, (kind, name, got, want)
            else:
                assert got is not None and abs(got - want) <= tolerance * (1 + 1e-9) + 1e-12, (kind, name, got, want)


def runs_of(iterations: list[int]) -> list[int]:
    """Each row's run: a new one wherever the iteration does not go up (a restart)."""
    runs = [0]
    for before, now in zip(iterations, iterations[1:], strict=False):
        runs.append(runs[-1] + (now <= before))
    return runs[: len(iterations)]


# --- inputs --------------------------------------------------------------------------------------

HOSTILE = ["\x1f", "\r", "\n", ";", "ETL: 5 ms; iteration 999;", "{", "}", '"', "\\", "\x00", "true", "[", "]",
           "iteration 7;", " ", "NaN", "1e999", "é", "\u2028"]


@st.composite
def mutated(draw, kind: str):
    """A line with a few characters inserted, cut or dropped."""
    text = line_of(kind, draw(_RECORDS))
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
any_text = st.lists(log_lines, max_size=12)

#: Numbers no writer should produce but a log may hold.
HUGE = ["1e400", "9" * 400, "1.7976931348623157e309", "18446744073709551616", "-0", "NaN", "nan", "Infinity",
        "-Infinity", "inf", "1.0E-5", "00012", "1e-400", "0x1F", "1_000", "١٢"]
#: Values a JSON record's field may hold instead of its number.
HOSTILE_VALUES = [float("nan"), float("inf"), -float("inf"), 10**400, -0.0, 2**63, 2**64, "NaN", "Infinity", "1e5",
                  True, None, [1], {"a": 1}, "", "9" * 400]
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@st.composite
def restarted_iterations(draw):
    """Iterations that go up window by window and go back where a run restarted."""
    out: list[int] = []
    for restart, step in draw(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 200)), min_size=1, max_size=8)):
        out.append(step if not out or restart == 0 else out[-1] + step)
    return out


def broken_text_line(draw: Any, line: str) -> str:
    """A text line with fields dropped, duplicated or swapped, or a number made huge or NaN."""
    head, sep, body = line.partition(" - ")
    prefix = head + sep if sep else ""
    fields = (body if sep else line).split("; ")
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["drop", "duplicate", "swap", "number"]))
        i, j = draw(st.integers(0, len(fields) - 1)), draw(st.integers(0, len(fields) - 1))
        if action == "drop" and len(fields) > 1:
            del fields[i]
        elif action == "duplicate":
            fields.insert(j, fields[i])
        elif action == "swap":
            fields[i], fields[j] = fields[j], fields[i]
        elif numbers := list(_NUMBER.finditer(fields[i])):
            found = numbers[draw(st.integers(0, len(numbers) - 1))]
            fields[i] = fields[i][: found.start()] + draw(st.sampled_from(HUGE)) + fields[i][found.end() :]
    return prefix + "; ".join(fields)


def broken_json_line(draw: Any, record: PerformanceRecord) -> str:
    """A JSON record with keys dropped, reordered or duplicated, or a value made huge, NaN or not a number."""
    obj: dict[str, Any] = record.to_dict()
    keys = list(obj)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["drop", "reorder", "value", "duplicate"]))
        key = draw(st.sampled_from(keys))
        if action == "drop" and key != "iteration":
            obj.pop(key, None)
        elif action == "reorder":
            order = draw(st.permutations(list(obj)))
            obj = {k: obj[k] for k in order}
        elif action == "value":
            obj[key] = draw(st.sampled_from(HOSTILE_VALUES))
        else:  # a key written twice: JSON readers keep the last
            text = json.dumps(obj)
            return '{"' + key + '": ' + json.dumps(draw(st.sampled_from(HOSTILE_VALUES))) + ", " + text[1:]
    return json.dumps(obj)  # NaN and infinities as Python writes them, which strict JSON has not


@st.composite
def hostile_logs(draw) -> bytes:
    """A log of several runs (the iteration goes back at each restart) of any of the three kinds,
    line by line, whose lines may be broken (fields dropped, duplicated, reordered; huge, NaN or
    non-numeric numbers), cut, glued to the next, or hold garbage bytes."""
    lines: list[str] = []
    for iteration in draw(restarted_iterations()):
        kind = draw(LINE_KINDS)
        record = replace(draw(_RECORDS), iteration=iteration)
        line = line_of(kind, record)
        if draw(st.integers(0, 2)) == 0:
            line = broken_json_line(draw, record) if kind == "json" else broken_text_line(draw, line)
        lines.append(line)
    data = b""
    for i, line in enumerate(lines):
        raw = line.encode("utf-8", errors="surrogatepass")
        action = draw(st.sampled_from(["whole", "whole", "whole", "cut", "glue", "cut and glue", "garbage", "crlf"]))
        if "cut" in action:
            raw = raw[: draw(st.integers(0, len(raw)))]
        if action == "garbage":
            at = draw(st.integers(0, len(raw)))
            raw = raw[:at] + draw(st.binary(min_size=1, max_size=12)) + raw[at:]
        end = b"\r\n" if action == "crlf" else b"\n"
        data += raw + (b"" if "glue" in action and i + 1 < len(lines) else end)
    return data


@st.composite
def cut_then_restarted(draw):
    """Well-formed lines; one of them cut in the middle (its writer crashed) and, on the same line with
    no newline between, the line a restarted writer wrote next; then more well-formed lines. The
    kinds: each file holds one writer's kind."""
    kind = draw(LINE_KINDS)
    before = draw(st.lists(_PLAIN_RECORDS, max_size=3))
    cut_record, restarted = draw(_PLAIN_RECORDS), draw(_PLAIN_RECORDS)
    after = draw(st.lists(_PLAIN_RECORDS, max_size=3))
    whole = line_of(kind, cut_record)
    # a text line is known as a listener line by its ``ETL:`` (a cut line without one is just text)
    # and the restarted line shows where it starts by its ``ETL:`` (a line without one, report_etl=False,
    # glued to a cut one is read, but the cut is not counted: see test_parse_hostile.py)
    hypothesis.assume(kind == "json" or ("ETL: " in whole and "ETL: " in line_of(kind, restarted)))
    start = whole.find("ETL: ") + len("ETL: ") if kind != "json" else 1
    cut = whole[: draw(st.integers(start, len(whole) - 1))]
    if kind == "json":
        hypothesis.assume(not cut.endswith("}"))  # a cut JSON line is not a whole object
    return kind, before, cut, restarted, after


well_formed = st.lists(st.tuples(LINE_KINDS, _PLAIN_RECORDS), min_size=1, max_size=8)
with_restarts = st.tuples(restarted_iterations(), st.lists(st.tuples(LINE_KINDS, _PLAIN_RECORDS), min_size=8,
                                                            max_size=8))
prefixed = st.tuples(_RECORDS, st.text(min_size=1, max_size=30))
encoded = st.tuples(st.lists(st.tuples(LINE_KINDS, _PLAIN_RECORDS), min_size=1, max_size=6),
                    st.sampled_from(["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"]))


# --- the properties ------------------------------------------------------------------------------

def check_any_text(lines: list[str], tally: Tally) -> None:
    tally.read("\n".join(lines) + "\n")


def check_hostile_log(data: bytes, tally: Tally) -> None:
    tally.read(data)


def check_well_formed(items: list[tuple[str, PerformanceRecord]], tally: Tally) -> None:
    assert_reads(tally.read("".join(line_of(kind, record) + "\n" for kind, record in items)), items)


def check_restarts(case: tuple[list[int], list[tuple[str, PerformanceRecord]]], tally: Tally) -> None:
    iterations, drawn = case
    items = [(kind, replace(record, iteration=i)) for i, (kind, record) in zip(iterations, drawn, strict=False)]
    log = tally.read("".join(line_of(kind, record) + "\n" for kind, record in items))
    assert_reads(log, items)
    runs = log.to_pandas()["run"].tolist()
    if "rank" not in log.columns or len(set(log.column("rank"))) == 1:  # ranks are runs of their own
        assert runs == runs_of(iterations)


def check_prefix(case: tuple[PerformanceRecord, str], tally: Tally) -> None:
    record, prefix = case
    log = tally.read(f"{prefix} ETL: 5 ms; iteration 999; " + format_line(record) + "\n")
    assert log.column("iteration") == [float(record.iteration)]


def check_cut_then_restarted(case: tuple[Any, ...], tally: Tally) -> None:
    kind, before, cut, restarted, after = case
    lines = [line_of(kind, r) for r in before] + [cut + line_of(kind, restarted)] + [line_of(kind, r) for r in after]
    log = tally.read("\n".join(lines) + "\n")
    assert log.truncated == 1
    assert_reads(log, [(kind, r) for r in (*before, restarted, *after)])


def check_encoded(case: tuple[list[tuple[str, PerformanceRecord]], str], tally: Tally) -> None:
    items, encoding = case
    text = "".join(line_of(kind, record) + "\n" for kind, record in items)
    assert_reads(tally.read(text.encode(encoding)), items)


#: Each property: its inputs, its check, and how many inputs the long run reads (26,000 in all).
PROPERTIES = {
    "any text": (any_text, check_any_text, 5_000),
    "hostile logs": (hostile_logs(), check_hostile_log, 8_000),
    "well-formed lines": (well_formed, check_well_formed, 3_000),
    "restarts": (with_restarts, check_restarts, 2_000),
    "logger prefixes": (prefixed, check_prefix, 2_000),
    "cut and glued lines": (cut_then_restarted(), check_cut_then_restarted, 4_000),
    "byte-order marks and UTF-16": (encoded, check_encoded, 2_000),
}


@SUITE
@given(any_text)
def test_any_text_is_read_alike_on_both_paths_without_raising(lines):
    check_any_text(lines, Tally())


@SUITE
@given(hostile_logs())
def test_hostile_logs_of_several_runs_are_read_alike_on_both_paths_without_raising(data):
    check_hostile_log(data, Tally())


@SUITE
@given(well_formed)
def test_well_formed_lines_read_back_as_written(items):
    check_well_formed(items, Tally())


@SUITE
@given(with_restarts)
def test_each_restart_starts_a_new_run_and_every_line_reads_back(case):
    check_restarts(case, Tally())


@SUITE
@given(prefixed)
def test_any_logger_prefix_cannot_change_the_records_fields(case):
    check_prefix(case, Tally())


@SUITE
@given(cut_then_restarted())
def test_a_cut_line_followed_on_the_same_line_by_a_restarted_runs_line_is_one_cut_and_one_record(case):
    check_cut_then_restarted(case, Tally())


@SUITE
@given(encoded)
def test_a_byte_order_mark_or_utf16_reads_as_the_same_log(case):
    check_encoded(case, Tally())


def test_the_long_run_reads_over_25000_inputs():
    assert sum(examples for _, _, examples in PROPERTIES.values()) >= 25_000


@pytest.mark.long
@pytest.mark.parametrize("name", list(PROPERTIES))
def test_long_run(name):
    """Many more inputs, new on every run (``TRAINPERF_FUZZ_EXAMPLES`` sets how many per property)."""
    strategy, check, examples = PROPERTIES[name]
    examples = int(os.environ.get("TRAINPERF_FUZZ_EXAMPLES", examples))
    tally = Tally()
    started = time.perf_counter()
    try:
        settings(LONG, max_examples=examples)(given(strategy)(lambda case: check(case, tally)))()
    finally:
        print(f"\nfuzz: {name}: {tally.inputs} inputs in {time.perf_counter() - started:.0f} s, "
              f"{tally.exceptions} exceptions, {tally.disagreements} disagreements")
    assert tally.inputs >= examples and tally.exceptions == tally.disagreements == 0
