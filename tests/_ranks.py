"""Start one forked process per rank of a local ``torch.distributed`` run and wait for them."""

from __future__ import annotations

import multiprocessing
import socket
import time
from collections.abc import Callable
from typing import Any


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
    procs = [ctx.Process(target=target, args=(rank, port, *args)) for rank in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + limit_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return codes
