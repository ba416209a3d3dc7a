"""Fault injection on real DDP ranks (gloo, CPU), on 2, 3 and 4 ranks: does the report name the rank
that holds the others back, and the right cause, window by window? And does it name no one when
nobody is slowed?

Per world size: every fault of ``tests/_faults.py`` (data, forward, loss/backward, optimizer step,
host work after the step, an evaluation forward, GC, the rank's own comm hook) on one rank, in a
DataLoader loop and a generator loop, with and without BatchNorm, plus an intermittent straggler
(slowed in one window of three); then a long healthy run. Targets: the right rank and cause in
>= 95% of the windows where the straggler acts; no false straggler over >= 1,000 healthy windows.

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
    for world in (int(w) for w in args.worlds.split(",")):
        scenarios = _faults.matrix(world) + (_faults.Scenario("forward", 1, "loader", every=3),
                                             _faults.Scenario("data", world - 1, "generator", bn=True, every=3))
        plan = _faults.Plan(world, scenarios, windows=args.windows, delay_s=args.delay_ms / 1000.0)
        healthy_plan = _faults.Plan(world, (_faults.Scenario("none", 0, "loader"),), windows=args.healthy,
                                    delay_s=args.delay_ms / 1000.0)
        out = Path(tempfile.mkdtemp(prefix=f"trainperf-faults-{world}-"))
        began = time.perf_counter()
        codes = _faults.run(plan, out / "faults", limit_s=3600)
        codes += _faults.run(healthy_plan, out / "healthy", limit_s=3600)
        took = time.perf_counter() - began
        if any(c != 0 for c in codes):
            print(f"{world} ranks: a rank failed (exit codes {codes}); files in {out}")
            continue
        outcomes = [_faults.judge(out / "faults" / s.name, s, plan) for s in scenarios]
        outcomes.append(_faults.judge(out / "healthy" / healthy_plan.scenarios[0].name, healthy_plan.scenarios[0],
                                      healthy_plan))
        right, false_alarms, healthy = _faults.share(outcomes)
        acting = sum(o.acting for o in outcomes)
        print(f"\n{world} ranks ({took:.0f} s): right rank and cause in {sum(o.right for o in outcomes)} of {acting} "
              f"acting windows ({100 * right:.1f}%); false stragglers in {false_alarms} of {healthy} healthy windows")
        for o in outcomes:
            if o.scenario.fault == "none":
                print(f"  {o.scenario.name:34s} healthy windows {o.healthy:5d}, named anyway {o.false_alarms}; "
                      f"report lists {o.report}")
                continue
            wrong = f"; wrong: {o.wrong[:3]}" if o.wrong else ""
            listed = f"; windows listed {o.report_windows}" if o.scenario.every > 1 else ""
            print(f"  {o.scenario.name:34s} {o.right}/{o.acting} right, {o.false_alarms}/{o.healthy} false; "
                  f"report {o.report}{listed}{wrong}")
        totals["acting"] += acting
        totals["right"] += sum(o.right for o in outcomes)
        totals["healthy"] += healthy
        totals["false"] += false_alarms
        results += [dict(o.as_dict(), world=world) for o in outcomes]
        shutil.rmtree(out, ignore_errors=True)
    if totals["acting"]:
        print(f"\nall: right in {totals['right']} of {totals['acting']} acting windows "
              f"({100 * totals['right'] / totals['acting']:.1f}%, target >= 95%); "
              f"false stragglers in {totals['false']} of {totals['healthy']} healthy windows (target 0)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
