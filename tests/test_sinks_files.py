from __future__ import annotations

import csv
import json
import math
import warnings

import pytest

import trainperf
from trainperf import MemorySink, PerformanceListener, PerformanceRecord
from trainperf.sinks import CSV_COLUMNS, CsvSink, JsonLinesSink, LoggerSink, TensorBoardSink, TqdmSink


def drive(listener, clock, n, samples=4):
    for _ in range(n):
        clock.advance(0.01)
        listener.record_iteration(samples=samples)


def test_jsonl_writes_one_flushed_object_per_record(tmp_path, clock):
    path = tmp_path / "perf.jsonl"
    sink = JsonLinesSink(path)
    listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False, report_gc=True)
    drive(listener, clock, 2)
    lines = path.read_text().splitlines()  # readable before close: flushed per record
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2]
    assert set(json.loads(lines[0])["gc"]) == {"gen0", "gen1", "gen2"}
    listener.close()
    assert sink.closed


def test_jsonl_sink_is_a_context_manager_and_refuses_after_close(tmp_path, clock):
    with JsonLinesSink(tmp_path / "a.jsonl", append=False) as sink:
        pass
    listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False, strict=True)
    with pytest.raises(ValueError, match="closed"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        listener.record_iteration(samples=1)




def test_csv_has_a_stable_header_and_one_row_per_record(tmp_path, clock):
    path = tmp_path / "perf.csv"
    with CsvSink(path) as sink:
        listener = PerformanceListener(2, sinks=[sink], clock=clock, sink_thread=False, report_gc=True)
        drive(listener, clock, 6)
    rows = list(csv.DictReader(path.open()))
    header = list(rows[0])
    assert tuple(header[: len(CSV_COLUMNS)]) == CSV_COLUMNS
    assert header[len(CSV_COLUMNS):] == ["gc.gen0.count", "gc.gen0.ms", "gc.gen1.count", "gc.gen1.ms",
                                         "gc.gen2.count", "gc.gen2.ms"]
    assert [r["iteration"] for r in rows] == ["2", "4", "6"]
    assert rows[0]["warmup"] == "True" and rows[0]["score"] == ""


def test_csv_widens_its_header_atomically_when_a_collector_appears(tmp_path, clock):
    path = tmp_path / "perf.csv"
    sink = CsvSink(path)
    listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
    drive(listener, clock, 2)
    listener.add_collector("cuda_alloc_retries", lambda: (1, None))
    with pytest.warns(UserWarning, match="wider header"):
        drive(listener, clock, 1)
    drive(listener, clock, 1)
    sink.close()
    rows = list(csv.DictReader(path.open()))
    assert [r["iteration"] for r in rows] == ["1", "2", "3", "4"]
    assert rows[0]["gc.cuda_alloc_retries.count"] == "" and rows[2]["gc.cuda_alloc_retries.count"] == "0"
    assert not list(tmp_path.glob("*.tmp")), "no temporary file is left behind"


def test_file_sink_still_gets_every_record_beside_a_failing_sink(tmp_path, clock):
    path = tmp_path / "perf.jsonl"

    def broken(record):
        raise OSError("network sink down")

    listener = PerformanceListener(1, sinks=[broken, JsonLinesSink(path)], clock=clock, sink_thread=False)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        drive(listener, clock, 5)
    listener.close()
    assert len(path.read_text().splitlines()) == 5


class FakeLogger:
    def __init__(self):
        self.calls = []

    def log_metrics(self, metrics, step):
        self.calls.append((step, metrics))


def test_logger_sink_sends_metrics_keyed_by_step(clock):
    logger = FakeLogger()
    listener = PerformanceListener(2, sinks=[LoggerSink([logger])], clock=clock, sink_thread=False, report_gc=True)
    drive(listener, clock, 4)
    assert [step for step, _ in logger.calls] == [2, 4]
    metrics = logger.calls[-1][1]
    assert metrics["trainperf/samples_per_sec"] == pytest.approx(400.0)
    assert "trainperf/gc/gen0/count" in metrics and "trainperf/iteration_p95_ms" in metrics


def test_logger_sink_takes_a_trainer_or_one_logger(clock):
    logger = FakeLogger()

    class Trainer:
        loggers = [logger]

    for source in (Trainer(), logger):
        listener = PerformanceListener(1, sinks=[LoggerSink(source)], clock=clock, sink_thread=False)
        drive(listener, clock, 1)
    assert len(logger.calls) == 2


def test_tensorboard_sink_writes_scalars(tmp_path, clock):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with TensorBoardSink(str(tmp_path)) as sink:
        listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
        drive(listener, clock, 3)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = events.Scalars("trainperf/samples_per_sec")
    assert [s.step for s in scalars] == [1, 2, 3]
    assert scalars[0].value == pytest.approx(400.0)


def test_tensorboard_sink_without_tensorboard_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=r"pip install 'trainperf\[tensorboard"):
        TensorBoardSink("runs")


def test_tqdm_sink_sets_the_postfix(clock):
    tqdm = pytest.importorskip("tqdm")
    bar = tqdm.tqdm(total=10, disable=True)
    listener = PerformanceListener(1, sinks=[TqdmSink(bar)], clock=clock, sink_thread=False)
    listener.record_iteration(samples=4, etl=0.002)
    clock.advance(0.01)
    listener.record_iteration(samples=4, etl=0.002)
    assert bar.postfix is not None and "samples/s=400.0" in bar.postfix and "ETL=2ms" in bar.postfix


def test_any_callable_is_a_sink(clock):
    seen = []
    listener = PerformanceListener(1, sinks=[seen.append, MemorySink()], clock=clock, sink_thread=False)
    drive(listener, clock, 2)
    assert [r.iteration for r in seen] == [1, 2]


def _strict_json(line):
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def test_json_lines_are_strict_json_and_non_finite_scores_read_back_apart(tmp_path):
    path = tmp_path / "run.jsonl"
    scores = [float("nan"), float("inf"), float("-inf"), 0.5]
    with JsonLinesSink(path) as sink:
        for i, score in enumerate(scores, 1):
            sink(PerformanceRecord(iteration=i, window_iterations=1, window_s=1.0, warmup=False, timestamp=0.0,
                                   score=score))
    rows = [_strict_json(line) for line in path.read_text().splitlines()]
    assert [r["score"] for r in rows] == ["NaN", "Infinity", "-Infinity", 0.5]
    back = trainperf.parse_log(path).column("score")
    assert back == [None, math.inf, -math.inf, 0.5]  # NaN reads as missing, as in a DataFrame
    frame = trainperf.parse_log(path).to_pandas()
    assert math.isnan(frame["score"][0]) and frame["score"].tolist()[1:] == [math.inf, -math.inf, 0.5]


def test_appending_after_a_cut_last_line_starts_a_new_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"iteration":1,"window_iterations":1}\n{"iteration":2,"win')
    with JsonLinesSink(path, append=True) as sink:
        sink(PerformanceRecord(iteration=3, window_iterations=1, window_s=1.0, warmup=False, timestamp=0.0))
    assert trainperf.parse_log(path).column("iteration") == [1.0, 3.0]


def _one(iteration: int) -> PerformanceRecord:
    return PerformanceRecord(iteration=iteration, window_iterations=1, window_s=1.0, warmup=False, timestamp=0.0)


def test_appending_to_a_complete_file_adds_no_blank_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"iteration":1}\n')
    with JsonLinesSink(path) as sink:  # appends by default
        sink(_one(2))
    lines = path.read_text().split("\n")
    assert lines[0] == '{"iteration":1}' and json.loads(lines[1])["iteration"] == 2 and lines[2:] == [""]


def test_appending_to_an_empty_file_starts_on_its_first_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("")
    with JsonLinesSink(path, append=True) as sink:
        sink(_one(1))
    text = path.read_text()
    assert text.startswith('{"iteration":1,') and text.count("\n") == 1


def test_a_fresh_file_replaces_what_was_there(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"iteration":1}\n{"iteration":2,"cut')
    with JsonLinesSink(path, append=False) as sink:
        sink(_one(3))
    assert [json.loads(line)["iteration"] for line in path.read_text().splitlines()] == [3]


def test_csv_writes_infinities_by_name_and_nan_as_nan(tmp_path):
    import csv

    path = tmp_path / "run.csv"
    with CsvSink(path) as sink:
        for i, score in enumerate((math.inf, -math.inf, math.nan, 0.5), start=1):
            sink(PerformanceRecord(iteration=i, window_iterations=1, window_s=1.0, warmup=False, timestamp=0.0,
                                   score=score))
    with open(path, newline="") as f:
        scores = [row["score"] for row in csv.DictReader(f)]
    assert scores == ["Infinity", "-Infinity", "nan", "0.5"]


def test_csv_with_append_false_starts_its_file_afresh(tmp_path):
    path = tmp_path / "run.csv"
    path.write_text("old,header\n1,2\n")
    with CsvSink(path, append=False) as sink:
        sink(_one(1))
    text = path.read_text()
    assert "old,header" not in text and text.startswith("timestamp,host,") and text.count("\n") == 2


def test_a_file_cut_after_a_tab_gets_its_new_line_too(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"iteration":1}\n{"iteration":2,\t')
    with JsonLinesSink(path) as sink:
        sink(_one(3))
    assert path.read_text().split("\n")[2].startswith('{"iteration":3,')


def test_json_lines_options_are_keyword_only(tmp_path):
    with pytest.raises(TypeError):
        JsonLinesSink(tmp_path / "x.jsonl", False)  # type: ignore[misc]


def test_csv_appends_to_the_file_an_earlier_run_left_under_its_header(tmp_path, clock):
    """A restarted run keeps the rows of the earlier attempt; the header is written once."""
    path = tmp_path / "perf.csv"
    for _ in range(2):
        with CsvSink(path) as sink:
            listener = PerformanceListener(2, sinks=[sink], clock=clock, sink_thread=False, report_gc=True)
            drive(listener, clock, 4)
            listener.close()
    text = path.read_text()
    assert text.count("timestamp,host,pid") == 1
    rows = list(csv.DictReader(text.splitlines()))
    assert [r["iteration"] for r in rows] == ["2", "4", "2", "4"]
    assert all(None not in r and r["gc.gen0.count"] != "" for r in rows)


def test_csv_append_false_starts_the_file_afresh(tmp_path, clock):
    path = tmp_path / "perf.csv"
    for append in (True, False):
        with CsvSink(path, append=append) as sink:
            listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
            drive(listener, clock, 2)
            listener.close()
    assert [r["iteration"] for r in csv.DictReader(path.open())] == ["1", "2"]


def test_csv_refuses_to_append_to_a_file_with_another_header_and_names_it(tmp_path):
    path = tmp_path / "theirs.csv"
    path.write_text("step,loss\n1,0.5\n")
    with pytest.raises(ValueError, match=r"theirs\.csv.*not CsvSink's \(columns 'step', 'loss'\).*append=False"):
        CsvSink(path)
    assert path.read_text() == "step,loss\n1,0.5\n"  # left as it was
    with CsvSink(path, append=False):
        pass
    assert path.read_text() == ""


def test_csv_an_earlier_header_with_fewer_collectors_is_widened_keeping_its_rows(tmp_path, clock):
    path = tmp_path / "perf.csv"
    with CsvSink(path) as sink:
        listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
        drive(listener, clock, 2)
        listener.close()
    with CsvSink(path) as sink:
        listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False, report_gc=True)
        with pytest.warns(UserWarning, match="wider header"):
            drive(listener, clock, 2)
        listener.close()
    rows = list(csv.DictReader(path.open()))
    assert [(r["iteration"], r["gc.gen0.count"] != "") for r in rows] == [("1", False), ("2", False), ("1", True),
                                                                          ("2", True)]


@pytest.mark.parametrize("keep", [0, 1, 25, -2, -1])  # bytes of the last row that reached the disk
def test_csv_a_row_cut_by_a_crash_does_not_glue_to_the_next_runs_first_row(tmp_path, clock, keep):
    path = tmp_path / "perf.csv"
    with CsvSink(path) as sink:
        listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
        drive(listener, clock, 3)
        listener.close()
    whole = path.read_bytes()
    last_start = whole.rstrip(b"\r\n").rfind(b"\n") + 1
    last = whole[last_start:]
    cut = whole[: last_start + (keep if keep >= 0 else len(last) + keep)]
    path.write_bytes(cut)
    with CsvSink(path) as sink:
        listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
        drive(listener, clock, 2)
        listener.close()
    rows = list(csv.reader(path.read_text().splitlines()))
    header, rows = rows[0], rows[1:]
    whole_rows = [r for r in rows if len(r) == len(header)]
    iteration = header.index("iteration")
    # the two whole rows before the cut, the cut one (when anything of it reached the disk) on its own
    # line, then the second run's rows, each whole
    assert [r[iteration] for r in whole_rows][:2] == ["1", "2"]
    assert [r[iteration] for r in whole_rows][-2:] == ["1", "2"]
    assert len(rows) == (4 if keep == 0 else 5)


def test_a_json_lines_file_appended_twice_keeps_both_runs(tmp_path, clock):
    path = tmp_path / "perf.jsonl"
    for _ in range(2):
        with JsonLinesSink(path) as sink:
            listener = PerformanceListener(1, sinks=[sink], clock=clock, sink_thread=False)
            drive(listener, clock, 2)
            listener.close()
    assert [json.loads(line)["iteration"] for line in path.read_text().splitlines()] == [1, 2, 1, 2]
