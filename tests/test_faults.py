"""Fault injection on real DDP ranks (gloo, CPU): one rank slowed by 25 ms per iteration in one phase
at a time; every window must name that rank with the right cause, and healthy windows no one.
See ``tests/_faults.py``; ``benchmarks/fault_matrix.py`` runs the full matrix on 2, 3 and 4 ranks."""

from __future__ import annotations

import json
import statistics

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from _faults import EXPECTED, Plan, Scenario, judge, run, share  # noqa: E402

pytestmark = [
    pytest.mark.realtime,
    pytest.mark.integration,  # whole multi-process runs: the integration command
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

FAULTS = [f for f in EXPECTED if f != "none"]


def _check(plan: Plan, tmp_path) -> None:
    assert run(plan, tmp_path) == [0] * plan.world
    outcomes = [judge(tmp_path / s.name, s, plan) for s in plan.scenarios]
    for o in outcomes:
        s = o.scenario
        if s.fault == "none":
            assert o.report == [], s.name
            continue
        assert o.acting >= plan.windows // s.every, s.name
        # every window on a machine that may be busy: allow one in ten to go astray, never a wrong report
        assert o.right >= 0.9 * o.acting, (s.name, o.wrong)
        assert o.report[:1] == [(s.slow_rank, s.expected)], (s.name, o.report)
    for s in plan.scenarios:  # every window's forward pass is a real one, the warm-up window's too
        for rank in range(plan.world):
            for line in (tmp_path / s.name / f"rank-{rank}" / "windows.jsonl").read_text().splitlines():
                w = json.loads(line)
                forward = w["extra"].get("forward_ms")
                assert forward is not None and 0.0 <= forward <= w["iteration_ms"], (s.name, rank, w)
    right, false_alarms, healthy = share(outcomes)
    assert right >= 0.95
    assert false_alarms <= 0.05 * max(healthy, 1)


def test_two_ranks_every_fault_in_a_dataloader_loop(tmp_path):
    scenarios = tuple(Scenario(f, 0 if f == "host" else 1) for f in FAULTS) + (Scenario("none"),)
    _check(Plan(2, scenarios, windows=6), tmp_path)


def test_three_ranks_every_fault_with_batchnorm_in_a_generator_loop_and_an_intermittent_straggler(tmp_path):
    scenarios = tuple(Scenario(f, 0 if f == "host" else 2, "generator", bn=True) for f in FAULTS)
    scenarios += (Scenario("none", 1, "generator", bn=True), Scenario("forward", 1, "loader", every=3))
    plan = Plan(3, scenarios, windows=6)
    _check(plan, tmp_path)
    intermittent = judge(tmp_path / scenarios[-1].name, scenarios[-1], plan)
    # slowed in the third and sixth of seven windows (the first is warm-up): those ending at 15 and 30
    assert intermittent.report_windows == [15, 30]


def test_three_ranks_in_the_shapes_real_runs_have(tmp_path):
    """Accumulation under no_sync, a checkpoint every 5th step, two slow ranks with different causes,
    a comm hook registered before attach, ranks reporting at different frequencies."""
    scenarios = (
        Scenario("data", 1, accumulate=4),
        Scenario("host", 0, delay_ms=100.0, period=5),
        Scenario("data", 2, delay_ms=40.0, also=("forward", 1, 25.0)),
        Scenario("hook", 2, hook_before=True),
        Scenario("data", 1, frequencies=(5, 10, 5)),
    )
    plan = Plan(3, scenarios, windows=6)
    assert run(plan, tmp_path) == [0] * plan.world
    for s in scenarios:
        o = judge(tmp_path / s.name, s, plan)
        assert o.named_over_run, (s.name, o.report, o.pattern)
        assert set(o.report) == s.named, (s.name, o.report)  # nobody else
        for named in s.named:
            assert f"straggler rank {named[0]} ({named[1]}" in o.headline, (s.name, o.headline)
        if s.period > 1:
            # 100 ms and a little: the sleep's own overshoot
            assert o.pattern.startswith("every 5th iteration, 10") and o.pattern.endswith(" ms of host time"), o.pattern
            continue
        assert o.acting >= 2 and o.right >= 0.9 * o.acting, (s.name, o.wrong)


def test_two_ranks_with_gradient_accumulation_name_the_slow_loader_and_count_every_micro_batchs_wait(tmp_path):
    """Four micro-batches per optimizer step, the first three under ``no_sync``; rank 1's batches each
    take 25 ms longer, from a DataLoader and from a generator, with one micro-batch per step as the
    control. Every window names rank 1 and ``data``; its data wait holds every micro-batch's (about
    4 x 25 ms per step), and it is the rank that waits least in the collectives."""
    scenarios = (Scenario("data", 1), Scenario("data", 1, accumulate=4), Scenario("data", 1, "generator", accumulate=4))
    plan = Plan(2, scenarios, windows=8)
    _check(plan, tmp_path)
    for s in scenarios:
        per_rank = {}
        for rank in range(plan.world):
            lines = (tmp_path / s.name / f"rank-{rank}" / "windows.jsonl").read_text().splitlines()
            steady = [w for w in map(json.loads, lines) if not w.get("warmup")]
            assert all(w["batches"] == plan.frequency * s.accumulate for w in steady), s.name
            per_rank[rank] = steady
        slow, other = per_rank[1], per_rank[0]
        etl = statistics.median(w["etl_ms"] for w in slow)
        assert etl >= 0.8 * s.accumulate * plan.delay_s * 1e3, (s.name, etl)
        waits = [statistics.median(w["extra"]["wait_ms"] for w in ws) for ws in (slow, other)]
        assert waits[0] < waits[1], (s.name, waits)
