"""CollectiveTimer on one process (gloo, world of 1): the forward pass of training only, the
backward pass up to the last gradient, the wait to the end of the backward pass, the step; a user's
comm hook registered afterwards is wrapped and timed; on CUDA no host wait is recorded, and the
phases and the wait are the device's, read off events (here a fake device's, on a fake clock)."""

from __future__ import annotations

import os
import socket
import time
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from conftest import FakeClock  # noqa: E402
from fake_device import FakeDevice, FakeEvents  # noqa: E402
from trainperf import PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402
from trainperf.torch._collective import CollectiveTimer  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
realtime = pytest.mark.realtime


@pytest.fixture(scope="module")
def group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class Stopwatch:
    """Sleeps and keeps how long each really took, by part (a loaded machine oversleeps): the truth the
    reported figures are compared with, read in the same run."""

    def __init__(self) -> None:
        self.took: dict[str, list[float]] = {}

    def nap(self, part: str, seconds: float) -> None:
        began = time.perf_counter()
        time.sleep(seconds)
        self.took.setdefault(part, []).append(1000.0 * (time.perf_counter() - began))

    def window_ms(self, part: str, window: int, frequency: int) -> float:
        """The mean milliseconds of ``part`` per iteration in the 1-based ``window`` of ``frequency`` iterations."""
        naps = self.took[part][(window - 1) * frequency:window * frequency]
        return sum(naps) / len(naps)


WATCH = Stopwatch()


class Net(torch.nn.Module):
    def __init__(self, forward_s: float = 0.0) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.forward_s = forward_s
        self.part = "forward"

    def forward(self, x):
        if self.forward_s:
            WATCH.nap(self.part, self.forward_s)
        return self.body(x)


def train(ddp, listener, iterations: int, *, loss_s=0.0, step_s=0.0, eval_s=0.0, hook=None) -> None:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    attach(ddp, listener)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    if step_s:
        opt.register_step_pre_hook(lambda *_: WATCH.nap("step", step_s))
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    for _ in range(iterations):
        opt.zero_grad()
        out = ddp(x)
        if loss_s:
            WATCH.nap("loss", loss_s)
        torch.nn.functional.mse_loss(out, y).backward()
        opt.step()
        if eval_s:
            with torch.no_grad():
                ddp.module.forward_s, keep = eval_s, ddp.module.forward_s
                ddp.module.part = "evaluation"
                ddp.module(x)
                ddp.module.forward_s, ddp.module.part = keep, "forward"
    listener.close()


@realtime
def test_each_part_of_the_step_is_timed_where_it_happens(group):
    """Each part against the stopwatch of its sleeps in the same window: at least what they took, and no
    more than a few milliseconds of the tiny model's own work beside them."""
    WATCH.took.clear()
    listener = PerformanceListener(4, sinks=[], verdict=False)
    ddp = torch.nn.parallel.DistributedDataParallel(Net(forward_s=0.01))
    train(ddp, listener, 12, loss_s=0.02, step_s=0.015, eval_s=0.03)
    steady = list(listener.history)[1:]
    for k, r in enumerate(steady, start=2):
        extra = r.extra
        forward, loss, step = (WATCH.window_ms(part, k, 4) for part in ("forward", "loss", "step"))
        assert forward <= extra["forward_ms"] < forward + 8.0  # the training forward only, not the evaluation's
        assert loss <= extra["backward_ms"] < loss + 8.0
        assert step <= extra["step_ms"] < step + 8.0
        # one rank waits for no other: far less than the loss's time, which a wait that took it in would hold
        assert 0.0 <= extra["wait_ms"] < 0.5 * loss and 0.0 <= extra["wait_p50_ms"] <= extra["wait_ms"] * 4 + 1.0
        # the evaluation forward is in the gap after the step (one rank: no iterable to tell it from data)
        assert r.etl_ms + r.other_ms >= 30.0
        assert "comm_ms" not in extra  # no comm hook: DDP's own all-reduce, untimed launch


@realtime
def test_a_comm_hook_registered_after_attach_runs_inside_one_that_times_it(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls = []

    def slow_hook(state, bucket):
        calls.append(bucket.index())
        WATCH.nap("hook", 0.01)
        return default_hooks.allreduce_hook(dist.group.WORLD, bucket)

    WATCH.took.clear()
    listener = PerformanceListener(4, sinks=[], verdict=False)
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    train(ddp, listener, 8, hook=slow_hook)
    assert calls and ddp._comm_hooks and ddp._comm_hooks[-1][0] is slow_hook
    assert len(calls) == 8  # one bucket: one call per iteration, so the stopwatch's windows are the listener's
    for k, r in enumerate(list(listener.history)[1:], start=2):
        hook = WATCH.window_ms("hook", k, 4)
        assert hook <= r.extra["comm_ms"] < hook + 8.0
        assert r.extra["wait_ms"] < 0.5 * hook  # the hook's own time is not waiting


def test_no_host_wait_is_recorded_on_cuda(group):
    """On CUDA the host's times are launch times: the end of the backward pass is an event instead."""
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    ddp.device_type = "cuda"  # as DDP sets it for a model on a GPU
    listener = PerformanceListener(4, sinks=[], verdict=False)
    events = FakeEvents(FakeDevice(FakeClock(0.0)))
    events.completed_up_to = -1.0  # the device has not reached the event yet
    timer = CollectiveTimer(ddp, listener.add_time, listener.add_sample, listener.clock, events=events)
    assert not timer.host_waits and timer.device_phases is not None
    timer._last_ready, timer._forward_end = 2.0, 1.0
    timer._on_backward_end()
    assert "wait" not in listener._open._times and "backward" not in listener._open._times
    assert events.calls["record"] == 1 and timer.device_phases.pending == 1
    timer.stop()
    assert timer.device_phases is None and len(events.free) == events.created == 1
    listener.close()


class Launch(torch.autograd.Function):
    """Identity whose backward queues ``seconds`` of work on a fake device (the backward kernels)."""

    @staticmethod
    def forward(ctx, x, device, seconds):
        ctx.device, ctx.seconds = device, seconds
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.device.launch(ctx.seconds)
        return grad, None, None


class DeviceNet(Net):
    """A model on a fake device: its forward queues ``forward_s`` of device work, its backward
    ``backward_s`` before any parameter's gradient; each launch costs 0.1 ms of host time."""

    def __init__(self, device, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.device, self.forward_s_device, self.backward_s = device, forward_s, backward_s

    def forward(self, x):
        self.device.clock.advance(0.0001)
        self.device.launch(self.forward_s_device)
        return Launch.apply(self.body(x), self.device, self.backward_s)


def device_loop(*, cuda: bool, steps: int, micro: int = 1):
    """DDP on a fake device (flagged as CUDA with ``cuda``): forward 10 ms, backward 20 ms, an
    all-reduce of 3 ms launched by a comm hook, an optimizer step of 5 ms, all device time; the
    timer gets the fake device's events. Returns the figures handed to the listener, the events,
    the device and the timer (stopped)."""
    clock = FakeClock(0.0)
    device = FakeDevice(clock, max_ahead_s=10.0)  # launches never block the host here
    events = FakeEvents(device)
    ddp = torch.nn.parallel.DistributedDataParallel(DeviceNet(device, 0.010, 0.020))
    if cuda:
        ddp.device_type = "cuda"
    got: dict[str, list[float]] = defaultdict(list)
    timer = CollectiveTimer(ddp, lambda n, s: got[n].append(s), lambda n, s: got[n].append(s), clock, events=events)
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    def allreduce(state, bucket):
        device.launch(0.003)  # the all-reduce, which the compute stream waits for at the end of backward
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(dist.group.WORLD, allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    for _ in range(steps):
        opt.zero_grad()
        for k in range(micro):
            syncs = k == micro - 1
            with ddp.no_sync() if not syncs else torch.enable_grad():
                timer.before_forward((), {})
                out = ddp(x)
                timer.after_forward()
                torch.nn.functional.mse_loss(out, y).backward()
        opt.step()
        clock.advance(0.0001)
        device.launch(0.005)
        timer.on_step(clock.now)
    syncs = device.user_syncs
    device.synchronize()  # the test's wait, so that every event can be read
    if timer.device_phases is not None:
        timer.device_phases.poll()
    assert syncs == 0
    timer.stop()
    return got, events, device, timer


def test_on_cuda_the_phases_and_the_wait_are_the_devices_time(group):
    got, events, device, timer = device_loop(cuda=True, steps=8)
    assert not timer.host_waits
    assert got["forward"][1:] == pytest.approx([0.010] * 7)  # the host took 0.1 ms to launch it
    assert got["backward"][1:] == pytest.approx([0.020] * 7)
    assert got["wait"] == pytest.approx([0.003] * 8)  # from the last gradient to the all-reduce's end
    assert got["step"] == pytest.approx([0.005] * 8)
    assert "comm" not in got  # the hook took no host time
    assert set(events.calls) <= {"record", "done", "elapsed_s", "release"}
    assert len(events.free) == events.created  # every event given back (the first pass marked each gradient)


def test_on_cuda_no_sync_micro_batches_give_no_wait(group):
    got, _, _, _ = device_loop(cuda=True, steps=5, micro=3)
    assert len(got["wait"]) == 5 and got["wait"] == pytest.approx([0.003] * 5)
    assert len(got["forward"]) == len(got["backward"]) == 15
    assert got["step"] == pytest.approx([0.005] * 5)


def test_on_the_cpu_nothing_changes_and_no_event_is_recorded(group):
    got, events, _, timer = device_loop(cuda=False, steps=4)
    assert timer.host_waits and timer.device_phases is None and events.calls == {}
    # the host's own times, on the fake clock that only launches move
    assert got["forward"] == pytest.approx([0.0001] * 4)
    assert len(got["wait"]) == 4 and len(got["step"]) == 4


@realtime
def test_a_comm_hook_registered_before_attach_is_seen_where_it_launches(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    originals = dist.all_reduce, dist.distributed_c10d.all_reduce

    def slow_hook(state, bucket):
        WATCH.nap("hook", 0.01)
        return default_hooks.allreduce_hook(state, bucket)

    WATCH.took.clear()
    listener = PerformanceListener(4, sinks=[], verdict=False)
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    ddp.register_comm_hook(dist.group.WORLD, slow_hook)  # before attach: DDP takes no second hook
    train(ddp, listener, 8)
    assert len(WATCH.took["hook"]) == 8  # one bucket: the stopwatch's windows are the listener's
    for k, r in enumerate(list(listener.history)[1:], start=2):
        hook = WATCH.window_ms("hook", k, 4)
        assert hook <= r.extra["comm_ms"] < hook + 8.0, r.extra
        assert r.extra["wait_ms"] < 0.5 * hook, r.extra  # the hook's time before its launch is not waiting
    # closed: torch.distributed has its own functions back
    assert (dist.all_reduce, dist.distributed_c10d.all_reduce) == originals


@realtime
def test_with_gradient_accumulation_only_the_synced_backward_gives_a_wait(group):
    listener = PerformanceListener(3, sinks=[], verdict=False)
    samples: list[tuple[str, float]] = []
    times: list[str] = []
    add_sample, add_time = listener.add_sample, listener.add_time
    listener.add_sample = lambda name, s: (samples.append((name, s)), add_sample(name, s))  # type: ignore[method-assign]
    listener.add_time = lambda name, s: (times.append(name), add_time(name, s))  # type: ignore[method-assign]
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    attach(ddp, listener)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    steps, micro = 6, 4
    for _ in range(steps):
        opt.zero_grad()
        for k in range(micro):
            if k < micro - 1:
                with ddp.no_sync():
                    torch.nn.functional.mse_loss(ddp(x), y).backward()
            else:
                torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    listener.close()
    # one wait per optimizer step, from the backward pass outside no_sync (the very first backward
    # pass, under no_sync, finds the last gradient)
    assert [name for name, _ in samples] == ["wait"] * steps
    # every micro-batch's forward and backward count toward the rank's own time
    assert times.count("forward") == steps * micro
    assert times.count("backward") == steps * micro
    assert times.count("step") == steps


def test_a_frameworks_own_collective_waits_join_the_wait_and_leave_backward_and_step(group):
    """A framework's collective blocks 15 ms between the forward pass and backward() (a reduce of a
    logged value) and 10 ms between the backward pass and the optimizer step; its adapter hands the
    stopwatch's reading to add_wait: 25 ms of wait per iteration, none of it backward or step time."""
    listener = PerformanceListener(4, sinks=[], verdict=False)
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    timer = attach(ddp, listener)._collective
    x, y = torch.randn(4, 8), torch.randn(4, 1)

    def blocked(seconds: float) -> None:
        began = time.perf_counter()
        time.sleep(seconds)
        timer.add_wait(time.perf_counter() - began)

    for _ in range(12):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        blocked(0.015)
        loss.backward()
        blocked(0.010)
        opt.step()
    listener.close()
    for r in list(listener.history)[1:]:
        extra = r.extra
        assert 25.0 <= extra["wait_ms"] < 25.0 + 8.0, extra
        assert extra["backward_ms"] < 8.0 and extra["step_ms"] < 8.0, extra
