"""The goodput account of real jobs, against a stopwatch taken in the same run: each adapter trains a
small model in a child process that sleeps 3 s before importing torch, evaluates for 1 s every 50
iterations, saves a checkpoint for 2 s every 100, loads 20 ms batches for iterations 121-170, and kills
itself (SIGKILL) after iteration 250; 5 s later a second attempt loads the checkpoint of iteration 200
(0.7 s) and trains to 300. Each rank's rows are what its stopwatch saw (5% or 50 ms), add up to its
wall time (1%), and count 50 iterations lost and 300 of net progress; with two ranks, the job's wall
time is the slowest rank's. The jobs are in ``tests/goodput_jobs/``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent / "goodput_jobs"))

from harness import Job, run_job  # noqa: E402

from trainperf import read_goodput  # noqa: E402

pytestmark = [pytest.mark.realtime, pytest.mark.integration]  # whole multi-process jobs: the integration command

JOBS = [("attach", 1), ("attach", 2), ("lightning", 1), ("lightning", 2), ("trainer", 1), ("trainer", 2)]
NEEDS = {"attach": "torch", "lightning": "pytorch_lightning", "trainer": "transformers"}
INJECTED = ("startup", "eval", "checkpoint_save", "data_wait", "restart_gaps")


def close_to(row: float, watched: float) -> bool:
    return abs(row - watched) <= max(0.05 * watched, 0.050)


@pytest.fixture(scope="module", params=JOBS, ids=[f"{a}-{w}rank" for a, w in JOBS])
def job(request, tmp_path_factory) -> tuple[Job, object]:
    adapter, world = request.param
    pytest.importorskip(NEEDS[adapter])
    done = run_job(adapter, world, tmp_path_factory.mktemp(f"{adapter}-{world}"))
    return done, read_goodput(done.run_dir)


def table(account, watch) -> str:
    injected = watch.injected()
    return "\n".join(f"{row:>16} {account.rows[row]:9.3f} s  stopwatch {injected[row]:9.3f} s" for row in injected)


def test_each_injected_row_is_what_the_stopwatch_saw(job):
    done, account = job
    assert set(account.ranks) == set(done.ranks)
    for rank, watch in done.ranks.items():
        own, injected = account.ranks[rank], watch.injected()
        print(f"rank {rank}, wall {own.wall_s:.3f} s, stopwatch {watch.wall_s:.3f} s\n{table(own, watch)}")
        for row in INJECTED:
            assert close_to(own.rows[row], injected[row]), (rank, row, own.rows[row], injected[row], done.logs)


def test_the_rows_add_up_to_the_stopwatch_s_wall_time_with_50_iterations_lost(job):
    done, account = job
    for rank, watch in done.ranks.items():
        own = account.ranks[rank]
        assert sum(own.rows.values()) == pytest.approx(own.wall_s)
        assert own.wall_s == pytest.approx(watch.wall_s, rel=0.01), rank
        assert own.lost_iterations == 50 and own.net_progress == 300, rank
        assert [(a.start_iteration, a.reached, a.clean) for a in own.attempts] == [(0, 250, False), (200, 300, True)]
    assert account.wall_s == pytest.approx(max(a.wall_s for a in account.ranks.values()))
    assert account.lost_iterations == 50 and account.net_progress == 300


def test_the_checkpoint_load_row_is_what_the_stopwatch_saw(job):
    done, account = job
    for rank, watch in done.ranks.items():
        own, injected = account.ranks[rank], watch.injected()
        assert injected["checkpoint_load"] > 0.5  # the second attempt loaded its checkpoint
        assert close_to(own.rows["checkpoint_load"], injected["checkpoint_load"]), (rank, own.rows, injected)
