"""BlockedCalls on a fake clock, with torch.distributed's functions replaced by fakes (no process
group): each outermost blocking call on the training thread is a wait, an asynchronous launch and
another thread's calls are not, nothing inside an aside call is; the last observer out gives
torch.distributed its functions back."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from trainperf.torch._dist_calls import BlockedCalls  # noqa: E402
from trainperf.torch._launches import LaunchWatch  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")


@pytest.fixture
def fakes(monkeypatch, clock):
    """``all_gather`` blocks 7 ms and ``all_reduce`` 3 ms on the fake clock; ``all_reduce`` with
    ``async_op=True`` returns a handle at once."""

    def all_gather(outputs, tensor, group=None, async_op=False):
        clock.advance(0.007)

    def all_reduce(tensor, op=None, group=None, async_op=False):
        if async_op:
            return torch.futures.Future()
        clock.advance(0.003)
        return None

    monkeypatch.setattr(dist, "all_gather", all_gather)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    return all_gather, all_reduce


def test_each_blocking_collective_on_the_thread_is_a_wait_and_a_launch_is_not(clock, fakes):
    waits: list[float] = []
    blocked = BlockedCalls(clock, waits.append)
    try:
        dist.all_gather([torch.zeros(1)], torch.zeros(1))
        dist.all_reduce(torch.zeros(1))
        handle = dist.all_reduce(torch.zeros(1), async_op=True)  # a comm hook's launch: nothing waited
        assert isinstance(handle, torch.futures.Future)
    finally:
        blocked.close()
    assert waits == [pytest.approx(0.007), pytest.approx(0.003)]


def test_a_frameworks_gather_counts_once_with_the_collective_inside_it(clock, fakes):
    waits: list[float] = []
    blocked = BlockedCalls(clock, waits.append)

    def gather(tensor):  # accelerate's gather: its own work around torch.distributed's
        clock.advance(0.001)
        dist.all_gather([tensor], tensor)
        dist.all_reduce(tensor)
        return tensor

    timed = blocked.timed(gather)
    try:
        assert timed(torch.ones(1)).item() == 1.0
    finally:
        blocked.close()
    assert waits == [pytest.approx(0.011)]
    timed(torch.ones(1))  # closed: the wrapper only passes the call on
    assert len(waits) == 1


def test_collectives_inside_an_aside_call_stay_in_it(clock, fakes):
    waits: list[float] = []
    blocked = BlockedCalls(clock, waits.append)

    def evaluate():
        dist.all_gather([torch.zeros(1)], torch.zeros(1))
        return "metrics"

    try:
        assert blocked.aside(evaluate)() == "metrics"
        dist.all_reduce(torch.zeros(1))  # after it: timed again
    finally:
        blocked.close()
    assert waits == [pytest.approx(0.003)]


def test_another_threads_collectives_are_not_the_training_threads_wait(clock, fakes):
    waits: list[float] = []
    blocked = BlockedCalls(clock, waits.append)
    try:
        worker = threading.Thread(target=lambda: dist.all_gather([torch.zeros(1)], torch.zeros(1)))
        worker.start()
        worker.join()
    finally:
        blocked.close()
    assert waits == [] and clock.now == pytest.approx(100.007)


def test_a_call_that_raises_is_still_a_wait(clock, monkeypatch):
    def barrier(group=None, async_op=False, device_ids=None):
        clock.advance(0.002)
        raise RuntimeError("timed out")

    monkeypatch.setattr(dist, "barrier", barrier)
    waits: list[float] = []
    blocked = BlockedCalls(clock, waits.append)
    try:
        with pytest.raises(RuntimeError, match="timed out"):
            dist.barrier()
    finally:
        blocked.close()
    assert waits == [pytest.approx(0.002)]


def test_torch_distributed_gets_its_functions_back_when_the_last_observer_leaves(clock, fakes):
    all_gather, all_reduce = fakes
    blocked = BlockedCalls(clock, lambda s: None)
    launches = LaunchWatch(clock)
    assert dist.all_gather is not all_gather and dist.distributed_c10d.all_reduce is not None
    blocked.close()
    assert dist.all_gather is not all_gather  # the launch watch still sees the calls
    launches.close()
    assert (dist.all_gather, dist.all_reduce) == (all_gather, all_reduce)
    blocked.close()  # idempotent
    assert dist.all_gather is all_gather
