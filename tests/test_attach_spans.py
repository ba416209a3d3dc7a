"""Evaluation and checkpoints in a plain loop under ``attach``: other host time, and their own figures
(``eval_ms``, ``checkpoint_ms``), on a fake clock."""

from __future__ import annotations

import io

import pytest
import torch

from clocked import BATCH, CostlyNet
from conftest import FakeClock
from test_torch_loops import loader
from trainperf import PerformanceListener
from trainperf.torch import attach

_clock: list[FakeClock] = []  # the clock a checkpoint's reducers advance


def _costly(seconds: float) -> int:
    _clock[0].advance(seconds)
    return 0


class Heavy:
    """Pickles (``torch.save``) in ``save_s`` and unpickles (``torch.load``) in ``load_s`` on the clock."""

    def __init__(self, clock: FakeClock, save_s: float, load_s: float = 0.0) -> None:
        self.clock, self.save_s, self.load_s = clock, save_s, load_s

    def __reduce__(self):
        self.clock.advance(self.save_s)
        return (_costly, (self.load_s,))


def listened(clock, frequency=4):
    lst = PerformanceListener(frequency, sinks=[], sink_thread=False, verdict=False, clock=clock, history=None)
    model = CostlyNet(clock, 0.005)
    return lst, model, attach(model, lst), torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def evaluate(clock, model, batches):
    model.eval()
    with torch.no_grad():
        for vx, _ in batches:
            model(vx)
        clock.advance(0.002)  # the metric's own work: evaluation too
    model.train()


def test_evaluation_and_checkpoints_are_other_time_and_their_own_figures_and_val_fetches_are_not_data_wait():
    clock = FakeClock(0.0)
    _clock[:] = [clock]
    lst, model, handle, opt = listened(clock)
    train, val = loader(clock, 0.010, 16), loader(clock, 0.010, 2)
    for i, (x, y) in enumerate(train):
        train_step(model, opt, x, y)
        clock.advance(0.003)  # the loop's own host work
        if (i + 1) % 2 == 0:
            evaluate(clock, model, val)  # 2 x (10 ms fetch + 5 ms forward) + 2 ms: 32 ms
        if (i + 1) % 4 == 0:
            torch.save({"model": model.state_dict(), "blob": Heavy(clock, 0.020)}, io.BytesIO())
    handle.detach()
    assert len(lst.history) == 4
    for r in lst.history[1:]:
        # per window of 4: host 4 x 3 ms, evaluation 2 x 32 ms, one checkpoint of 20 ms
        assert r.etl_ms == pytest.approx(10.0) and r.compute_ms == pytest.approx(5.0)
        assert r.other_ms == pytest.approx((12 + 64 + 20) / 4)
        assert r.extra["eval_ms"] == pytest.approx(16.0) and r.extra["checkpoint_ms"] == pytest.approx(5.0)
        assert (r.samples, r.batches, r.etl_source) == (4 * BATCH, 4, "loader")


def test_a_no_grad_forward_inside_the_step_is_compute_not_evaluation():
    clock = FakeClock(0.0)
    lst, model, handle, opt = listened(clock, 2)
    teacher = CostlyNet(clock, 0.004)
    for x, y in loader(clock, 0.010, 6):
        opt.zero_grad()
        with torch.no_grad():
            teacher(x)  # a teacher's targets
            model(x)  # the model's own target pass, after the batch came
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        clock.advance(0.001)
    handle.detach()
    for r in lst.history[1:]:
        assert (r.etl_ms, r.other_ms, r.compute_ms) == (pytest.approx(10.0), pytest.approx(1.0), pytest.approx(14.0))
        assert "eval_ms" not in r.extra


def test_without_a_loader_evaluation_and_checkpoints_come_out_of_the_gap():
    clock = FakeClock(0.0)
    _clock[:] = [clock]
    lst, model, handle, opt = listened(clock, 2)
    x, y = torch.ones(BATCH, 4), torch.zeros(BATCH, dtype=torch.long)
    for i in range(8):
        clock.advance(0.003)  # the iterable's own time and the loop's: the gap
        train_step(model, opt, x, y)
        if i % 2 == 1:
            evaluate(clock, model, [(x, y), (x, y)])  # 2 x 5 ms + 2 ms
            torch.save(Heavy(clock, 0.006), io.BytesIO())
    handle.detach()
    for r in lst.history[1:]:
        assert r.etl_source == "gap"
        assert (r.etl_ms, r.compute_ms) == (pytest.approx(3.0), pytest.approx(5.0))
        assert r.other_ms == pytest.approx((12 + 6) / 2)
        assert (r.extra["eval_ms"], r.extra["checkpoint_ms"]) == (pytest.approx(6.0), pytest.approx(3.0))


def test_a_checkpoint_after_the_batch_came_is_other_time_not_compute_and_a_load_counts_too():
    clock = FakeClock(0.0)
    _clock[:] = [clock]
    lst, model, handle, opt = listened(clock, 2)
    saved = io.BytesIO()
    torch.save(Heavy(clock, 0.0, 0.004), saved)
    for x, y in loader(clock, 0.010, 6):
        torch.save(Heavy(clock, 0.002), io.BytesIO())  # at the top of the loop body
        saved.seek(0)
        torch.load(saved, weights_only=False)  # 4 ms
        train_step(model, opt, x, y)
    handle.detach()
    for r in lst.history[1:]:
        assert (r.etl_ms, r.other_ms, r.compute_ms) == (pytest.approx(10.0), pytest.approx(6.0), pytest.approx(5.0))
        assert (r.extra["checkpoint_ms"], r.extra["checkpoint_load_ms"]) == (pytest.approx(2.0), pytest.approx(4.0))


def test_save_and_load_are_torchs_own_again_when_the_last_attachment_goes():
    save, load = torch.save, torch.load
    first = attach(torch.nn.Linear(1, 1), PerformanceListener(1, sinks=[]))
    second = attach(torch.nn.Linear(1, 1), PerformanceListener(1, sinks=[]))
    assert torch.save is not save and torch.save.__wrapped__ is save and torch.load.__wrapped__ is load
    first.detach()
    assert torch.save is not save
    second.detach()
    assert (torch.save, torch.load) == (save, load)


def test_a_checkpoint_before_training_starts_is_the_job_s_start_up_and_one_on_another_thread_counts_nothing():
    import threading

    clock = FakeClock(0.0)
    _clock[:] = [clock]
    lst, model, handle, opt = listened(clock, 2)
    torch.save(Heavy(clock, 0.050), io.BytesIO())  # before training: a part of the job's start-up
    for i, (x, y) in enumerate(loader(clock, 0.010, 4)):
        train_step(model, opt, x, y)
        if i == 1:
            saver = threading.Thread(target=torch.save, args=({"w": model.state_dict()}, io.BytesIO()))
            saver.start()
            saver.join()
    handle.detach()
    first, second = lst.history
    assert "checkpoint_ms" not in first.extra and "checkpoint_ms" not in second.extra
    assert lst.summary().goodput.rows["checkpoint_save"] == pytest.approx(0.050)
