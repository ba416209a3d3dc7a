"""The record's compiled writers against what they replace, on generated records: the text line
against the field table walked field by field, the JSON line against ``json_line(record.to_dict())``,
the CSV sink's cells against ``to_dict(flat=True)``. Any record, any value a field can hold (NaN,
infinities, integers in float fields, numpy numbers, odd strings), gives the same text."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import pytest

from _sink_records import fixed_records
from trainperf import GCStat, PerformanceRecord, Verdict, format_line
from trainperf.records import DL4J_FIELDS, TRAINPERF_FIELDS, json_line, json_of, line_of, record_json
from trainperf.records._format import MS_DECIMALS, capture_text, format_fixed, safe_name

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SUITE = settings(max_examples=60, derandomize=True, deadline=None, database=None)


def line_by_table(record: PerformanceRecord) -> str:
    """The line as the field table describes it: each field rendered in turn (the reference)."""
    parts = [f.render(value) for f in DL4J_FIELDS if (value := getattr(record, f.name)) is not None]
    if record.gc:
        parts.append("GC: " + ", ".join(
            f"[{safe_name(s.name)}: {s.count} ({format_fixed(s.ms, MS_DECIMALS)}ms)]" if s.ms is not None
            else f"[{safe_name(s.name)}: {s.count}]" for s in record.gc))
    padded = bool(record.padding_share)
    parts += [f.render(value) for f in TRAINPERF_FIELDS
              if (value := getattr(record, f.name)) is not None and not (f.hide_zero and value == 0)
              and (padded or not f.padded_only)]
    if record.warmup:
        parts.append("warm-up")
    if record.verdict is not None:
        share = f"{record.verdict.share:.0f}% at most: " if record.verdict.kind == "fine" else ""
        parts.append(f"verdict: {record.verdict.kind} ({share}{record.verdict.reason})")
    if record.capture is not None:
        parts.append(f"capture: {capture_text(record.capture)}")
    return "; ".join(parts) + ";"


def _numbers() -> st.SearchStrategy[Any]:
    floats = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0.0, -0.0, 1e-12, 0.0049, 0.05, 0.9999, 1.0, 9.995, 99.95, 1e21, -3.5]),
        st.floats(min_value=-1e6, max_value=1e6),
    )
    return st.one_of(floats, st.integers(-10**6, 10**6), st.builds(_numpy_float, floats))


def _numpy_float(value: float) -> Any:
    np = pytest.importorskip("numpy")
    return np.float64(value)


_FLOAT_FIELDS = [f.name for f in fields(PerformanceRecord) if f.type == "float | None"]
_INT_FIELDS = [f.name for f in fields(PerformanceRecord) if f.type == "int | None"]
_TEXT = st.text(max_size=12)


@st.composite
def records(draw: st.DrawFn) -> PerformanceRecord:
    values: dict[str, Any] = {
        name: draw(st.one_of(st.none(), _numbers())) for name in _FLOAT_FIELDS}
    values.update({name: draw(st.one_of(st.none(), st.integers(0, 2**64), st.booleans())) for name in _INT_FIELDS})
    gc = draw(st.lists(st.builds(GCStat, st.one_of(_TEXT, st.sampled_from(["gen0", "gen1"])), st.integers(0, 9),
                                 st.one_of(st.none(), _numbers())), max_size=3))
    verdict = draw(st.one_of(st.none(), st.builds(Verdict, st.sampled_from(["fine", "input-bound", "padding"]),
                                                  _numbers(), _TEXT)))
    return PerformanceRecord(
        iteration=draw(st.integers(0, 2**63)), window_iterations=draw(st.integers(0, 100)),
        window_s=draw(_numbers()), warmup=draw(st.booleans()), timestamp=draw(_numbers()), gc=tuple(gc),
        host=draw(_TEXT), pid=draw(st.integers(0, 2**22)), peak=draw(st.one_of(st.none(), _TEXT)),
        etl_source=draw(st.one_of(st.none(), _TEXT)), capture=draw(st.one_of(st.none(), _TEXT)),
        batches=draw(st.integers(0, 10)), optimizer_steps=draw(st.integers(0, 10)),
        skipped_steps=draw(st.integers(0, 3)), verdict=verdict,
        extra=draw(st.dictionaries(_TEXT, _numbers(), max_size=2)), **values)


@SUITE
@given(records())
def test_a_generated_records_json_line_is_json_line_of_to_dict(record: PerformanceRecord) -> None:
    try:
        expected = json_line(record.to_dict())
    except (TypeError, ValueError) as exc:  # what the old path cannot write, the new one refuses too
        with pytest.raises(type(exc)):
            record_json(record)
        return
    assert record_json(record) == expected


@SUITE
@given(records())
def test_a_generated_records_text_line_is_the_field_table_rendered_in_turn(record: PerformanceRecord) -> None:
    try:
        expected = line_by_table(record)
    except (TypeError, ValueError, OverflowError) as exc:
        with pytest.raises(type(exc)):
            format_line(record)
        return
    assert format_line(record) == expected


def test_the_fixed_records_give_the_same_text_both_ways() -> None:
    for record in fixed_records():
        assert format_line(record) == line_by_table(record)
        assert record_json(record) == json_line(record.to_dict())


def test_a_records_text_is_made_once_for_every_sink_and_never_mixed_up() -> None:
    record = fixed_records()[3]
    first = json_of(record)
    assert json_of(record) is first  # the second sink has the text made for the first
    other = replace(record, iteration=record.iteration + 1)
    assert json_of(other) != first and line_of(other) != line_of(record)
    many = [replace(record, iteration=i) for i in range(200)]  # more than the memo holds
    texts = [json_of(r) for r in many]
    assert texts == [record_json(r) for r in many]
    assert [json_of(r) for r in many[-10:]] == texts[-10:]


@SUITE
@given(records())
def test_a_generated_records_csv_cells_are_those_of_the_flat_dict(record: PerformanceRecord) -> None:
    from trainperf.sinks import CSV_COLUMNS
    from trainperf.sinks._csv import _cell, _cells

    record = replace(record, extra={})  # extra's keys are columns of their own, written by the general path
    row = record.to_dict(flat=True)
    assert _cells(record) == [_cell(row.get(k)) for k in CSV_COLUMNS] or _nan_same(
        _cells(record), [_cell(row.get(k)) for k in CSV_COLUMNS])


def _nan_same(a: list[Any], b: list[Any]) -> bool:
    """Equal, a NaN equal to a NaN (the csv module writes both as ``nan``)."""
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b, strict=True))


def test_a_value_strict_json_cannot_hold_is_refused_as_before() -> None:
    record = replace(fixed_records()[0], extra={"sizes": [1.0, float("nan")]})  # not a figure: NaN in a list
    with pytest.raises(ValueError, match="JSON compliant"):
        json_line(record.to_dict())
    with pytest.raises(ValueError, match="JSON compliant"):
        record_json(record)


def test_the_line_still_refuses_what_is_no_record() -> None:
    with pytest.raises(TypeError, match="record must be a PerformanceRecord"):
        format_line({"iteration": 1})  # type: ignore[arg-type]
