"""The tables ``trainperf parse`` writes, function by function (the command's tests run it in a child)."""

from __future__ import annotations

import io
import json
import math

import pytest

from trainperf import parse_log
from trainperf.cli._tables import Table, csv_table, log_table, write_csv, write_json_lines


def test_a_logs_table_has_its_columns_in_order_whole_numbers_as_ints_and_its_runs():
    lines = [json.dumps({"iteration": i, "window_iterations": 2, "samples": 64, "etl_ms": 1.5, "rank": r,
                         "gc": {"gen0": {"count": 3, "ms": 0.5}}}) for r, i in ((0, 2), (1, 2), (0, 4), (0, 2))]
    table = log_table(parse_log(lines))
    assert table.columns[0] == "iteration" and table.columns[-3:] == ["gc.gen0.count", "gc.gen0.ms", "run"]
    rows = [dict(zip(table.columns, row, strict=True)) for row in table.rows]
    assert [type(r["iteration"]) for r in rows] == [int] * 4 and rows[0]["gc.gen0.count"] == 3
    assert isinstance(rows[0]["gc.gen0.ms"], float) and isinstance(rows[0]["etl_ms"], float)
    assert [r["run"] for r in rows] == [0, 1, 0, 2]  # rank 0 restarted at its fourth line
    assert len(table) == 4


def test_a_fraction_or_a_huge_value_in_a_whole_number_column_stays_a_float():
    table = log_table(parse_log([json.dumps({"iteration": 2, "epoch": 2.5, "samples": 2.0**63}),
                                 json.dumps({"iteration": 4, "epoch": 3, "samples": 2.0**62})]))
    rows = [dict(zip(table.columns, row, strict=True)) for row in table.rows]
    assert rows[0]["epoch"] == 2.5 and isinstance(rows[1]["epoch"], int)
    assert isinstance(rows[0]["samples"], float) and rows[1]["samples"] == 2**62 and isinstance(rows[1]["samples"], int)


def test_csv_and_json_lines_write_missing_as_empty_and_null_and_infinities_as_words():
    table = Table(["iteration", "score", "ok", "note"], [[1, math.inf, True, None], [2, -math.inf, False, "x"],
                                                        [3, math.nan, None, ""]])
    out = io.StringIO()
    write_csv(table, out)
    assert out.getvalue().splitlines() == ["iteration,score,ok,note", "1,inf,True,", "2,-inf,False,x", "3,,,"]
    out = io.StringIO()
    write_json_lines(table, out)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"iteration": 1, "score": "Infinity", "ok": True, "note": None},
        {"iteration": 2, "score": "-Infinity", "ok": False, "note": "x"},
        {"iteration": 3, "score": None, "ok": None, "note": ""},
    ]
    assert '"iteration":1,' in out.getvalue()  # compact, as the JSON lines sink writes


def test_a_csv_sink_file_reads_with_numbers_as_numbers_and_cut_rows_left_out():
    text = ("iteration,etl_ms,warmup,verdict,host,big\n2,1.5,True,fine,node01,1e20\n4,,False,,n,7\n6,2.0\n"
            "8,1,True,fine,n,1,extra\n10,1,False,fine,n,2\n")
    table = csv_table(io.StringIO(text), "perf.csv")
    assert table.columns == ["iteration", "etl_ms", "warmup", "verdict", "host", "big"]
    assert table.rows == [[2, 1.5, True, "fine", "node01", 1e20], [4, None, False, None, "n", 7],
                          [10, 1, False, "fine", "n", 2]]
    assert isinstance(table.rows[0][0], int) and isinstance(table.rows[0][5], float)
    for bad in ("", "etl_ms,score\n1,2\n"):
        with pytest.raises(ValueError, match="perf.csv: no 'iteration' column, so no listener records"):
            csv_table(io.StringIO(bad), "perf.csv")


def test_a_whole_value_beyond_int64_and_an_exponent_in_a_csv_cell_stay_floats():
    table = log_table(parse_log([json.dumps({"iteration": 2, "samples": 1e19})]))
    row = dict(zip(table.columns, table.rows[0], strict=True))
    assert isinstance(row["samples"], float) and row["samples"] == 1e19
    cells = csv_table(io.StringIO("iteration,x,y\n2,1e5,3.0\n"), "t.csv").rows[0]
    assert cells == [2, 1e5, 3.0] and isinstance(cells[1], float) and isinstance(cells[2], float)


def test_a_collector_without_pause_times_gets_an_empty_ms_column_on_the_bulk_path():
    from _parse_paths import both_paths

    line = "ETL: 1 ms; iteration {}; iteration time: 2 ms; GC: [cuda_alloc_retries: 1];\n"
    _, in_bulk = both_paths("".join(line.format(i) for i in range(1, 4)))
    table = log_table(in_bulk)
    rows = [dict(zip(table.columns, row, strict=True)) for row in table.rows]
    assert [r["gc.cuda_alloc_retries.count"] for r in rows] == [1, 1, 1]
    assert [r["gc.cuda_alloc_retries.ms"] for r in rows] == [None, None, None]
