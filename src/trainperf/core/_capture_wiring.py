"""How a listener wires a capture: who this process is when a capture arms, and where a written trace
is said (the run directory's events). It knows the listener only through the callables it is given."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base import env_int
from ._options import ListenerOptions

if TYPE_CHECKING:
    from ..profile import Capture
    from ..ranks import RunDirLink

__all__: list[str] = []


def open_capture(
    options: ListenerOptions,
    clock: Callable[[], float],
    run_dir: RunDirLink | None,
    identity: Callable[[], tuple[int | None, str, int]],
    submit: Callable[[Callable[[], None]], None],
) -> Capture | None:
    """The capture ``options.profile_dir`` asks for, else ``None``.

    Args:
        options: the listener's options (``profile_dir``, ``profile_rule``).
        clock: the raw monotonic clock.
        run_dir: the listener's run directory link, if any: its world size names the trace's ranks,
            and each written trace becomes an event there.
        identity: the process's ``(rank, host, pid)`` when a capture arms (the rank may be set late).
        submit: runs a callable on the listener's writer thread.
    """
    if options.profile_dir is None:
        return None
    from ..profile import Capture, CaptureRule  # the capture's modules load only for a listener that captures

    def who() -> tuple[int | None, int | None, str]:
        rank, host, pid = identity()
        world = run_dir.sink.world_size if run_dir is not None else env_int("WORLD_SIZE")
        return rank, world, f"rank{rank}" if rank is not None else f"{host}_{pid}"

    def on_written(event: dict[str, Any]) -> None:
        if run_dir is not None:
            submit(functools.partial(run_dir.sink.event, event))

    return Capture(options.profile_dir, options.profile_rule or CaptureRule(), clock=clock, who=who,
                   on_written=on_written)

