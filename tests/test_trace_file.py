"""A capture's trace file: the rank first with the spacing Holistic Trace Analysis reads, the size
cap kept by leaving out the shortest host events, written whole."""

from __future__ import annotations

import gzip
import json
import random
import re

import pytest

from trainperf.profile._trace_file import encode_trace, finish_trace, fit_trace


def trace(n_ops: int, *, seed: int = 0) -> dict:
    rng = random.Random(seed)
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for it in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{10 + it}", "pid": 1, "tid": 1,
                       "ts": it * 1000.0, "dur": 1000.0})
    for k in range(n_ops):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{rng.randrange(10**6)}", "pid": 1, "tid": 1,
                       "ts": rng.uniform(0, 3000), "dur": float(k + 1), "args": {"seq": rng.random()}})
    events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 5.0, "dur": 0.5})
    return {"schemaVersion": 1, "traceEvents": events}


def names(data: dict) -> list[str]:
    return [e["name"] for e in data["traceEvents"]]


def test_a_trace_under_the_cap_is_written_as_it_is():
    data = trace(50)
    blob, trimmed = fit_trace(data, 10**7)
    assert trimmed == 0 and json.loads(gzip.decompress(blob)) == data


def test_a_trace_over_the_cap_loses_its_shortest_host_events_first_and_keeps_markers_and_kernels():
    data = trace(5000)
    full = len(encode_trace(data))
    cap = full // 3
    blob, trimmed = fit_trace(data, cap)
    assert len(blob) <= cap and trimmed > 0
    kept = json.loads(gzip.decompress(blob))
    assert kept["trainperf"]["trimmed_events"] == trimmed
    assert len(kept["traceEvents"]) == len(data["traceEvents"]) - trimmed
    assert {"ProfilerStep#10", "ProfilerStep#11", "ProfilerStep#12", "gemm", "process_name"} <= set(names(kept))
    # the host ops' durations are 1..5000: the ones left out are exactly the shortest
    assert sorted(e["dur"] for e in kept["traceEvents"] if e.get("cat") == "cpu_op") == [
        float(d) for d in range(trimmed + 1, 5001)]


def test_the_fewest_events_are_left_out():
    data = trace(3000)
    cap = len(encode_trace(data)) // 2
    _, trimmed = fit_trace(data, cap)
    events = data["traceEvents"]
    order = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: e["dur"])
    one_fewer = [e for e in events if e not in order[: trimmed - 1]]
    smaller = dict(data, traceEvents=one_fewer, trainperf={"trimmed_events": trimmed - 1})
    assert len(encode_trace(smaller)) > cap


def test_device_events_go_only_after_every_host_event():
    data = trace(200)
    markers_only = dict(data, traceEvents=[e for e in data["traceEvents"]
                                           if e["ph"] == "M" or e["name"].startswith("ProfilerStep")],
                        trainperf={"trimmed_events": 201})
    cap = len(encode_trace(markers_only))
    blob, trimmed = fit_trace(data, cap)
    assert trimmed == 201 and "gemm" not in names(json.loads(gzip.decompress(blob)))


def test_a_trace_whose_markers_alone_pass_the_cap_is_refused():
    with pytest.raises(ValueError, match="over the cap of 100 even with only its step markers"):
        fit_trace(trace(100), 100)
    with pytest.raises(ValueError, match="has no events to trim"):
        fit_trace({"traceEvents": None, "pad": random.Random(1).randbytes(3000).hex()}, 100)


def test_finish_puts_the_rank_first_with_a_space_after_the_colon(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(trace(10), separators=(",", ":")))
    out = tmp_path / "rank3-iter10-12.pt.trace.json.gz"
    written = finish_trace(raw, out, rank=3, world_size=4, meta={"reason": "r"}, max_bytes=10**6)
    text = gzip.decompress(out.read_bytes()).decode()
    assert written.size == out.stat().st_size and written.trimmed == 0
    assert text.startswith('{"distributedInfo": {"backend": "none", "rank": 3, "world_size": 4}')
    assert re.search(r'"rank":\s+(\d+)', text).group(1) == "3"
    assert json.loads(text)["trainperf"] == {"reason": "r"}
    assert set(tmp_path.iterdir()) == {raw, out}  # no temporary file left


def test_finish_keeps_the_profilers_own_distributed_info(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(dict(trace(1), distributedInfo={"backend": "nccl", "rank": 5, "world_size": 8})))
    out = tmp_path / "t.json.gz"
    finish_trace(raw, out, rank=1, world_size=2, meta={}, max_bytes=10**6)
    assert json.loads(gzip.decompress(out.read_bytes()))["distributedInfo"] == {
        "backend": "nccl", "rank": 5, "world_size": 8}
    raw.write_text(json.dumps(trace(1)))
    finish_trace(raw, out, rank=None, world_size=None, meta={}, max_bytes=10**6)
    assert json.loads(gzip.decompress(out.read_bytes()))["distributedInfo"] == {"backend": "none", "rank": 0}


def test_finish_refuses_what_is_not_a_trace_and_leaves_no_file(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not a JSON object"):
        finish_trace(raw, tmp_path / "t.json.gz", rank=0, world_size=None, meta={}, max_bytes=10**6)
    raw.write_text(json.dumps(trace(100)))
    with pytest.raises(ValueError, match="even with only its step markers"):
        finish_trace(raw, tmp_path / "t.json.gz", rank=0, world_size=None, meta={}, max_bytes=50)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.json"]


def test_when_leaving_out_one_event_is_enough_only_that_one_goes():
    data = trace(0)
    data["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "big",
                                "args": {"pad": random.Random(2).randbytes(4000).hex()}, "ts": 1.0, "dur": 9.0})
    without_big = dict(data, traceEvents=data["traceEvents"][:-1], trainperf={"trimmed_events": 1})
    blob, trimmed = fit_trace(data, len(encode_trace(without_big)) + 10)
    assert trimmed == 1 and "big" not in names(json.loads(gzip.decompress(blob)))


def test_events_without_a_numeric_duration_count_as_the_shortest():
    data = trace(0)
    pad = random.Random(3).randbytes(300).hex()
    data["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": "short", "ts": 1.0, "dur": 0.5, "args": {"pad": pad}},
        {"ph": "X", "cat": "cpu_op", "name": "no-dur", "ts": 1.0, "args": {"pad": pad}},
        {"ph": "X", "cat": "cpu_op", "name": "text-dur", "ts": 1.0, "dur": "7", "args": {"pad": pad}},
        {"ph": "X", "cat": "kernel", "name": "tiny-kernel", "ts": 1.0, "dur": 0.0, "args": {"pad": pad}},
    ]
    kept_three = [e for e in data["traceEvents"] if e["name"] not in ("no-dur", "text-dur")]
    cap = len(encode_trace(dict(data, traceEvents=kept_three, trainperf={"trimmed_events": 2}))) + 5
    blob, trimmed = fit_trace(data, cap)
    assert trimmed == 2
    assert {"short", "tiny-kernel"} <= set(names(json.loads(gzip.decompress(blob))))


def test_a_trace_exactly_at_the_cap_fits_and_counter_events_can_go():
    data = trace(0)
    pad = random.Random(4).randbytes(400).hex()
    data["traceEvents"].append({"ph": "C", "name": "memory", "ts": 1.0, "pid": 1, "args": {"pad": pad}})
    without = dict(data, traceEvents=data["traceEvents"][:-1], trainperf={"trimmed_events": 1})
    cap = len(encode_trace(without))
    blob, trimmed = fit_trace(data, cap)  # leaving the counter out fits exactly
    assert trimmed == 1 and len(blob) == cap
    assert "memory" not in names(json.loads(gzip.decompress(blob)))


def test_a_trace_holding_nan_is_refused_rather_than_written_as_invalid_json(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1}]}')
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        finish_trace(raw, tmp_path / "t.json.gz", rank=0, world_size=None, meta={}, max_bytes=10**6)


def test_a_trace_exactly_the_cap_is_written_whole():
    data = trace(30)
    cap = len(encode_trace(data))
    blob, trimmed = fit_trace(data, cap)
    assert trimmed == 0 and len(blob) == cap


def test_what_was_written_cannot_be_changed(tmp_path):
    import dataclasses

    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(trace(2)))
    written = finish_trace(raw, tmp_path / "t.json.gz", rank=0, world_size=None, meta={}, max_bytes=10**6)
    with pytest.raises(dataclasses.FrozenInstanceError):
        written.size = 0  # type: ignore[misc]


def test_markers_after_the_last_traced_iteration_are_left_out(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(trace(3)))  # markers 10, 11, 12
    out = tmp_path / "t.json.gz"
    finish_trace(raw, out, rank=0, world_size=None, meta={"last_iteration": 11}, max_bytes=10**6)
    kept = [n for n in names(json.loads(gzip.decompress(out.read_bytes()))) if n.startswith("ProfilerStep#")]
    assert kept == ["ProfilerStep#10", "ProfilerStep#11"]
