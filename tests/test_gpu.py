"""On a real CUDA device: the timeline's events, zero synchronisations while training, the verdicts.

Every test here is marked ``gpu`` and skips where no CUDA device is present.
"""

from __future__ import annotations

import time
import warnings

import pytest
import torch

from trainperf import PerformanceListener
from trainperf.torch import CudaTimeline, attach

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")
#: DDP's runtime logging samples its first iterations (``Reducer::should_collect_runtime_stats``).
DDP_SAMPLES_FIRST = 10


class SleepyData(torch.utils.data.Dataset):
    def __init__(self, n, delay, rows=64):
        self.n, self.delay, self.rows = n, delay, rows

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.randn(self.rows, 512), torch.randint(0, 10, (self.rows,))


def model_and_opt(width=512, depth=2):
    layers = [torch.nn.Linear(512, width), torch.nn.ReLU()] if width != 512 else []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train(model, opt, batches, *, sync=False, listener=None, repeat=1):
    for x, y in batches:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        out = model(x)
        for _ in range(repeat - 1):
            out = out + model(x) * 0
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        if listener is not None:
            listener.set_score(loss.detach())
        if sync:
            loss.item()


def test_cuda_timeline_reads_completed_events_without_waiting():
    timeline = CudaTimeline(torch.device("cuda"))
    timeline.start()
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(3):
        timeline.begin()
        for _ in range(5):
            a = a @ a / 2048
        timeline.end()
    while not timeline.ready(3):
        time.sleep(0.001)
    times = timeline.take(3)
    assert len(times) == 3
    ends = [end for _, end in times]
    assert ends == sorted(ends) and ends[0] > 0
    assert all(begin is not None and begin <= end for begin, end in times)
    host = timeline.stage(torch.tensor(2.5, device="cuda"))
    timeline.end()
    timeline.wait()
    assert float(host) == 2.5


def count_syncs(fn):
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        fn()
    counts = dict.fromkeys(SYNC_CALLS, 0)
    for event in prof.events():
        for name in SYNC_CALLS:
            if name in event.name:
                counts[name] += 1
    return counts


def test_a_listener_adds_no_synchronisation_while_training():
    """The profiler counts the same synchronisations with and without a listener (frequency 5,
    score reported), between the first and the last step."""
    batches = [(torch.randn(64, 512), torch.randint(0, 10, (64,))) for _ in range(40)]
    model, opt = model_and_opt()
    train(model, opt, batches[:5])
    torch.cuda.synchronize()
    bare = count_syncs(lambda: train(model, opt, batches))
    listener = PerformanceListener(5, sinks=[], report_score=True)
    attach(model, listener)
    train(model, opt, batches[:5], listener=listener)
    torch.cuda.synchronize()
    listened = count_syncs(lambda: train(model, opt, batches, listener=listener))
    assert listened == bare
    listener.close()
    full = [r for r in listener.history if r.window_iterations == 5]
    assert full and all(r.score is not None for r in full)


def run(delay, *, sync, repeat, n=60):
    """A loader of ``delay`` seconds per batch and ``repeat`` forwards of a 2048-wide model on 2048
    rows per step: with ``repeat=10`` the GPU's work takes far longer than 4 ms of loading."""
    model, opt = model_and_opt(width=2048, depth=4)
    listener = PerformanceListener(10, sinks=[], history=None)
    attach(model, listener)
    loader = torch.utils.data.DataLoader(SleepyData(n, delay, rows=2048), batch_size=None, pin_memory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train(model, opt, loader, sync=sync, repeat=repeat)
        listener.close()
    out = [r for r in listener.history if not r.warmup and r.window_iterations == 10]
    assert out, "no full window past the warm-up"
    return out


def test_a_loader_hidden_behind_the_gpu_is_not_input_bound():
    records = run(0.004, sync=False, repeat=10)
    assert records
    assert all(r.device_idle_ms is not None for r in records)
    assert all(r.verdict.kind != "input-bound" for r in records)
    assert all(r.speedup_if_data_free < 1.1 for r in records)
    assert all(r.etl_ms >= 3.5 for r in records)


def test_a_slow_loader_with_a_sync_in_the_loop_is_input_bound_with_idle_near_the_fetch():
    records = run(0.020, sync=True, repeat=1)
    for r in records:
        assert r.verdict.kind == "input-bound"
        assert r.device_idle_ms == pytest.approx(r.etl_ms, rel=0.25)
        assert r.speedup_if_data_free > 1.5
        assert r.cuda_allocated_max_mb is not None and r.cuda_allocated_max_mb > 0


def test_the_timeline_records_on_the_stream_the_model_runs_on():
    timeline = CudaTimeline(torch.device("cuda"))
    side = torch.cuda.Stream()
    assert timeline.current_stream() == torch.cuda.current_stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        assert timeline.current_stream() == side
        timeline.start()
        timeline.begin()
        torch.cuda._sleep(200_000_000)  # about 0.1 s of device time, queued on the side stream only
        timeline.end()
    assert timeline.current_stream() == torch.cuda.current_stream()
    torch.cuda.current_stream().synchronize()  # the default stream is idle: an event there would be done
    assert not timeline.ready(1)  # the end event waits behind the side stream's work
    side.synchronize()
    assert timeline.ready(1)


def test_ddp_on_cuda_reads_its_phases_and_wait_from_events_without_synchronising():
    """One NCCL rank: the collective timing records CUDA events and reads them once completed; the
    profiler counts the same synchronisations as for the same loop without a listener.

    DDP times itself (its runtime logging, ``Logger::set_runtime_stats_and_log``) on the forwards
    that follow its first 10 iterations and every 100th: CUDA events it synchronises on, 4 figures
    of 2 ``cudaEventSynchronize`` each. Both counted stretches start past those forwards, and the
    sample rate is moved out of reach; after 5 warm-up steps the bare loop counted 6 of them (48)."""
    import os
    import socket

    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available() or dist.is_initialized():
        pytest.skip("needs NCCL and no process group yet")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        model, _ = model_and_opt()
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        if hasattr(ddp, "_set_ddp_runtime_logging_sample_rate"):
            ddp._set_ddp_runtime_logging_sample_rate(1_000_000)  # no sampled iteration after the first 10
        batches = [(torch.randn(64, 512), torch.randint(0, 10, (64,))) for _ in range(40)]
        train(ddp, opt, batches[:DDP_SAMPLES_FIRST + 1])  # the last sampled forward is the 11th
        torch.cuda.synchronize()
        bare = count_syncs(lambda: train(ddp, opt, batches))
        listener = PerformanceListener(5, sinks=[], verdict=False)
        attach(ddp, listener)
        train(ddp, opt, batches[:5])
        torch.cuda.synchronize()
        listened = count_syncs(lambda: train(ddp, opt, batches))
        listener.close()
        assert listened == bare
        timed = [r for r in listener.history if "wait_ms" in r.extra]
        assert timed and all(r.extra["wait_ms"] >= 0.0 and r.extra["backward_ms"] > 0.0 for r in timed)
        assert all(r.extra["step_ms"] > 0.0 and r.extra["forward_ms"] > 0.0 for r in timed if "step_ms" in r.extra)
    finally:
        dist.destroy_process_group()
