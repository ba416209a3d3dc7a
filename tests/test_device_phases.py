"""DevicePhases on a fake device: DDP ranks whose kernels take known device times, an all-reduce
that ends when the last rank's gradients are in, and events read only once the device has passed
them. The device's wait names the late rank, its own device phases say why, and nothing waits."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

from conftest import FakeClock
from fake_device import FakeDevice, FakeEvents
from trainperf.ranks import RankFigures, find_stragglers
from trainperf.torch._device_phases import BackwardPass, DevicePhases

TRANSFER_S = 0.002  # the all-reduce itself, once every rank's gradients are in
CALLS = {"record", "done", "elapsed_s", "release"}


class Rank:
    """One DDP rank on a fake CUDA device: the host launches each phase's kernels (``host_s`` of host
    time per launch) and never waits for them; the device runs them for their device time."""

    def __init__(self, rank: int, *, forward_s=0.010, backward_s=0.020, step_s=0.005, host_s=0.0002,
                 max_pending=256, phases=True, max_ahead_s=0.1) -> None:
        self.rank = rank
        self.forward_s, self.backward_s, self.step_s, self.host_s = forward_s, backward_s, step_s, host_s
        self.clock = FakeClock(0.0)
        self.device = FakeDevice(self.clock, max_ahead_s=max_ahead_s)
        self.events = FakeEvents(self.device)
        self.figures: dict[str, list[float]] = defaultdict(list)
        self.phases = DevicePhases(self.events, self.add, self.add, max_pending=max_pending) if phases else None

    def add(self, name: str, seconds: float) -> None:
        self.figures[name].append(seconds)

    def mark(self, name: str, *args) -> None:
        if self.phases is not None:
            getattr(self.phases, name)(*args)

    def launch(self, seconds: float) -> None:
        self.clock.advance(self.host_s)
        self.device.launch(seconds)

    def to_last_gradient(self) -> float:
        """Forward and backward launched; the device time at which the last gradient is in."""
        self.mark("forward_start")
        self.launch(self.forward_s)
        self.mark("forward_end")
        self.launch(self.backward_s)
        self.mark("last_gradient")
        return self.device.event_time()

    def end_backward(self, reduced_at: float | None) -> None:
        """DDP's finalize: the compute stream waits for the all-reduce (``None``: under no_sync)."""
        if reduced_at is not None:
            self.device.wait_until(reduced_at)
        self.mark("backward_end", BackwardPass(reduced_at is not None))

    def step(self) -> None:
        self.launch(self.step_s)
        self.mark("step_end")


def train(ranks: list[Rank], iterations: int, micro: int = 1) -> None:
    """``iterations`` optimizer steps of ``micro`` micro-batches each; the last one all-reduces."""
    for _ in range(iterations):
        for k in range(micro):
            ready = [r.to_last_gradient() for r in ranks]
            syncs = k == micro - 1
            for r in ranks:
                r.end_backward(max(ready) + TRANSFER_S if syncs else None)
        for r in ranks:
            r.step()


def settle(ranks: list[Rank]) -> None:
    """Let the devices finish (the test's host waits, not trainperf) and read what completed."""
    for r in ranks:
        r.device.synchronize()
        r.phases.poll()


def test_a_rank_whose_backward_kernels_take_longer_waits_less_on_the_device():
    ranks = [Rank(0), Rank(1), Rank(2, backward_s=0.050)]
    train(ranks, 20)
    settle(ranks)
    for r in ranks:
        assert len(r.figures["wait"]) == 20
        assert r.figures["backward"][1:] == pytest.approx([r.backward_s] * 19)  # device time, not the launch
    assert ranks[2].figures["wait"][1:] == pytest.approx([TRANSFER_S] * 19)
    for r in ranks[:2]:  # the others wait in the all-reduce for its 30 ms more of backward
        assert r.figures["wait"][1:] == pytest.approx([0.030 + TRANSFER_S] * 19)


def figures(r: Rank, iterations: int) -> RankFigures:
    def ms(name: str) -> float:
        return 1000.0 * sum(r.figures[name][1:]) / iterations

    compute = ms("forward") + ms("backward") + ms("wait") + ms("step")
    waits = [1000.0 * w for w in r.figures["wait"][1:]]
    return RankFigures(r.rank, iterations, 0.0, ms("forward"), compute, 0.0, compute, backward_ms=ms("backward"),
                       step_ms=ms("step"), wait_ms=ms("wait"), wait_p50_ms=statistics.median(waits))


@pytest.mark.parametrize(("slow", "cause"), [({"backward_s": 0.050}, "backward"), ({"step_s": 0.035}, "optimizer"),
                                             ({"forward_s": 0.040}, "forward")])
def test_the_analysis_names_the_late_rank_and_its_device_phase(slow, cause):
    ranks = [Rank(0), Rank(1), Rank(2), Rank(3, **slow)]
    train(ranks, 20)
    settle(ranks)
    found = find_stragglers([figures(r, 19) for r in ranks])
    assert [(s.rank, s.cause) for s in found] == [(3, cause)]
    assert found[0].excess_ms == pytest.approx(30.0)


def test_a_rank_that_waits_for_a_slow_optimizer_step_elsewhere_gets_the_wait():
    ranks = [Rank(0), Rank(1, step_s=0.025)]
    train(ranks, 10)
    settle(ranks)
    # rank 1's step ends 20 ms later, so its next gradients come 20 ms later: rank 0 waits for them
    assert ranks[0].figures["wait"][1:] == pytest.approx([0.020 + TRANSFER_S] * 9)
    assert ranks[1].figures["wait"][1:] == pytest.approx([TRANSFER_S] * 9)
    assert ranks[1].figures["step"] == pytest.approx([0.025] * 10)
    assert ranks[0].figures["step"] == pytest.approx([0.005] * 10)


def test_no_sync_micro_batches_give_no_wait_and_the_synced_one_gives_one_per_step():
    ranks = [Rank(0), Rank(1, backward_s=0.030)]
    train(ranks, 6, micro=4)
    settle(ranks)
    for r in ranks:
        assert len(r.figures["wait"]) == 6
        assert len(r.figures["forward"]) == len(r.figures["backward"]) == 24
        assert len(r.figures["step"]) == 6
    # rank 1's four backward passes take 40 ms more before its gradients go into the all-reduce
    assert ranks[0].figures["wait"][1:] == pytest.approx([4 * 0.010 + TRANSFER_S] * 5)
    assert ranks[1].figures["wait"][1:] == pytest.approx([TRANSFER_S] * 5)
    # the step is timed from the synced pass's end: the last micro-batch's
    assert ranks[0].figures["step"] == pytest.approx([0.005] * 6)


def test_nothing_waits_for_the_device():
    timed, bare = [Rank(0), Rank(1, backward_s=0.04)], [Rank(0, phases=False), Rank(1, backward_s=0.04, phases=False)]
    train(timed, 30)
    train(bare, 30)
    # the hosts' clocks moved exactly as without the timing: no call waited for the device
    assert [r.clock.now for r in timed] == [r.clock.now for r in bare]
    for r in timed:
        assert set(r.events.calls) <= CALLS and r.device.user_syncs == 0
        assert r.figures["wait"], "completed iterations were read while training"
        assert r.phases.pending <= 4  # a few iterations behind, as far as the device is
        # a stretch still running cost one query per poll; completed ones one per event
        polls = 2 * 30
        assert r.events.calls["done"] <= polls + r.events.calls["record"]


def test_events_still_pending_at_close_are_not_waited_for():
    r = Rank(0)
    train([r], 5)
    settle([r])
    read = {name: len(v) for name, v in r.figures.items()}
    r.events.completed_up_to = r.device.busy_until  # the device is stuck from here on
    train([r], 3)
    assert r.phases.pending == 6
    calls, now = r.events.calls.copy(), r.clock.now
    r.phases.close()
    assert r.events.calls["done"] == calls["done"] and r.events.calls["elapsed_s"] == calls["elapsed_s"]
    assert r.clock.now == now
    assert r.phases.pending == 0 and len(r.events.free) == r.events.created  # every event back in the pool
    r.events.completed_up_to = None
    r.device.synchronize()
    r.phases.poll()
    assert {name: len(v) for name, v in r.figures.items()} == read  # forgotten, not read late


def test_phase_durations_are_the_devices_not_the_hosts_launch_time():
    r = Rank(0, forward_s=0.012, backward_s=0.031, step_s=0.007, host_s=0.0001)
    train([r], 8)
    settle([r])
    assert r.figures["forward"][1:] == pytest.approx([0.012] * 7)
    assert r.figures["backward"][1:] == pytest.approx([0.031] * 7)
    assert r.figures["step"] == pytest.approx([0.007] * 8)
    assert r.figures["wait"] == pytest.approx([TRANSFER_S] * 8)


def test_comm_hooks_host_time_and_host_waits_adjust_the_device_figures():
    r = Rank(0)  # driven by hand: its device and phases
    device, got, phases = r.device, r.figures, r.phases
    assert phases is not None
    phases.forward_start()
    device.launch(0.010)
    phases.forward_end()
    device.launch(0.020)
    phases.last_gradient()
    device.launch(0.008)  # the all-reduce, launched late by a comm hook's 3 ms after the last gradient
    phases.backward_end(BackwardPass(True, comm_before_s=0.004, comm_after_s=0.003, host_wait_s=0.001))
    device.synchronize()
    phases.poll()
    assert got["backward"] == pytest.approx([0.016]) and got["wait"] == pytest.approx([0.006])


def test_figures_land_in_the_window_open_when_they_are_read():
    r = Rank(0)
    r.events.completed_up_to = -1.0  # the device has reached nothing yet
    train([r], 3)
    assert dict(r.figures) == {} and r.phases.pending == 6
    r.events.completed_up_to = None
    r.device.synchronize()
    r.phases.poll()
    assert len(r.figures["step"]) == len(r.figures["wait"]) == 3


def test_a_device_far_behind_drops_the_oldest_and_counts_them():
    r = Rank(0, max_pending=3, max_ahead_s=0.005)  # a device that keeps up: nothing dropped
    train([r], 5)
    settle([r])
    assert len(r.figures["step"]) == 5 and r.phases.dropped == 0
    r.to_last_gradient()
    r.end_backward(r.device.event_time() + TRANSFER_S)
    settle([r])  # this backward pass is read, its step is not launched yet
    r.figures.clear()
    r.events.completed_up_to = r.device.busy_until  # the device is stuck from here on
    r.step()
    train([r], 49)
    assert r.phases.pending == 3 and r.phases.dropped == 99 - 3
    assert r.events.created <= 3 * 4 + 5  # dropped stretches' events are reused
    r.events.completed_up_to = None
    settle([r])
    # left: the step of iteration 48, whose backward pass was dropped (no step read from the last
    # one read before), and iteration 49 whole
    assert r.figures["step"] == pytest.approx([0.005]) and r.figures["wait"] == pytest.approx([TRANSFER_S])


def test_events_are_recycled():
    r = Rank(0)
    train([r], 200)
    assert r.events.created <= 40  # a few iterations' worth, not one per record
    assert r.events.calls["record"] == 200 * 5


def test_a_later_gradient_in_the_same_pass_replaces_the_mark():
    r = Rank(0)  # driven by hand: its device, events and phases
    clock, device, events, got, phases = r.clock, r.device, r.events, r.figures, r.phases
    assert phases is not None
    phases.forward_start()
    phases.forward_end()
    for _ in range(3):  # the first backward pass marks every gradient: the last one is not known yet
        device.launch(0.010)
        phases.last_gradient()
    phases.backward_end(BackwardPass(True))
    clock.advance(1.0)
    phases.poll()
    assert got["backward"] == pytest.approx([0.030]) and got["wait"] == [0.0]
    assert events.calls["release"] >= 2


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_pending_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="max_pending"):
        DevicePhases(FakeEvents(FakeDevice(FakeClock())), print, print, max_pending=bad)
