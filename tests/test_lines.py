"""The line reader's edges with hand-written lines: numbers past a float, an iteration's range, the
collectors a line may name, what a JSON line's fields become."""

from __future__ import annotations

import json
import math

import pytest

from trainperf.logs._lines import MAX_COLLECTORS, parse_json_line, read_number


@pytest.mark.parametrize(("text", "value"), [
    ("1e999", None), ("-1e999", None), ("+1e999", None),  # digits past a float are not infinity
    ("inf", math.inf), ("-inf", -math.inf), ("Infinity", math.inf), ("-Infinity", -math.inf),
    ("2.5", 2.5), ("+3", 3.0), ("-0.5e1", -5.0), ("1e308", 1e308),
])
def test_numbers_and_infinities(text, value):
    assert read_number(text) == value


def line(**fields) -> str:
    return json.dumps({"iteration": 1, **fields})


@pytest.mark.parametrize(("iteration", "read"), [
    (0, True), (2**63 - 1, True), (-1, False), (2**63, False), (True, False), (1.0, False), ("1", False),
])
def test_a_json_lines_iteration_is_a_whole_number_from_0_below_2_to_the_63(iteration, read):
    parsed = parse_json_line(json.dumps({"iteration": iteration, "etl_ms": 1.0}))
    assert (parsed is not None) is read
    if read:
        assert parsed["iteration"] == iteration


def test_a_json_line_names_at_most_64_collectors():
    assert MAX_COLLECTORS == 64

    def gc(n):
        return {f"c{k}": {"count": k, "ms": 1.0} for k in range(n)}

    at = parse_json_line(line(gc=gc(64)))
    assert at is not None and at["gc.c63.count"] == 63
    assert parse_json_line(line(gc=gc(65))) is None


def test_collectors_with_empty_names_or_no_figures_are_skipped():
    parsed = parse_json_line(line(gc={"": {"count": 1}, "old": 5, "young": {"count": 2, "ms": 1.5}}))
    assert parsed is not None
    assert {k: v for k, v in parsed.items() if k.startswith("gc.")} == {"gc.young.count": 2, "gc.young.ms": 1.5}


def test_unknown_fields_are_read_only_when_they_are_numbers():
    parsed = parse_json_line(line(custom_ms=2.5, note="12", flag=True, listed=[1, 2]))
    assert parsed is not None
    assert parsed.get("custom_ms") == 2.5
    assert "note" not in parsed and "flag" not in parsed and "listed" not in parsed


def test_a_verdict_is_read_from_its_kind_and_share():
    parsed = parse_json_line(line(verdict={"kind": "input-bound", "share": 31.5, "reason": "x"}))
    assert parsed is not None and (parsed["verdict"], parsed["verdict_pct"]) == ("input-bound", 31.5)
    bad = parse_json_line(line(verdict={"kind": "Input Bound!", "share": 1}))
    assert bad is not None and "verdict" not in bad and bad["verdict_pct"] == 1  # not a kind: left out
