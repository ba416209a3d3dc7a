"""Ranks of a real ``torch.distributed`` run (gloo, started locally): rank 0's cluster line names the
rank that holds the others back and why, clocks are estimated, a rank that dies is marked silent
without holding the others, and rank 0 gets every rank's files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from _ranks import end_rank, free_port, run_forked  # noqa: E402

pytestmark = [
    pytest.mark.realtime,
    pytest.mark.integration,  # whole multi-process runs: the integration command
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]


@dataclass
class Plan:
    """What each rank of a run does."""

    world: int = 2
    iterations: int = 40
    frequency: int = 5
    cluster_every: int = 2
    timeout_s: float = 20.0
    ddp: bool = False  # else the gradients are all-reduced by hand, which keeps the ranks in lock-step too
    lockstep: bool = True
    data_delay: dict[int, float] = field(default_factory=dict)  # rank -> seconds per batch
    forward_delay: dict[int, float] = field(default_factory=dict)  # rank -> seconds per forward pass
    wall_shift: dict[int, float] = field(default_factory=dict)  # rank -> seconds added to its wall clock
    exit_after: dict[int, int] = field(default_factory=dict)  # rank -> iterations before it dies
    kill_after: dict[int, int] = field(default_factory=dict)  # rank -> iterations before it is SIGKILLed
    listen: tuple[int, ...] | None = None  # the ranks with a listener (None: all)


class Sleepy(torch.utils.data.Dataset):
    def __init__(self, delay: float, n: int) -> None:
        self.delay, self.n = delay, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return torch.randn(8, 4), torch.randn(8, 1)


class SlowLinear(torch.nn.Module):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
        self.delay = delay

    def forward(self, x):
        if self.delay:
            time.sleep(self.delay)
        return self.linear(x)


def worker(rank: int, port: int, out: str, plan: Plan) -> None:
    import warnings

    from trainperf import PerformanceListener
    from trainperf.torch import attach

    warnings.simplefilter(os.environ.get("TP_WARN", "ignore"))
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=plan.world)
    torch.manual_seed(0)
    model = SlowLinear(plan.forward_delay.get(rank, 0.0))
    if plan.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    shift = plan.wall_shift.get(rank, 0.0)
    listener = None
    if plan.listen is None or rank in plan.listen:
        listener = PerformanceListener(plan.frequency, sinks=[], verdict=False,
                                       run_dir=os.path.join(out, f"own-{rank}"),
                                       cluster_every=plan.cluster_every, cluster_timeout_s=plan.timeout_s,
                                       wall_clock=lambda: time.time() + shift)
        attach(model, listener)
    loader = torch.utils.data.DataLoader(Sleepy(plan.data_delay.get(rank, 0.0), plan.iterations), batch_size=None)
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(loader):
            if i == plan.exit_after.get(rank):
                os._exit(3)
            if i == plan.kill_after.get(rank):
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            if plan.lockstep and not plan.ddp:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
            opt.step()
        seconds = time.monotonic() - started
        cluster = None if listener is None else next(s for s in listener.sinks if type(s).__name__ == "Cluster")
        if listener is not None:
            listener.close()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"lines": cluster.lines if cluster else [],
                   "offsets": {str(k): v for k, v in cluster.offsets.items()} if cluster else {},
                   "silent": {str(k): v for k, v in cluster.silent.items()} if cluster else {},
                   "warnings": [str(w.message) for w in caught if "trainperf" in str(w.message)],
                   "seconds": seconds, "closed_in": time.monotonic() - started - seconds}, f)
    dist.destroy_process_group()
    end_rank()  # the model still holds the group: freeing it can deadlock in torch (see end_rank)


def run_ranks(plan: Plan, out, limit_s: float = 120.0) -> list[int | None]:
    """Every rank's exit code (``None``: killed at ``limit_s``)."""
    return run_forked(worker, plan.world, (str(out), plan), limit_s)


def read(out, rank: int) -> dict:
    return json.loads((out / f"rank{rank}.json").read_text())


def test_rank_zero_names_the_rank_with_the_slow_loader_and_gets_every_ranks_files(tmp_path):
    assert run_ranks(Plan(ddp=True, data_delay={0: 0.001, 1: 0.03}), tmp_path) == [0, 0]
    rank0 = read(tmp_path, 0)
    assert rank0["lines"], "rank 0 logged no cluster line"
    assert all("straggler rank 1 (data" in line for line in rank0["lines"]), rank0["lines"]
    offset, uncertainty = read(tmp_path, 1)["offsets"]["1"]
    assert abs(offset) < 0.001 and 0 <= uncertainty < 0.005  # one machine: one clock
    # rank 0's own run directory alone holds both ranks (their disks are not shared here)
    assert (tmp_path / "own-0" / "rank-1" / "windows.jsonl").exists()
    assert json.loads((tmp_path / "own-1" / "rank-1" / "meta.json").read_text())["rank"] == 1
    assert not (tmp_path / "own-1" / "rank-0").exists()  # the listener moved to its rank's folder
    from trainperf import build_report

    report = build_report(tmp_path / "own-0")
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [s["rank"] for s in report["stragglers"]] == [1]
    assert report["stragglers"][0]["cause"] == "data"


SHIFT_S = 5.0


def test_slow_forward_is_named_forward_and_a_shifted_clock_is_measured(tmp_path):
    """Rank 1's forward pass sleeps and its wall clock runs ``SHIFT_S`` ahead. Offsets are what to
    add to a rank's clock to get rank 0's (aligned = local + offset), so rank 1's is ``-SHIFT_S``."""
    plan = Plan(forward_delay={1: 0.03}, wall_shift={1: SHIFT_S})
    assert run_ranks(plan, tmp_path) == [0, 0]
    rank0 = read(tmp_path, 0)
    assert rank0["lines"], "rank 0 logged no cluster line"
    assert all("straggler rank 1 (forward" in line for line in rank0["lines"]), rank0["lines"]
    offset, uncertainty = read(tmp_path, 1)["offsets"]["1"]
    # within 1 ms, widened by the estimate's own uncertainty (half its best round trip), which a busy
    # machine can push past a millisecond
    tolerance = 0.001 + min(uncertainty, 0.002)
    assert abs(offset + SHIFT_S) < tolerance and 0 <= uncertainty < 0.005
    clock_file = tmp_path / "own-1" / "rank-1" / "clock.jsonl"
    clock_lines = [json.loads(line) for line in clock_file.read_text().splitlines()]
    assert clock_lines
    assert all(abs(c["offset_s"] + SHIFT_S) < 0.001 + min(c["uncertainty_s"], 0.002) for c in clock_lines)
    assert all(c["status"] == "aligned" for c in clock_lines)
    from trainperf import build_report

    report = build_report(tmp_path / "own-0")
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [(s["rank"], s["cause"]) for s in report["stragglers"]] == [(1, "forward")]
    clocks = {c["rank"]: c for c in report["clocks"]}
    assert clocks[0]["status"] == "reference" and clocks[0]["offset_ms"] == 0.0
    assert clocks[1]["status"] == "aligned" and abs(clocks[1]["offset_ms"] + 1000 * SHIFT_S) < 1000 * tolerance


def test_a_rank_that_dies_is_marked_silent_and_the_others_finish_within_the_timeout(tmp_path):
    """Rank 2 exits after 15 of 60 iterations (three reports); ranks 0 and 1 wait for it at most
    ``timeout_s`` once, finish, and rank 0's report names rank 2 silent since it stopped."""
    timeout_s = 3.0
    plan = Plan(world=3, iterations=60, cluster_every=1, timeout_s=timeout_s, lockstep=False,
                data_delay={0: 0.01, 1: 0.01, 2: 0.01}, exit_after={2: 15})
    begun = time.time()
    codes = run_ranks(plan, tmp_path, limit_s=60.0)
    assert codes == [0, 0, 3]
    rank0, rank1 = read(tmp_path, 0), read(tmp_path, 1)
    # 60 iterations of 10 ms, one wait for the dead rank, the rest is slack for a busy machine
    assert rank0["seconds"] < 0.6 + timeout_s + 8.0 and rank1["seconds"] < 0.6 + timeout_s + 8.0
    assert list(rank0["silent"]) == ["2"]
    from trainperf import build_report

    report = build_report(tmp_path / "own-0")
    assert [r["rank"] for r in report["ranks"]] == [0, 1]  # rank 2 never sent its files
    assert [s["rank"] for s in report["silent"]] == [2]
    since = report["silent"][0]["since"]
    assert begun < since < time.time()
    assert rank0["lines"]
    # named once: at rank 0's close as dead, or during the run as silent when training outlasts timeout_s
    said = rank0["warnings"]
    assert len(said) == 1 and ("rank 2 died: no heartbeat" in said[0] or "rank 2 went silent" in said[0]), said


def test_a_listener_on_rank_zero_alone_never_stops_ddp_training(tmp_path):
    """The common "log on rank 0" pattern: rank 1 has no listener. Training ends on both ranks, rank 0
    warns once (after ``timeout_s``, from its link's thread) and keeps its own figures."""
    plan = Plan(ddp=True, iterations=60, listen=(0,), timeout_s=1.0, data_delay={0: 0.03, 1: 0.03})
    assert run_ranks(plan, tmp_path, limit_s=60.0) == [0, 0]
    rank0 = read(tmp_path, 0)
    # its close waits for the others at most what is left of timeout_s since it started
    assert rank0["seconds"] < 0.03 * 60 + 8.0 and rank0["closed_in"] < plan.timeout_s + 1.0, rank0
    assert len(rank0["warnings"]) == 1 and "no other rank linked" in rank0["warnings"][0], rank0["warnings"]
    assert (tmp_path / "own-0" / "rank-0" / "windows.jsonl").exists()


def test_a_rank_killed_under_ddp_is_named_by_rank_zero(tmp_path):
    """Rank 2 is SIGKILLed: the others' all-reduce fails and they end without closing; rank 0 names
    rank 2 as the one that died, and the report says so."""
    plan = Plan(world=3, ddp=True, iterations=60, cluster_every=1, timeout_s=5.0, kill_after={2: 25},
                data_delay={0: 0.005, 1: 0.005, 2: 0.005})
    codes = run_ranks(plan, tmp_path, limit_s=60.0)
    assert codes[2] == -9 and codes[:2] == [1, 1]
    from trainperf import build_report

    events = [json.loads(line) for line in (tmp_path / "own-0" / "rank-0" / "events.jsonl").read_text().splitlines()]
    assert [e["rank"] for e in events if e["kind"] == "silent"] == [2], events
    assert [s["rank"] for s in build_report(tmp_path / "own-0")["silent"]] == [2]


#: What the closing tests' ranks keep till their process ends: freeing a DDP model whose gloo group is
#: destroyed can deadlock in torch itself (see ``_ranks.end_rank``); a rank's target returns normally.
_KEPT: list[object] = []

def closing_worker(rank: int, port: int, out: str, every: int, lag_s: float) -> None:
    """One rank of 3 under DDP: frequency 5, 500 iterations, a gather every ``every`` reports; rank 2
    closes ``lag_s`` after the others (rank 0's close then waits for it); every rank destroys the
    process group and returns, which ``multiprocessing`` turns into exit status 0."""
    import warnings

    from trainperf import PerformanceListener
    from trainperf.torch import attach

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=3)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    _KEPT.append(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    listener = PerformanceListener(5, sinks=[], verdict=False, run_dir=os.path.join(out, f"own-{rank}"),
                                   cluster_every=every)  # the default cluster_timeout_s: 30 s
    attach(model, listener)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(500):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        if rank == 2:
            time.sleep(lag_s)
        began, began_wall, cpu = time.perf_counter(), time.time(), time.process_time()
        listener.close()
        took, cpu = time.perf_counter() - began, time.process_time() - cpu
    ours = [t.name for t in threading.enumerate() if t.name.startswith("trainperf-cluster")]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"took": took, "cpu": cpu, "began": began_wall, "ended": began_wall + took, "threads": ours,
                   "warnings": [str(w.message) for w in caught if "trainperf" in str(w.message)]}, f)
    dist.destroy_process_group()


# 10 gathers, the last a clock round (with every rank closing at once, or rank 2 a second later); 9 gathers
@pytest.mark.parametrize(("every", "lag_s"), [(10, 0.0), (10, 1.0), (11, 1.0)])
def test_every_rank_closes_at_once_whatever_the_gathers_and_exits_cleanly(tmp_path, every, lag_s):
    """Each close returns within 2 s of the rank's own call, rank 0's as soon as the last goodbye is
    there (using a small share of a core while it waits); no thread of the link is left after close,
    no warning is given, and every process ends with status 0."""
    assert run_forked(closing_worker, 3, (str(tmp_path), every, lag_s), 120.0) == [0, 0, 0]
    ranks = [read(tmp_path, r) for r in range(3)]
    assert [r["warnings"] for r in ranks] == [[], [], []]
    assert [r["threads"] for r in ranks] == [[], [], []]
    assert ranks[1]["took"] < 2.0 and ranks[2]["took"] < 2.0, ranks
    rank0 = ranks[0]
    # the stopwatch: rank 2's own close, which ends with its goodbye
    assert rank0["took"] < lag_s + 2.0 and rank0["ended"] - ranks[2]["ended"] < 0.5, ranks
    if lag_s:  # a wait to speak of: what close itself does (files to write) is not waiting
        assert rank0["cpu"] <= 0.1 * rank0["took"], rank0
    assert (tmp_path / "own-0" / "rank-2" / "windows.jsonl").exists()


def test_each_ranks_interpreter_exits_cleanly_with_or_without_a_close(tmp_path):
    """Three interpreters, as a launcher starts them: ranks 0 and 1 close, rank 2 never does (its link
    stops at interpreter exit); every rank destroys the process group and ends. None may abort (a
    thread inside a store call when the interpreter ends does), and rank 0 names rank 2 as a rank
    that ended without closing, not as one that died."""
    script = os.path.join(os.path.dirname(__file__), "_close_rank.py")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="3",
               PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, script, str(tmp_path)], env=dict(env, RANK=str(r)),
                              stderr=subprocess.PIPE, text=True) for r in range(3)]
    try:
        errors = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    assert not any("terminate called" in e for e in errors), errors
    rank0 = read(tmp_path, 0)
    assert rank0["took"] < 2.0 and rank0["threads"] == [], rank0
    assert len(rank0["warnings"]) == 1 and "rank 2 ended without closing" in rank0["warnings"][0], rank0
