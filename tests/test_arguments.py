"""Every public call refuses a wrong argument at the call, with an error that names the argument
and the value it got."""

from __future__ import annotations

import logging
import math

import pytest

import trainperf as tp
from trainperf import sinks as S


def listener() -> tp.PerformanceListener:
    return tp.PerformanceListener(sinks=[])


L = tp.PerformanceListener

CORE = [
    ("frequency=0", lambda: L(0), ValueError, "frequency must be a positive int", "0"),
    ("frequency=-1", lambda: L(-1), ValueError, "frequency", "-1"),
    ("frequency=1.5", lambda: L(1.5), ValueError, "frequency", "1.5"),
    ("frequency='10'", lambda: L("10"), ValueError, "frequency", "'10'"),
    ("frequency=True", lambda: L(True), ValueError, "frequency", "True"),
    ("frequency=None", lambda: L(None), ValueError, "frequency", "None"),
    ("report_foo=True", lambda: L(10, report_foo=True), TypeError, "report_foo", ""),
    ("report_gc='yes'", lambda: L(report_gc="yes"), TypeError, "report_gc must be a bool", "'yes'"),
    ("history=0", lambda: L(history=0), ValueError, "history", "0"),
    ("history='x'", lambda: L(history="x"), TypeError, "history", "'x'"),
    ("sinks=5", lambda: L(sinks=5), TypeError, "sinks", "5"),
    ("sinks='abc'", lambda: L(sinks="abc"), TypeError, "sinks", "'abc'"),
    ("sinks=[5]", lambda: L(sinks=[5]), TypeError, "sinks", "5"),
    ("report_gc=1", lambda: L(report_gc=1), TypeError, "report_gc", "1"),
    ("input_bound_share=nan", lambda: L(input_bound_share=math.nan), ValueError, "input_bound_share", "nan"),
    ("clock=5", lambda: L(clock=5), TypeError, "clock", "5"),
    ("rank=-1", lambda: L(rank=-1), ValueError, "rank", "-1"),
    ("add_sink(5)", lambda: listener().add_sink(5), TypeError, "sink", "5"),
    ("set_epoch(-1)", lambda: listener().set_epoch(-1), ValueError, "epoch", "-1"),
    ("set_epoch('a')", lambda: listener().set_epoch("a"), TypeError, "epoch", "'a'"),
    ("set_rank(-2)", lambda: listener().set_rank(-2), ValueError, "rank", "-2"),
    ("use_device('cuda')", lambda: listener().use_device("cuda"), TypeError, "index", "'cuda'"),
    ("add_collector('', f)", lambda: listener().add_collector("", lambda: (0, 0.0)), ValueError, "name", "''"),
    ("add_collector('x', 5)", lambda: listener().add_collector("x", 5), TypeError, "read", "5"),
    ("collector returns 'bad'", lambda: listener().add_collector("x", lambda: "bad"), TypeError, "collector 'x'",
     "'bad'"),
    ("add_advisor(5)", lambda: listener().add_advisor(5), TypeError, "advisor", "5"),
    ("set_timeline(5)", lambda: listener().set_timeline(5), TypeError, "timeline", "5"),
    ("add_probe(5)", lambda: listener().add_probe(5), TypeError, "probe", "5"),
    ("report_hardware=1", lambda: L(report_hardware=1), TypeError, "report_hardware", "1"),
    ("on_close(5)", lambda: listener().on_close(5), TypeError, "callback", "5"),
    ("add_etl(-1)", lambda: listener().add_etl(-1), ValueError, "seconds", "-1"),
    ("add_etl(nan)", lambda: listener().add_etl(math.nan), ValueError, "seconds", "nan"),
    ("add_etl('a')", lambda: listener().add_etl("a"), TypeError, "seconds", "'a'"),
    ("exclude(nan)", lambda: listener().exclude(math.nan), ValueError, "seconds", "nan"),
    ("exclude('a')", lambda: listener().exclude("a"), TypeError, "seconds", "'a'"),
    ("set_etl_source('')", lambda: listener().set_etl_source(""), ValueError, "source", "''"),
]

SINKS = [
    ("MemorySink(0)", lambda: S.MemorySink(0), ValueError, "maxlen", "0"),
    ("MemorySink(True)", lambda: S.MemorySink(True), ValueError, "maxlen", "True"),
    ("LoggingSink(5)", lambda: S.LoggingSink(5), TypeError, "logger", "5"),
    ("LoggingSink(level='INFO')", lambda: S.LoggingSink(level="INFO"), TypeError, "level", "'INFO'"),
    ("JsonLinesSink(5)", lambda: S.JsonLinesSink(5), TypeError, "path", "5"),
    ("JsonLinesSink(append='no')", lambda p: S.JsonLinesSink(p / "x.jsonl", append="no"), TypeError, "append", "'no'"),
    ("JsonLinesSink(fsync=1)", lambda p: S.JsonLinesSink(p / "x.jsonl", fsync=1), TypeError, "fsync", "1"),
    ("JsonLinesSink(missing folder)", lambda p: S.JsonLinesSink(p / "no" / "x.jsonl"), FileNotFoundError, "path",
     "does not exist"),
    ("JsonLinesSink(folder)", lambda p: S.JsonLinesSink(p), IsADirectoryError, "path", "is a folder"),
    ("CsvSink(5)", lambda: S.CsvSink(5), TypeError, "path", "5"),
    ("CsvSink(missing folder)", lambda p: S.CsvSink(p / "no" / "x.csv"), FileNotFoundError, "path", "does not exist"),
    ("TensorBoardSink(5)", lambda: S.TensorBoardSink(5), TypeError, "log_dir", "5"),
    ("TensorBoardSink(prefix=5)", lambda p: S.TensorBoardSink(p, prefix=5), TypeError, "prefix", "5"),
    ("TensorBoardSink(writer=5)", lambda: S.TensorBoardSink(writer=5), TypeError, "writer", "5"),
    ("LoggerSink(5)", lambda: S.LoggerSink(5), TypeError, "loggers", "5"),
    ("LoggerSink([5])", lambda: S.LoggerSink([5]), TypeError, "loggers", "5"),
    ("LoggerSink(prefix=5)", lambda: S.LoggerSink([], prefix=5), TypeError, "prefix", "5"),
    ("TqdmSink(5)", lambda: S.TqdmSink(5), TypeError, "bar", "5"),
    ("scalar_metrics(5)", lambda: S.scalar_metrics(5), TypeError, "record", "5"),
    ("format_line(5)", lambda: tp.format_line(5), TypeError, "record", "5"),
    ("parse_log(5)", lambda: tp.parse_log(5), TypeError, "source", "int"),
    ("parse_log(missing)", lambda p: tp.parse_log(p / "nope.log"), OSError, "nope.log", "No such file"),
    ("plot(5)", lambda: tp.plot(5), TypeError, "data", "int"),
    ("doctor(steps=0)", lambda: tp.doctor(steps=0), ValueError, "steps", "0"),
    ("doctor(watch_seconds=-1)", lambda: tp.doctor(watch_seconds=-1), ValueError, "watch_seconds", "-1"),
    ("doctor(model=5)", lambda: tp.doctor(model=5), TypeError, "model", "int"),
    ("doctor(loss_fn=5)", lambda: tp.doctor(loss_fn=5), TypeError, "loss_fn", "5"),
]


def torch_calls():
    torch = pytest.importorskip("torch")
    from trainperf import data as D
    from trainperf import torch as T

    closed = listener()
    closed.close()

    class Net(T.ListenerModule, torch.nn.Linear):
        pass

    net = Net(2, 1)

    def fit_net():
        return net

    def optimizer():
        return torch.optim.SGD(net.parameters(), lr=0.1)

    return [
        ("attach(model, 5)", lambda: T.attach(torch.nn.Linear(1, 1), 5), TypeError, "listener", "5"),
        ("attach(5, listener)", lambda: T.attach(5, listener()), TypeError, "model", "int"),
        ("attach(model, closed)", lambda: T.attach(torch.nn.Linear(1, 1), closed), ValueError, "listener", "closed"),
        ("attach('model', listener)", lambda: T.attach("model", listener()), TypeError,
         "model must be a torch.nn.Module", "str"),
        ("timed(5)", lambda: T.timed(5), ValueError, "targets", "listener"),
        ("timed([], 5)", lambda: T.timed([], 5), TypeError, "targets", "5"),
        ("detach(5)", lambda: T.detach(5), TypeError, "model", "5"),
        ("map_tensors(x, 5)", lambda: T.map_tensors([1], 5), TypeError, "fn", "5"),
        ("CudaTimeline('cpu')", lambda: T.CudaTimeline("cpu"), ValueError, "device", "'cpu'"),
        ("fit(epochs=0)", lambda: fit_net().fit([], optimizer(), torch.nn.functional.mse_loss, epochs=0), ValueError,
         "epochs must be a positive int", "0"),
        ("fit(loss_fn='mse')", lambda: fit_net().fit([], optimizer(), "mse"), TypeError, "loss_fn must be callable",
         "'mse'"),
        ("prefetch(5)", lambda: D.prefetch(5), TypeError, "source", "int"),
        ("prefetch(depth=0)", lambda: D.prefetch([], depth=0), ValueError, "depth", "0"),
        ("presave(5, path)", lambda p: D.presave(5, p / "ps"), TypeError, "source", "5"),
        ("presave(batches_per_shard=0)", lambda p: D.presave([], p / "ps", batches_per_shard=0), ValueError,
         "batches_per_shard", "0"),
        ("load_presaved(missing)", lambda p: D.load_presaved(p / "nope"), FileNotFoundError, "nope", "not"),
        ("DevicePrefetcher(5, 'cpu')", lambda: D.DevicePrefetcher(5, "cpu"), TypeError, "source", "5"),
    ]


def lightning_calls():
    pytest.importorskip("pytorch_lightning")
    from trainperf.lightning import PerformanceCallback

    return [
        ("PerformanceCallback(0)", lambda: PerformanceCallback(0), ValueError, "frequency", "0"),
        ("PerformanceCallback(report_foo=True)", lambda: PerformanceCallback(10, report_foo=True), TypeError,
         "report_foo", ""),
        ("PerformanceCallback(bogus=1)", lambda: PerformanceCallback(bogus=1), TypeError, "bogus", ""),
        ("PerformanceCallback(log_to_loggers=1)", lambda: PerformanceCallback(log_to_loggers=1), TypeError,
         "log_to_loggers", "1"),
        ("PerformanceCallback(sinks=5)", lambda: PerformanceCallback(sinks=5), TypeError, "sinks", "5"),
    ]


def check(call, error, name, value, tmp_path):
    with pytest.raises(error) as info:
        call(tmp_path) if call.__code__.co_argcount else call()
    message = str(info.value)
    assert name in message and value in message, message


@pytest.mark.parametrize(("what", "call", "error", "name", "value"), CORE + SINKS, ids=[c[0] for c in CORE + SINKS])
def test_a_wrong_argument_is_refused_by_name(what, call, error, name, value, tmp_path):
    logging.getLogger("trainperf").handlers[:] = []
    check(call, error, name, value, tmp_path)


def test_torch_and_data_calls_refuse_wrong_arguments_by_name(tmp_path):
    for _what, call, error, name, value in torch_calls():
        check(call, error, name, value, tmp_path)


def test_lightning_callback_refuses_wrong_arguments_by_name(tmp_path):
    for _what, call, error, name, value in lightning_calls():
        check(call, error, name, value, tmp_path)


def test_a_failing_collector_is_left_out_of_its_window_and_said_once(clock):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) > 1:
            raise OSError("device gone")
        return (0, 0.0)

    lst = tp.PerformanceListener(1, sinks=[], clock=clock)
    lst.add_collector("flaky", flaky)
    with pytest.warns(RuntimeWarning, match="collector 'flaky' failed"):
        clock.advance(0.1)
        first = lst.record_iteration(1)
    clock.advance(0.1)
    second = lst.record_iteration(1)
    assert first.gc == () and second.gc == ()
