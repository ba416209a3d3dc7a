"""Start one forked process per rank of a local ``torch.distributed`` run and wait for them."""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_forked(target: Callable[..., Any], world: int, args: tuple[Any, ...], limit_s: float) -> list[int | None]:
    """Run ``target(rank, port, *args)`` in one forked process per rank (torch is imported already,
    the ranks share it); their exit codes, ``None`` for one still running at ``limit_s`` (then killed)."""
    import torch._dynamo  # noqa: F401 - an optimizer imports it; imported here, the forked ranks share it

    ctx = multiprocessing.get_context("fork")
    port = free_port()
    procs = [ctx.Process(target=_say_stack_on_usr1, args=(target, rank, port, *args)) for rank in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + limit_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    codes = [p.exitcode for p in procs]
    stuck = [p for p in procs if p.is_alive()]
    for p in stuck:  # where each stuck rank is, on the test's stderr, before it is killed
        os.kill(p.pid, signal.SIGUSR1)
    time.sleep(0.5 if stuck else 0.0)
    for p in stuck:
        p.kill()
        p.join()
    return codes


def _say_stack_on_usr1(target: Callable[..., Any], rank: int, *args: Any) -> None:
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    target(rank, *args)


def end_rank() -> NoReturn:
    """End a rank at once with exit code 0, without freeing what it made (call it with the DDP model
    still referenced). When a DDP model's reducer holds the last reference to a destroyed gloo
    process group, freeing it can deadlock in torch itself: the group's destructor joins gloo's
    worker thread while holding the GIL, and that thread waits for the GIL to drop a Python object.
    Seen in about 1 run in 8 of a 2-rank gloo DDP run with no trainperf code in it at all."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
