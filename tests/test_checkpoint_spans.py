"""Named spans of a job's time: ``PerformanceListener.span`` and ``trainperf.span`` on the listener's
clock, and under ``attach``: ``torch.load`` as ``checkpoint_load``, ``torch.save`` as ``checkpoint``,
a load before the first iteration in the first window, a resumed run's iteration numbers, and a
user's span inside the loop counted as other host time, never compute (on a fake clock)."""

from __future__ import annotations

import io
import threading

import pytest
import torch

import trainperf
from conftest import FakeClock
from test_attach_spans import Heavy, _clock, evaluate, listened, train_step
from test_torch_loops import loader
from trainperf import PerformanceListener
from trainperf.torch import ListenerModule, attach


def plain(clock, frequency=2):
    return PerformanceListener(frequency, sinks=[], sink_thread=False, verdict=False, clock=clock, history=None)


def test_a_listeners_span_is_its_own_figure_per_iteration_and_a_span_before_start_is_the_job_s_start_up():
    clock = FakeClock(0.0)
    lst = plain(clock)
    with lst.span("checkpoint_load"):
        clock.advance(0.300)  # weights loaded before training
    lst.start()
    for i in range(4):
        clock.advance(0.010)
        if i == 2:
            with lst.span("upload"):  # a kind of the user's own
                clock.advance(0.004)
        lst.record_iteration(samples=1)
    first, second = lst.history
    assert first.extra == {}  # the load fell before the window: not its time
    assert second.extra == {"upload_ms": pytest.approx(4.0 / 2)}
    lst.close()
    assert lst.summary().goodput.rows["checkpoint_load"] == pytest.approx(0.300)


@pytest.mark.parametrize("kind, error", [("", ValueError), ("Checkpoint", ValueError), ("load-ckpt", ValueError),
                                         ("ckpt ", ValueError), (None, TypeError), (3, TypeError)])
def test_a_bad_kind_is_named_by_both_spans(kind, error):
    lst = PerformanceListener(1, sinks=[])
    for make in (lst.span, trainperf.span):
        with pytest.raises(error, match="kind"):
            make(kind)
    lst.close()


def test_a_span_inside_another_of_the_same_listener_counts_once_and_a_closed_listener_counts_nothing():
    clock = FakeClock(0.0)
    lst = plain(clock, 1)
    with lst.span("checkpoint"):
        clock.advance(0.002)
        with trainperf.span("checkpoint"):
            clock.advance(0.003)
        assert lst.in_span
    assert not lst.in_span
    lst.record_iteration(samples=1)
    assert lst.history[-1].extra == {"checkpoint_ms": pytest.approx(5.0)}
    lst.close()
    with lst.span("checkpoint"):  # nothing to report it: no error either
        clock.advance(0.001)


def test_trainperf_span_spans_the_open_listeners_of_its_thread_only():
    clock = FakeClock(0.0)
    here, closed = plain(clock, 1), plain(clock, 1)
    closed.close()
    elsewhere: list[PerformanceListener] = []
    builder = threading.Thread(target=lambda: elsewhere.append(plain(clock, 1)))
    builder.start()
    builder.join()
    with trainperf.span("checkpoint_load"):
        clock.advance(0.050)
    for lst in (here, elsewhere[0]):
        lst.record_iteration(samples=1)
    assert here.history[-1].extra == {"checkpoint_load_ms": pytest.approx(50.0)}
    assert "checkpoint_load_ms" not in elsewhere[0].history[-1].extra
    with trainperf.span("eval"):  # a span with no listener open does nothing
        pass
    here.close()
    elsewhere[0].close()


def test_under_attach_a_load_is_checkpoint_load_and_a_save_checkpoint_both_other_time():
    clock = FakeClock(0.0)
    _clock[:] = [clock]
    lst, model, handle, opt = listened(clock, 2)
    saved = io.BytesIO()
    torch.save(Heavy(clock, 0.0, 0.004), saved)
    for i, (x, y) in enumerate(loader(clock, 0.010, 6)):
        train_step(model, opt, x, y)
        saved.seek(0)
        torch.load(saved, weights_only=False)  # 4 ms after the step
        if i % 2:
            torch.save(Heavy(clock, 0.006), io.BytesIO())  # 6 ms every other step
    handle.detach()
    for r in lst.history[1:]:
        assert r.extra["checkpoint_load_ms"] == pytest.approx(4.0)
        assert r.extra["checkpoint_ms"] == pytest.approx(3.0)
        assert (r.etl_ms, r.other_ms, r.compute_ms) == (pytest.approx(10.0), pytest.approx(7.0), pytest.approx(5.0))


def test_under_attach_a_load_before_the_first_iteration_is_the_job_s_start_up_and_a_resumed_run_counts_on():
    clock = FakeClock(0.0)
    _clock[:] = [clock]
    lst = plain(clock)
    model = torch.nn.Linear(4, 2)
    handle = attach(model, lst, start_iteration=10)
    saved = io.BytesIO()
    torch.save(Heavy(clock, 0.120, 0.250), saved)  # a save before training, 120 ms
    saved.seek(0)
    torch.load(saved, weights_only=False)  # resuming: 250 ms
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader(clock, 0.010, 4):
        train_step(model, opt, x, y)
    handle.detach()
    first, second = lst.history
    assert (first.first_iteration, first.iteration, second.iteration) == (11, 12, 14)
    assert "checkpoint_load_ms" not in first.extra and "checkpoint_ms" not in first.extra  # before its window
    assert "checkpoint_load_ms" not in second.extra
    rows = lst.summary().goodput.rows
    assert rows["checkpoint_load"] == pytest.approx(0.250) and rows["checkpoint_save"] == pytest.approx(0.120)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (True, TypeError), (1.0, TypeError), ("3", TypeError)])
def test_a_bad_start_iteration_is_named(bad, error):
    class Net(ListenerModule, torch.nn.Linear):
        pass

    with pytest.raises(error, match="start_iteration"):
        attach(torch.nn.Linear(1, 1), PerformanceListener(1, sinks=[]), start_iteration=bad)
    with pytest.raises(error, match="start_iteration"):
        Net(1, 1).set_listeners(PerformanceListener(1, sinks=[]), start_iteration=bad)


def test_listener_module_listeners_count_on_from_start_iteration():
    class Net(ListenerModule, torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x)

    clock = FakeClock(0.0)
    model, lst = Net(), plain(clock)
    model.set_listeners(lst, start_iteration=7)
    model.fit(loader(clock, 0.001, 2), torch.optim.SGD(model.parameters(), lr=0.1),
              torch.nn.functional.cross_entropy)
    assert (lst.history[0].first_iteration, lst.history[0].iteration) == (8, 9)
    lst.close()


@pytest.mark.parametrize("inside", [False, True])
def test_a_users_span_in_an_attach_loop_is_its_figure_and_other_time_not_compute(inside):
    """Between steps, or inside the iteration (after the batch came): out of the step either way."""
    clock = FakeClock(0.0)
    lst, model, handle, opt = listened(clock, 2)
    for x, y in loader(clock, 0.010, 6):
        if inside:
            with trainperf.span("checkpoint"):
                clock.advance(0.007)
        train_step(model, opt, x, y)
        if not inside:
            with trainperf.span("checkpoint"):
                clock.advance(0.007)
    handle.detach()
    for r in lst.history[1:]:
        assert r.extra == {"checkpoint_ms": pytest.approx(7.0)}
        assert (r.etl_ms, r.other_ms, r.compute_ms) == (pytest.approx(10.0), pytest.approx(7.0), pytest.approx(5.0))


def test_a_save_inside_a_users_span_and_an_evaluation_inside_one_count_once():
    clock = FakeClock(0.0)
    _clock[:] = [clock]
    lst, model, handle, opt = listened(clock, 2)
    val = loader(clock, 0.010, 1)
    for x, y in loader(clock, 0.010, 6):
        train_step(model, opt, x, y)
        with trainperf.span("checkpoint"):
            clock.advance(0.001)
            torch.save(Heavy(clock, 0.004), io.BytesIO())
        with trainperf.span("eval"):
            evaluate(clock, model, val)  # 10 ms fetch + 5 ms forward + 2 ms
    handle.detach()
    for r in lst.history[1:]:
        assert r.extra == {"checkpoint_ms": pytest.approx(5.0), "eval_ms": pytest.approx(17.0)}
        assert (r.etl_ms, r.other_ms, r.compute_ms) == (pytest.approx(10.0), pytest.approx(22.0), pytest.approx(5.0))
