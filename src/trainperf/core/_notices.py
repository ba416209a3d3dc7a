"""What the listener says to the user: warnings said once per run, after the record in progress
has reached the sinks, and the fixes for a bottleneck (what the adapters can see first)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence

from ..records import CUDA_FIXES, DEFAULT_FIXES, Verdict
from ..sinks.shared import LOGGER_NAME, ensure_visible
from ._hardware import worker_tips

__all__ = ["BottleneckWarning"]

#: How a warning names a verdict kind that is not an "X-bound" state.
_STATES = {"padding": "computes padding", "cpu-contention": "is slowed by CPU contention",
           "memory-growth": "keeps more memory with every step"}

Advisor = Callable[[str], Sequence[str]]


class BottleneckWarning(UserWarning):
    """Issued once per run and bottleneck, when it persists: judged so in at least
    3 windows after the warm-up, and in at least 30% of them (see :func:`trainperf.records._verdict.persists`)."""


class Notices:
    """Warnings and advice of one listener.

    Messages noted with :meth:`once` and persisting bottlenecks noted with :meth:`bottleneck` are
    said by :meth:`say`, which the listener calls once a report is done, so a warning turned into an
    error (``-W error``) never costs a sink its record.
    """

    __slots__ = ("advisors", "workers_cpu_pct", "on_cuda", "_said", "_queued", "_bottlenecks", "_warned")

    def __init__(self) -> None:
        self.advisors: list[Advisor] = []
        self.workers_cpu_pct: float | None = None  # the loader workers' CPU use last read
        self.on_cuda = False
        self._said: set[str] = set()
        self._queued: list[str] = []
        self._bottlenecks: list[Verdict] = []
        self._warned: set[str] = set()

    def once(self, message: str) -> None:
        """Say ``message`` once per run, at the next :meth:`say`."""
        if message not in self._said:
            self._said.add(message)
            self._queued.append(message)

    def note(self, message: str) -> None:
        """Say ``message`` once per run as a line on the ``trainperf`` logger, at INFO: what the user should
        know but need not act on (a CPU has no MFU), which a warning would turn into an error under ``-W
        error``."""
        if message not in self._said:
            self._said.add(message)
            logger = logging.getLogger(LOGGER_NAME)
            ensure_visible(logger)
            logger.info("trainperf: %s", message)

    def bottleneck(self, verdict: Verdict) -> None:
        """A bad verdict that persists: warned about once per kind, with its fixes, at the next :meth:`say`."""
        self._bottlenecks.append(verdict)

    @property
    def waiting(self) -> bool:
        """Whether :meth:`say` has anything to say."""
        return bool(self._queued or self._bottlenecks)

    def say(self, stacklevel: Callable[[], int]) -> None:
        """Issue what was noted (``stacklevel`` finds the user's own line)."""
        queued, self._queued = self._queued, []
        for message in queued:
            warnings.warn(f"trainperf: {message}", RuntimeWarning, stacklevel=stacklevel())
        verdicts, self._bottlenecks = self._bottlenecks, []
        for verdict in verdicts:
            if verdict.kind in self._warned:
                continue
            self._warned.add(verdict.kind)
            text = "\n".join(f"  - {fix}" for fix in self.fixes_for(verdict.kind))
            state = _STATES.get(verdict.kind, f"is {verdict.kind}")
            warnings.warn(f"trainperf: training {state} ({verdict.reason}). Likely fixes:\n{text}",
                          BottleneckWarning, stacklevel=stacklevel())

    def fixes_for(self, kind: str) -> list[str]:
        """Fixes for a bad verdict: first what the adapters can see, then the general ones."""
        specific: list[str] = []
        if kind == "input-bound":
            specific.extend(worker_tips(self.workers_cpu_pct))
        for advisor in self.advisors:
            try:
                specific.extend(advisor(kind))
            except Exception:  # noqa: BLE001 - advice must never break training
                continue
        general = [*DEFAULT_FIXES.get(kind, ()), *(CUDA_FIXES.get(kind, ()) if self.on_cuda else ())]
        return list(dict.fromkeys([*specific, *general]))  # once each, the most specific first
