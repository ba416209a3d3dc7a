"""Ray Data input timed as a loader is: ``trainperf.ray.batches`` makes each ``next()`` on a shard's
``iter_torch_batches`` the data wait, and adds Ray Data's own timers (what each grew by, per batch) to the
window's named parts. With a stand-in for a shard whose timers move as Ray's do; the real thing runs in
tests/test_ray_train.py."""

from __future__ import annotations

import pytest
import torch

from trainperf import PerformanceListener
from trainperf.ray import RAY_DATA_TIMERS, batches
from trainperf.torch import attach


class Timer:
    def __init__(self):
        self.total = 0.0

    def get(self):
        return self.total


class Stats:
    def __init__(self):
        for attribute, _ in RAY_DATA_TIMERS:
            setattr(self, attribute, Timer())


class FakeShard:
    """Each batch blocks ``waits[i]`` seconds of the fake clock, ``production`` of it waiting for the
    pipeline; Ray's timers grow by as much as the batch is handed over."""

    def __init__(self, clock, waits, production=0.6, stats=True):
        self.clock, self.waits, self.production = clock, waits, production
        self.options = None
        if stats:
            self._iter_stats = Stats()

    def iter_torch_batches(self, **options):
        self.options = options
        stats = getattr(self, "_iter_stats", None)

        def gen():
            for wait in self.waits:
                self.clock.advance(wait)
                if stats is not None:
                    stats.iter_total_blocked_s.total += wait
                    stats.iter_blocked_production_wait_s.total += self.production * wait
                    stats.iter_blocked_format_s.total += (1 - self.production) * wait
                yield {"x": torch.randn(4, 3), "y": torch.randn(4, 1)}

        class Iterable:
            def __iter__(self):
                return gen()

        return Iterable()


def train(listener, shard, compute=0.010, **options):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    attach(model, listener)
    for batch in batches(shard, model, **options):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(batch["x"]), batch["y"]).backward()
        shard.clock.advance(compute)
        opt.step()
    listener.close()
    return [r for r in listener.history]


def test_each_batch_wait_is_the_data_wait_and_rays_timers_are_in_the_record(clock):
    waits = [0.004, 0.008, 0.020, 0.002, 0.006] * 4
    shard = FakeShard(clock, waits)
    listener = PerformanceListener(5, sinks=[], clock=clock, verdict=False)
    records = train(listener, shard, batch_size=4, prefetch_batches=2)
    assert shard.options == {"batch_size": 4, "prefetch_batches": 2}
    assert [r.iteration for r in records] == [5, 10, 15, 20]
    for r in records:
        assert r.etl_source == "loader"
        assert r.etl_ms == pytest.approx(8.0)  # (4 + 8 + 20 + 2 + 6) / 5 ms a batch, the fetches timed
        assert r.extra["ray_data_blocked_ms"] == pytest.approx(8.0)
        assert r.extra["ray_data_production_wait_ms"] == pytest.approx(4.8)
        assert r.extra["ray_data_format_ms"] == pytest.approx(3.2)
        assert "ray_data_transfer_ms" not in r.extra and "ray_data_collate_ms" not in r.extra  # never grew
        assert r.samples == 20 and r.iteration_ms == pytest.approx(18.0)


def test_a_shard_without_rays_statistics_is_still_timed(clock):
    shard = FakeShard(clock, [0.005] * 10, stats=False)
    listener = PerformanceListener(5, sinks=[], clock=clock, verdict=False)
    records = train(listener, shard)
    assert [r.etl_ms for r in records] == [pytest.approx(5.0)] * 2
    assert all(not any(k.startswith("ray_data") for k in r.extra) for r in records)


def test_a_timer_that_fails_or_is_not_one_is_left_out_and_training_goes_on(clock):
    shard = FakeShard(clock, [0.005] * 10)

    class Broken:
        total = 0.0

        def get(self):
            raise RuntimeError("changed in a later Ray")

    shard._iter_stats.iter_blocked_format_s = Broken()
    shard._iter_stats.iter_blocked_data_transfer_s = "not a timer"
    listener = PerformanceListener(5, sinks=[], clock=clock, verdict=False)
    records = train(listener, shard)
    assert [r.extra["ray_data_blocked_ms"] for r in records] == [pytest.approx(5.0)] * 2
    assert all("ray_data_format_ms" not in r.extra for r in records)


def test_a_listener_as_the_target_and_two_epochs(clock):
    shard = FakeShard(clock, [0.003] * 5)
    listener = PerformanceListener(5, sinks=[], clock=clock, verdict=False)
    loader = batches(shard, listener, batch_size=4)
    for _ in range(2):  # each epoch a new iterator; the timers are the shard's, cumulative across epochs
        for _batch in loader:
            clock.advance(0.007)
            listener.record_iteration(4)
    listener.close()
    assert [r.etl_ms for r in listener.history] == [pytest.approx(3.0)] * 2
    assert [r.extra["ray_data_blocked_ms"] for r in listener.history] == [pytest.approx(3.0)] * 2


@pytest.mark.parametrize("shard, targets, error, match", [
    (object(), ("L",), TypeError, "shard must be a Ray Data iterator"),
    (None, (), ValueError, "at least one listener"),
    (None, (42,), TypeError, "targets must be"),
])
def test_bad_arguments_are_named(clock, shard, targets, error, match):
    listener = PerformanceListener(5, sinks=[], clock=clock)
    shard = FakeShard(clock, [0.001]) if shard is None else shard
    targets = tuple(listener if t == "L" else t for t in targets)
    with pytest.raises(error, match=match):
        batches(shard, *targets)
    listener.close()


class Scripted:
    """A timer that reads what it is told, one reading a call."""

    def __init__(self, readings):
        self.readings = list(readings)
        self.total = 0.0  # what the fake shard adds goes nowhere

    def get(self):
        return self.readings.pop(0)


@pytest.mark.parametrize("readings, per_iteration_ms", [
    ([0.0, 0.005, 0.002, 0.006, 0.010, 0.015], (5 + 4 + 4 + 5) / 5),  # went back at the 2nd batch: nothing then
    ([-0.5, -0.2, 0.004, 0.010, float("nan"), 0.020], 6 / 5),  # readings below 0 or NaN are no readings
])
def test_a_timer_that_goes_back_or_reads_nonsense_adds_nothing_for_that_batch(clock, readings, per_iteration_ms):
    shard = FakeShard(clock, [0.001] * 5)
    shard._iter_stats.iter_total_blocked_s = Scripted(readings)
    listener = PerformanceListener(5, sinks=[], clock=clock, verdict=False)
    records = train(listener, shard)
    assert records[0].extra["ray_data_blocked_ms"] == pytest.approx(per_iteration_ms)
