"""Closing a listener: each step runs even when an earlier one failed, and what failed is said once
everything is closed, as :class:`~trainperf.SinkError` warnings."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

from ..sinks import SinkError

__all__: list[str] = []

#: One step of closing: what it does (for the warning) and the call, or ``None`` when there is nothing to do.
Step = tuple[str, "Callable[[], object] | None"]


def run_steps(steps: Iterable[Step], failures: list[str]) -> None:
    """Run every step in order; a step that raises adds ``"<what> failed: <exception>"`` to ``failures``."""
    for what, call in steps:
        if call is None:
            continue
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - closing goes on; said at the end
            failures.append(f"{what} failed: {exc!r}")


def say_failures(failures: list[str]) -> None:
    for failure in failures:
        warnings.warn(f"trainperf: while closing, {failure}", SinkError, stacklevel=3)
