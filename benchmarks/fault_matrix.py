"""Fault injection on real DDP ranks (gloo, CPU), on 2, 3 and 4 ranks: does the report name the rank
that holds the others back, and the right cause, window by window? And does it name no one when
nobody is slowed?

Per world size: every fault of ``tests/_faults.py`` (data, forward, loss/backward, optimizer step,
host work after the step, an evaluation forward, GC, the rank's own comm hook) on one rank, in a
DataLoader loop and a generator loop, with and without BatchNorm, plus an intermittent straggler
(slowed in one window of three); then the shapes real runs have: gradient accumulation (4
micro-batches, 3 under ``no_sync``), 100 ms of host work every 5th iteration (judged over the run:
named with its pattern), two slow ranks with different causes (3 ranks and more), a comm hook
registered before attach, ranks at different ``frequency``, a wide model (real compute on every
rank), FSDP2 and FSDP1 (data, host and GC faults named; a slow forward pass, untimed under FSDP, must
name no innocent rank); then a long healthy run, part of it with the wide model. Targets: the right rank(s) and
cause(s) in >= 95% of the windows where a straggler acts; false stragglers in at most 1% of the
healthy windows.

Run: ``python benchmarks/fault_matrix.py [--worlds 2,3,4] [--windows 8] [--healthy 1000] [--delay-ms 25]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import _faults  # noqa: E402
import _faults_fsdp  # noqa: E402 - registers the FSDP wrappings


def shapes(world: int) -> tuple[_faults.Scenario, ...]:
    """The shapes real runs have, on ``world`` ranks (see the module's docstring)."""
    scenario = _faults.Scenario
    last = world - 1
    out = [
        scenario("forward", 1, "loader", every=3),
        scenario("data", last, "generator", bn=True, every=3),
        scenario("data", 1, "loader", accumulate=4),
        scenario("forward", last, "generator", accumulate=4),
        scenario("host", 0, "loader", delay_ms=100.0, period=5),
        scenario("hook", last, "loader", hook_before=True),
        scenario("hook", 1, "loader", bn=True, hook_before=True),
        scenario("data", 1, "loader", frequencies=tuple(5 if r % 2 == 0 else 10 for r in range(world))),
        scenario("data", 1, "loader", width=1024),
        scenario("gc", last, "loader", width=1024),
    ]
    if world >= 3:
        out.append(scenario("data", last, "loader", delay_ms=40.0, also=("forward", 1, 25.0)))
    return tuple(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", default="2,3,4")
    parser.add_argument("--windows", type=int, default=8, help="steady windows per scenario")
    parser.add_argument("--healthy", type=int, default=1000, help="healthy windows per world size")
    parser.add_argument("--delay-ms", type=float, default=25.0)
    parser.add_argument("--json", help="write every outcome here")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; one rank slowed by {args.delay_ms:g} ms per iteration; 5 iterations per window")
    results = []
    totals = {"acting": 0, "right": 0, "healthy": 0, "false": 0}
    over_run = {"named": 0, "scenarios": 0}
    fsdp_forward = {"innocent": 0, "acting": 0}
    for world in (int(w) for w in args.worlds.split(",")):
        fsdp = tuple(s for wrap in ("fsdp2", "fsdp1") for s in _faults_fsdp.scenarios(wrap, world - 1)
                     if s.fault != "none")
        scenarios = _faults.matrix(world) + shapes(world) + fsdp
        plan = _faults.Plan(world, scenarios, windows=args.windows, delay_s=args.delay_ms / 1000.0)
        wide = args.healthy // 3
        healthy_plan = _faults.Plan(world, (_faults.Scenario("none", 0, "loader"),), windows=args.healthy - wide,
                                    delay_s=args.delay_ms / 1000.0)
        wide_plan = _faults.Plan(world, (_faults.Scenario("none", 0, "loader", width=1024),), windows=wide,
                                 delay_s=args.delay_ms / 1000.0)
        out = Path(tempfile.mkdtemp(prefix=f"trainperf-faults-{world}-"))
        began = time.perf_counter()
        codes = _faults.run(plan, out / "faults", limit_s=3600)
        codes += _faults.run(healthy_plan, out / "healthy", limit_s=3600)
        codes += _faults.run(wide_plan, out / "wide", limit_s=3600)
        took = time.perf_counter() - began
        if any(c != 0 for c in codes):
            print(f"{world} ranks: a rank failed (exit codes {codes}); files in {out}")
            continue
        outcomes = [_faults.judge(out / "faults" / s.name, s, plan) for s in scenarios]
        outcomes.append(_faults.judge(out / "healthy" / healthy_plan.scenarios[0].name, healthy_plan.scenarios[0],
                                      healthy_plan))
        outcomes.append(_faults.judge(out / "wide" / wide_plan.scenarios[0].name, wide_plan.scenarios[0], wide_plan))
        judged = [o for o in outcomes if not (o.scenario.wrap != "ddp" and o.scenario.fault == "forward")]
        right, false_alarms, healthy = _faults.share(judged)
        acting = sum(o.acting for o in judged)
        print(f"\n{world} ranks ({took:.0f} s): right rank and cause in {sum(o.right for o in judged)} of {acting} "
              f"acting windows ({100 * right:.1f}%); false stragglers in {false_alarms} of {healthy} healthy windows")
        for o in outcomes:
            if o.scenario.fault == "none":
                print(f"  {o.scenario.name:34s} healthy windows {o.healthy:5d}, named anyway {o.false_alarms}; "
                      f"report lists {o.report}")
                continue
            if o.scenario.wrap != "ddp" and o.scenario.fault == "forward":
                # FSDP's forward pass holds its all-gather and is not timed: nobody, never an innocent rank
                acting_n, innocent_n, wrong_ = _faults_fsdp.innocent(out / "faults" / o.scenario.name, o.scenario, plan)
                print(f"  {o.scenario.name:34s} untimed: an innocent rank named in {innocent_n} of {acting_n} windows"
                      f"{'; ' + str(wrong_[:3]) if wrong_ else ''}")
                fsdp_forward["innocent"] += innocent_n
                fsdp_forward["acting"] += acting_n
                continue
            if o.scenario.period > 1:
                print(f"  {o.scenario.name:34s} over the run: {'named' if o.named_over_run else 'NOT named'}; "
                      f"report {o.report}; pattern {o.pattern!r}")
                over_run["named"] += o.named_over_run
                over_run["scenarios"] += 1
                continue
            wrong = f"; wrong: {o.wrong[:3]}" if o.wrong else ""
            listed = f"; windows listed {o.report_windows}" if o.scenario.every > 1 else ""
            print(f"  {o.scenario.name:34s} {o.right}/{o.acting} right, {o.false_alarms}/{o.healthy} false; "
                  f"report {o.report}{listed}{wrong}")
        totals["acting"] += acting
        totals["right"] += sum(o.right for o in judged)
        totals["healthy"] += healthy
        totals["false"] += false_alarms
        results += [dict(o.as_dict(), world=world) for o in outcomes]
        shutil.rmtree(out, ignore_errors=True)
    if totals["acting"]:
        print(f"\nall: right in {totals['right']} of {totals['acting']} acting windows "
              f"({100 * totals['right'] / totals['acting']:.1f}%, target >= 95%); "
              f"false stragglers in {totals['false']} of {totals['healthy']} healthy windows "
              f"({100 * totals['false'] / max(1, totals['healthy']):.2f}%, target <= 1%); every-n-th-iteration work "
              f"named with its pattern in {over_run['named']} of {over_run['scenarios']} runs; FSDP's slow forward "
              f"pass named an innocent rank in {fsdp_forward['innocent']} of {fsdp_forward['acting']} windows")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
