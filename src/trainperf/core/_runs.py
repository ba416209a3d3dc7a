"""A framework callback's listeners: one per run (a ``fit``, a ``train()``), all made from the options the
callback was given. The user's sinks serve every run: each run's listener gets them lent, so closing
that listener leaves them open for the next; :meth:`RunListeners.close` (or the callback's collection,
or the interpreter's exit) closes them. It knows no framework."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from ..sinks.shared import FanOut, Sink, describe, on_training_thread
from ._listener import PerformanceListener
from ._options import checked_sinks

__all__: list[str] = []

#: The listener's keyword options, which a callback passes on (``frequency`` is its first argument).
LISTENER_OPTIONS = frozenset(
    name for name, p in inspect.signature(PerformanceListener).parameters.items() if p.kind is p.KEYWORD_ONLY
)


class Lent:
    """A user's sink lent to one run's listener: that listener's ``close()`` leaves it open."""

    __slots__ = ("sink",)

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def __call__(self, record: Any) -> None:
        self.sink(record)

    @property
    def on_training_thread(self) -> bool:
        return on_training_thread(self.sink)

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return describe(self.sink)


def close_sinks(sinks: list[Sink]) -> None:
    FanOut(sinks, strict=False).close()
    sinks.clear()


def check_options(options: dict[str, Any]) -> None:
    """A callback's ``**options`` are the listener's keyword options: a name that is not one raises
    ``TypeError``, naming it."""
    unknown = set(options) - LISTENER_OPTIONS
    if unknown:
        raise TypeError(f"PerformanceCallback got an unexpected keyword argument {sorted(unknown)[0]!r}")


class RunListeners:
    """The listener of each run of one callback.

    Args:
        owner: the callback (its collection closes the sinks).
        frequency: the listeners' report frequency.
        options: the listener's keyword options (see :func:`check_options`); its ``sinks`` are checked.
    """

    def __init__(self, owner: object, frequency: int, options: dict[str, Any]) -> None:
        self.frequency = frequency
        self.options = dict(options)
        sinks = self.options.pop("sinks", None)
        self.sinks: list[Sink] | None = None if sinks is None else checked_sinks(sinks)
        self._lent = None if self.sinks is None else [Lent(sink) for sink in self.sinks]
        if self.sinks is not None:
            weakref.finalize(owner, close_sinks, self.sinks)

    def new(self) -> PerformanceListener:
        """A listener for the next run, with the user's sinks lent to it."""
        return PerformanceListener(self.frequency, **self.options, sinks=self._lent)

    def close(self) -> None:
        """Close the user's sinks (idempotent)."""
        if self.sinks is not None:
            close_sinks(self.sinks)
