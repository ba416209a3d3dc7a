"""The parent of a goodput job: starts the first attempt, waits for it to kill itself, waits
:data:`GAP_S`, starts the second one, and reads back each rank's stopwatch of what was injected."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
GAP_S = 5.0
TIMEOUT_S = 240.0
SCRIPTS = {"attach": "attach_job.py", "lightning": "lightning_job.py", "trainer": "trainer_job.py"}


@dataclass
class Stopwatches:
    """Each attempt's stopwatch of one rank, and the wall times the parent took before each start."""

    attempts: list[dict] = field(default_factory=list)

    def total(self, kind: str) -> float:
        return sum(sum(a[kind]) for a in self.attempts)

    def injected(self) -> dict[str, float]:
        """The rows the job injected, as the stopwatch saw them."""
        first, second = self.attempts
        return {
            "startup": sum(a["train_start"] - a["popen"] - sum(a["load"]) for a in self.attempts),
            "eval": self.total("eval"),
            "checkpoint_save": self.total("save"),
            "checkpoint_load": self.total("load"),
            "data_wait": self.total("fetch"),
            "restart_gaps": second["popen"] - first["killed"],
        }

    @property
    def wall_s(self) -> float:
        return self.attempts[1]["end"] - self.attempts[0]["popen"]


@dataclass
class Job:
    run_dir: Path
    ranks: dict[int, Stopwatches]
    logs: list[str]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _commands(adapter: str, world: int) -> list[tuple[list[str], dict[str, str]]]:
    """The processes the parent starts for one attempt, with their own environment."""
    script = str(HERE / SCRIPTS[adapter])
    if adapter == "trainer" and world > 1:
        # torchrun, started with its worker launches stamped (the ranks are its children)
        launcher = (f"import sys, runpy; sys.path.insert(0, {str(HERE)!r}); import _child; _child.stamp_launches(); "
                    f"sys.argv = ['torchrun', '--nproc_per_node', '{world}', '--master_port', '{_free_port()}', "
                    f"{script!r}]; runpy.run_module('torch.distributed.run', run_name='__main__')")
        return [([sys.executable, "-c", launcher], {})]
    if adapter == "attach" and world > 1:
        port = str(_free_port())
        return [([sys.executable, script], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": str(r),
                                            "WORLD_SIZE": str(world), "LOCAL_RANK": str(r)}) for r in range(world)]
    return [([sys.executable, script], {"GPJOB_WORLD": str(world)})]


def _attempt(n: int, adapter: str, world: int, work: Path, run_dir: Path, logs: list[str]) -> None:
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
            "GPJOB_ATTEMPT": str(n), "GPJOB_RUN_DIR": str(run_dir), "GPJOB_WORK": str(work),
            "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GPJOB_POPEN_AT"):
        base.pop(name, None)
    processes = []
    for k, (command, env) in enumerate(_commands(adapter, world)):
        out = open(work / f"log-{n}-{k}.txt", "w")  # noqa: SIM115 - closed below
        started = time.time()
        processes.append((subprocess.Popen(command, cwd=work, stdout=out, stderr=subprocess.STDOUT,
                                           env={**base, **env, "GPJOB_POPEN_AT": repr(started)}), out))
    deadline = time.monotonic() + TIMEOUT_S
    for process, out in processes:
        try:
            process.wait(max(1.0, deadline - time.monotonic()))
        finally:
            out.close()
            if process.poll() is None:
                process.kill()
    logs += [p.read_text(errors="replace")[-4000:] for p in sorted(work.glob(f"log-{n}-*.txt"))]
    # ranks a launcher started may outlive it by a moment: their stopwatches are the sign they are done
    wanted = [work / f"stopwatch-{n}-{r}.json" for r in range(world)]
    while not all(p.exists() for p in wanted):
        if time.monotonic() > deadline:
            raise AssertionError(f"attempt {n}: no stopwatch from every rank; logs:\n" + "\n".join(logs))
        time.sleep(0.05)


def run_job(adapter: str, world: int, work: Path) -> Job:
    """The whole job in ``work``: attempt 1 (killed after iteration 250), a gap, attempt 2 (from 200 to 300)."""
    run_dir = work / "run"
    logs: list[str] = []
    _attempt(1, adapter, world, work, run_dir, logs)
    time.sleep(GAP_S)
    _attempt(2, adapter, world, work, run_dir, logs)
    ranks = {r: Stopwatches([json.loads((work / f"stopwatch-{n}-{r}.json").read_text()) for n in (1, 2)])
             for r in range(world)}
    return Job(run_dir, ranks, logs)
