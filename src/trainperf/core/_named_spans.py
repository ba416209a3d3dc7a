"""Named spans of a job's time on a listener's clock (a checkpoint loaded or saved, an evaluation,
anything the user names): :meth:`~trainperf.PerformanceListener.span`, and :func:`span`, which spans
every open listener of the thread it runs on.

A span's seconds go where the adapter that owns the listener routes them (its
:class:`~trainperf.core.StepAccountant`, so that a span inside an iteration is taken out of the step
and counted as other host time), else to the listener's named times (``add_time``). Either way
records carry the mean per iteration of the window as ``extra["<kind>_ms"]``; a span before the
listener started stays in the first window's named times. A span inside another on the same
listener is counted once, by the outer one (a ``torch.save`` inside ``span("checkpoint")``).
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable
from types import TracebackType

__all__ = ["SPAN_KINDS", "ListenerSpan", "SpanRoute", "Spans", "ThreadSpan", "check_kind", "span"]

#: The kinds trainperf's adapters name: evaluation, checkpoint saving, checkpoint loading. Others are
#: allowed and reported the same way (``<kind>_ms``).
SPAN_KINDS = ("eval", "checkpoint", "checkpoint_load")

#: Where an adapter takes a span: ``route(kind, started, ended)``, both readings of the listener's clock.
SpanRoute = Callable[[str, float, float], None]

_KIND = re.compile(r"[a-z0-9_]+")

_lock = threading.Lock()
#: Every listener's spans and the thread they belong to (the one that built it, then the one that started it).
_threads: weakref.WeakKeyDictionary[Spans, int] = weakref.WeakKeyDictionary()


def check_kind(kind: object) -> str:
    """``kind`` is a non-empty name of lowercase letters, digits and ``_`` (it becomes ``<kind>_ms``)."""
    if type(kind) is not str:
        raise TypeError(f"kind must be a str such as {', '.join(map(repr, SPAN_KINDS))}, got {kind!r}")
    if not _KIND.fullmatch(kind):
        raise ValueError(f"kind must be a non-empty name of lowercase letters, digits and '_' "
                         f"(such as {', '.join(map(repr, SPAN_KINDS))}), got {kind!r}")
    return kind


class Spans:
    """One listener's spans: where their time goes, and whether one is open.

    Args:
        clock: the listener's clock (trainperf's own time left out).
        add_time: the listener's named times, where a span goes when no adapter routes it.
        closed: whether the listener is closed (a closed listener's spans count nothing).
    """

    __slots__ = ("_clock", "_add_time", "_closed", "_route", "_depth", "__weakref__")

    def __init__(self, clock: Callable[[], float], add_time: Callable[[str, float], None],
                 closed: Callable[[], bool]) -> None:
        self._clock, self._add_time, self._closed = clock, add_time, closed
        self._route: SpanRoute | None = None
        self._depth = 0  # spans open now (the outer one counts)
        self.move_here()

    def move_here(self) -> None:
        """The listener belongs to this thread from now on (:func:`span` on it spans this listener)."""
        with _lock:
            _threads[self] = threading.get_ident()

    @property
    def open(self) -> bool:
        """Whether a span is open now."""
        return self._depth > 0

    def route_to(self, route: SpanRoute | None) -> Callable[[], None]:
        """Send each span to ``route`` (``None``: the named times) until the returned undo is called; the
        undo gives back the route before, unless another was set since."""
        previous, self._route = self._route, route

        def undo() -> None:
            if self._route is route:
                self._route = previous

        return undo

    def begin(self) -> float | None:
        """A span opens: where it starts on the clock, or ``None`` inside another or on a closed listener."""
        self._depth += 1
        if self._depth > 1 or self._closed():
            return None
        return self._clock()

    def end(self, kind: str, started: float | None) -> None:
        """The span opened at ``started`` (what :meth:`begin` gave) ends now."""
        self._depth -= 1
        if started is None or self._closed():
            return
        ended = self._clock()
        route = self._route
        if route is not None:
            route(kind, started, ended)
        elif ended > started:
            self._add_time(kind, ended - started)


class ListenerSpan:
    """``with listener.span(kind):`` times its block on that listener (see :class:`Spans`)."""

    __slots__ = ("_spans", "_kind", "_started")

    def __init__(self, spans: Spans, kind: str) -> None:
        self._spans, self._kind = spans, kind
        self._started: float | None = None

    def __enter__(self) -> None:
        self._started = self._spans.begin()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._spans.end(self._kind, self._started)  # a block that raised took its time too


class ThreadSpan:
    """``with trainperf.span(kind):`` times its block on every open listener of this thread."""

    __slots__ = ("_kind", "_open")

    def __init__(self, kind: str) -> None:
        self._kind = kind
        self._open: list[tuple[Spans, float | None]] = []

    def __enter__(self) -> None:
        here = threading.get_ident()
        with _lock:
            spans = [s for s, thread in _threads.items() if thread == here]
        self._open = [(s, s.begin()) for s in spans]

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        opened, self._open = self._open, []
        for spans, started in reversed(opened):
            spans.end(self._kind, started)


def span(kind: str) -> ThreadSpan:
    """Time a block as ``kind`` on every open listener of this thread: those ``attach`` or a framework
    callback trains with here, else those built here and not closed. Records carry the mean per
    iteration as ``extra["<kind>_ms"]``, part of the iteration's other host time (never the step's);
    nothing happens when no listener is open here.

    Args:
        kind: a non-empty name of lowercase letters, digits and ``_``: ``"checkpoint_load"``,
            ``"checkpoint"``, ``"eval"`` or your own (``"upload"`` is reported as ``upload_ms``).

    Example:
        >>> import trainperf
        >>> listener = trainperf.PerformanceListener(1, sinks=[])
        >>> with trainperf.span("checkpoint_load"):
        ...     state = {"step": 10}                     # torch.load(...), your own restore
        >>> listener.close()
    """
    return ThreadSpan(check_kind(kind))
