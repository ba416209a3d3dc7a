"""The sink protocol and the fan-out that delivers each record to every sink."""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..records import PerformanceRecord

__all__ = ["Sink", "SinkError"]


@runtime_checkable
class Sink(Protocol):
    """Anything that takes a :class:`PerformanceRecord`. A ``close()`` method, if present, is called
    when the listener closes. A ``write_many(records)`` method, if present, is what the writer thread
    calls with several records at once (in order, none of them given to the sink otherwise): a file
    sink writes them with one ``write``. An ``on_cluster(event)`` method, if present, receives rank 0's
    word on the ranks (a dict: ``kind`` ``"cluster"``, ``iteration``, ``line``, ``stragglers``, the
    world figures) on the same thread, in order with the records."""

    def __call__(self, record: PerformanceRecord) -> None: ...


class SinkError(RuntimeWarning):
    """Warning category used when a sink raises; training goes on."""


def describe(obj: object) -> str:
    """``repr(obj)`` for a message, or its type and id when its ``__repr__`` raises: a broken sink
    (or the exception it raised) is said, never the reason a message itself fails."""
    try:
        return repr(obj)
    except Exception:  # noqa: BLE001 - any failure of a user's __repr__
        return f"<{type(obj).__qualname__} object at {id(obj):#x} (its repr raised)>"


def on_training_thread(sink: Sink) -> bool:
    """Whether ``sink`` must run on the training thread, inside the report, rather than on the
    listener's writer thread: it says so with a true ``on_training_thread`` attribute (a sink that
    reads the trainer's live state, or writes to objects only that thread may touch). An attribute
    that raises reads as false."""
    try:
        return getattr(sink, "on_training_thread", False) is True
    except Exception:  # noqa: BLE001 - a property of the user's that raises
        return False


class FanOut:
    """Delivers each record to every sink; a sink that raises is reported once and skipped for
    that record only, so the others never lose a record and training goes on."""

    def __init__(self, sinks: Iterable[Sink], *, strict: bool) -> None:
        self.sinks: list[Sink] = list(sinks)
        self.strict = strict
        self._warned: set[int] = set()
        self._targets_for: tuple[bool, tuple[int, ...]] | None = None
        self._targets: list[tuple[Sink, Callable[..., object] | None]] = []

    def __call__(self, record: PerformanceRecord) -> None:
        failures: list[tuple[Sink, BaseException, str]] = []
        messages = self._deliver(record, failures)
        # Said once every sink has had the record: under ``-W error`` the warning raises, and
        # the healthy sinks behind a failing one must not lose the record to it.
        for message in messages:
            warnings.warn(message, SinkError, stacklevel=2)
        if failures and self.strict:
            raise failures[0][1]

    def deliver(self, record: PerformanceRecord, *, training_thread: bool | None = None) -> list[str]:
        """Give ``record`` to every sink (with ``training_thread``, only to the sinks whose
        :func:`on_training_thread` is that); the warnings to say (a failing sink's first failure),
        for a caller that says them elsewhere (the writer thread hands them to the training thread)."""
        return self._deliver(record, [], training_thread)

    def deliver_many(self, records: Sequence[PerformanceRecord], *, training_thread: bool = False) -> list[str]:
        """Give ``records`` to every sink whose :func:`on_training_thread` is ``training_thread``,
        in order: all at once to a sink with a ``write_many`` (when it raises, it loses these
        records), one by one to the others; the warnings to say, as :meth:`deliver` returns them."""
        failures: list[tuple[Sink, BaseException, str]] = []
        for sink, write_many in self._batch_targets(training_thread):
            try:
                if write_many is not None:
                    write_many(records)
                    continue
            except Exception as exc:  # noqa: BLE001 - a sink must never stop training
                failures.append((sink, exc, traceback.format_exc()))
                continue
            for record in records:
                try:
                    sink(record)
                except Exception as exc:  # noqa: BLE001
                    failures.append((sink, exc, traceback.format_exc()))
        return self._messages(failures)

    def tell(self, event: Mapping[str, Any]) -> list[str]:
        """Give a run's ``event`` (rank 0's cluster line) to every sink with an ``on_cluster`` method
        (defined by its class); the warnings to say, as :meth:`deliver` returns them."""
        failures: list[tuple[Sink, BaseException, str]] = []
        for sink in self.sinks:
            if not callable(getattr(type(sink), "on_cluster", None)):
                continue
            on_cluster = sink.on_cluster  # type: ignore[attr-defined]
            try:
                on_cluster(event)
            except Exception as exc:  # noqa: BLE001 - a sink must never stop training
                failures.append((sink, exc, traceback.format_exc()))
        return self._messages(failures)

    def _batch_targets(self, training_thread: bool) -> list[tuple[Sink, Callable[..., object] | None]]:
        """The sinks on ``training_thread``'s side, each with its ``write_many`` (or ``None``),
        found again only when the list of sinks changed (it only grows)."""
        key = (training_thread, tuple(map(id, self.sinks)))
        if self._targets_for != key:
            targets = []
            for sink in self.sinks:
                if on_training_thread(sink) is not training_thread:
                    continue
                # defined by the sink's class: a mock that answers every name is still called per record
                write_many = sink.write_many if callable(getattr(type(sink), "write_many", None)) else None  # type: ignore[attr-defined]
                targets.append((sink, write_many))
            self._targets_for, self._targets = key, targets
        return self._targets

    def _deliver(self, record: PerformanceRecord, failures: list[tuple[Sink, BaseException, str]],
                 training_thread: bool | None = None) -> list[str]:
        for sink in self.sinks:
            if training_thread is not None and on_training_thread(sink) is not training_thread:
                continue
            try:
                sink(record)
            except Exception as exc:  # noqa: BLE001 - a sink must never stop training
                failures.append((sink, exc, traceback.format_exc()))
        return self._messages(failures)

    def _messages(self, failures: list[tuple[Sink, BaseException, str]]) -> list[str]:
        """The warnings for ``failures``: each sink's first failure only."""
        messages = []
        for sink, _, trace in failures:
            if id(sink) not in self._warned:
                self._warned.add(id(sink))
                messages.append(f"trainperf sink {describe(sink)} raised and was skipped for this record "
                                f"(further failures of this sink are silent):\n{trace}")
        return messages

    def close(self) -> None:
        """Close every sink that has a ``close()``, all of them even when one fails."""
        failures: list[tuple[Sink, BaseException]] = []
        for sink in self.sinks:
            try:
                close = getattr(sink, "close", None)
                if close is not None:
                    close()
            except Exception as exc:  # noqa: BLE001
                failures.append((sink, exc))
        for failed, error in failures:
            warnings.warn(f"trainperf sink {describe(failed)} failed to close: {describe(error)}", SinkError,
                          stacklevel=2)
        if failures and self.strict:
            raise failures[0][1]
