"""CollectiveTimer on one process (gloo, world of 1): the forward pass of training only, the
backward pass up to the last gradient, the wait to the end of the backward pass, the step; a user's
comm hook registered afterwards is wrapped and timed; on CUDA no host wait is recorded."""

from __future__ import annotations

import os
import socket
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from trainperf import PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402

pytestmark = [
    pytest.mark.realtime,
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]


@pytest.fixture(scope="module")
def group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class Net(torch.nn.Module):
    def __init__(self, forward_s: float = 0.0) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.forward_s = forward_s

    def forward(self, x):
        if self.forward_s:
            time.sleep(self.forward_s)
        return self.body(x)


def train(ddp, listener, iterations: int, *, loss_s=0.0, step_s=0.0, eval_s=0.0, hook=None) -> None:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    attach(ddp, listener)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    if step_s:
        opt.register_step_pre_hook(lambda *_: time.sleep(step_s))
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    for _ in range(iterations):
        opt.zero_grad()
        out = ddp(x)
        if loss_s:
            time.sleep(loss_s)
        torch.nn.functional.mse_loss(out, y).backward()
        opt.step()
        if eval_s:
            with torch.no_grad():
                ddp.module.forward_s, keep = eval_s, ddp.module.forward_s
                ddp.module(x)
                ddp.module.forward_s = keep
    listener.close()


def test_each_part_of_the_step_is_timed_where_it_happens(group):
    listener = PerformanceListener(4, sinks=[], verdict=False)
    ddp = torch.nn.parallel.DistributedDataParallel(Net(forward_s=0.01))
    train(ddp, listener, 12, loss_s=0.02, step_s=0.015, eval_s=0.03)
    steady = list(listener.history)[1:]
    for r in steady:
        extra = r.extra
        assert 10.0 <= extra["forward_ms"] < 10.0 + 8.0  # the training forward only, not the evaluation's
        assert 20.0 <= extra["backward_ms"] < 20.0 + 8.0
        assert 15.0 <= extra["step_ms"] < 15.0 + 8.0
        assert 0.0 <= extra["wait_ms"] < 5.0 and 0.0 <= extra["wait_p50_ms"] <= extra["wait_ms"] * 4 + 1.0
        # the evaluation forward is in the gap after the step (one rank: no iterable to tell it from data)
        assert r.etl_ms + r.other_ms >= 30.0
        assert "comm_ms" not in extra  # no comm hook: DDP's own all-reduce, untimed launch


def test_a_comm_hook_registered_after_attach_runs_inside_one_that_times_it(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls = []

    def slow_hook(state, bucket):
        calls.append(bucket.index())
        time.sleep(0.01)
        return default_hooks.allreduce_hook(dist.group.WORLD, bucket)

    listener = PerformanceListener(4, sinks=[], verdict=False)
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    train(ddp, listener, 8, hook=slow_hook)
    assert calls and ddp._comm_hooks and ddp._comm_hooks[-1][0] is slow_hook
    for r in list(listener.history)[1:]:
        assert 10.0 <= r.extra["comm_ms"] < 18.0
        assert r.extra["wait_ms"] < 5.0  # the hook's own time is not waiting


def test_no_host_wait_is_recorded_on_cuda(group):
    from trainperf.torch._collective import CollectiveTimer

    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    ddp.device_type = "cuda"  # as DDP sets it for a model on a GPU
    listener = PerformanceListener(4, sinks=[], verdict=False)
    timer = CollectiveTimer(ddp, listener.add_time, listener.add_sample, listener.clock)
    assert not timer.host_waits
    timer._last_ready, timer._forward_end = 2.0, 1.0
    timer._on_backward_end()
    assert "wait" not in listener._open._times and listener._open._times["backward"] == pytest.approx(1.0)
    timer.stop()
    listener.close()


def test_a_comm_hook_registered_before_attach_is_seen_where_it_launches(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    originals = dist.all_reduce, dist.distributed_c10d.all_reduce

    def slow_hook(state, bucket):
        time.sleep(0.01)
        return default_hooks.allreduce_hook(state, bucket)

    listener = PerformanceListener(4, sinks=[], verdict=False)
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    ddp.register_comm_hook(dist.group.WORLD, slow_hook)  # before attach: DDP takes no second hook
    train(ddp, listener, 8)
    for r in list(listener.history)[1:]:
        assert 10.0 <= r.extra["comm_ms"] < 18.0, r.extra
        assert r.extra["wait_ms"] < 5.0, r.extra  # the hook's time before its launch is not waiting
    # closed: torch.distributed has its own functions back
    assert (dist.all_reduce, dist.distributed_c10d.all_reduce) == originals


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
