"""Emission: records go to the sinks in order on one writer thread, so a slow or hanging sink never
slows or blocks training (like :class:`logging.handlers.QueueListener`). The training thread only
appends the record to a bounded queue; what a full queue drops is counted and said once.

The writer is not woken for each record: it wakes every :data:`WRITE_EVERY_S`, at once for
:meth:`Emitter.flush` and :meth:`Emitter.close`, and when the training thread is about to wait
without running Python (:meth:`Emitter.nudge`: a loader's workers, the device) with a few records
queued, so that its work falls where it costs the training thread nothing. It hands the sinks
several records at once (a file sink writes them with one ``write``), and after each slice of
:data:`SLICE_S` it steps aside so that a training thread that wants the interpreter back gets it:
Python itself would let the writer keep it for up to 5 ms.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..base import user_stacklevel
from ..records import PerformanceRecord
from ..sinks.shared import FanOut, Sink, SinkError, describe, on_training_thread

__all__: list[str] = []

#: Records a writer thread holds before the newest are dropped (about a day of reports every second
#: would not fill it in normal use; a hanging sink fills it without growing memory).
QUEUE_SIZE = 10_000
#: The longest :meth:`Emitter.flush` and :meth:`Emitter.close` wait for a sink by default.
FLUSH_TIMEOUT_S = 10.0
#: At interpreter exit, the longest every emitter together waits for its queue to empty.
EXIT_TIMEOUT_S = 5.0
#: How often the writer wakes to deliver what was queued since it last did.
WRITE_EVERY_S = 0.1
#: The longest the writer works before it lets the training thread have the interpreter: the
#: training thread waits at most this long for it when it comes back from a wait (a kernel, a
#: loader, the device) in which the writer took it. Python's own switch interval is 5 ms.
SLICE_S = 0.001
#: How long the writer steps aside after a slice: long enough for a training thread that waits for
#: the interpreter to take it (it must wake first), short enough to keep up.
YIELD_S = 0.00005
#: The most records handed to the sinks at once.
MAX_BATCH = 64
#: Records queued before a :meth:`Emitter.nudge` wakes the writer: it writes a few at once, not one
#: at each wait (its code runs warm, and a wake costs more than a record's work).
NUDGE_AT = 8

Say = Callable[[str], None]

_live: weakref.WeakSet[Emitter] = weakref.WeakSet()


class Emitter:
    """Delivers each record to every sink, in order.

    Args:
        sinks: the sinks, called with each record.
        strict: re-raise a sink's exception (after every other sink had the record); implies ``inline``.
        inline: run the sinks on the caller's thread instead of the writer thread.
        queue_size: records the writer's queue holds; when it is full the record is dropped (counted).
        say: how a warning is said (called from the thread that calls :meth:`deliver`,
            :meth:`flush` or :meth:`close`, never from the writer thread).
    """

    def __init__(
        self,
        sinks: Iterable[Sink],
        *,
        strict: bool = False,
        inline: bool = False,
        queue_size: int = QUEUE_SIZE,
        say: Say | None = None,
    ) -> None:
        self._fanout = FanOut(sinks, strict=strict)
        self.inline = inline or strict
        self._queue_size = queue_size
        self._say = say if say is not None else _warn
        self.dropped = 0
        self._said_dropped = False
        self._closed = False
        self._checked: list[Sink] = []
        self._some_on_training_thread = False
        self._some_on_writer = False
        #: called before any sink is handed records, on the thread that hands them (the job's account,
        #: which sets each record's goodput); and by :meth:`flush`
        self.before: Callable[[], object] | None = None
        self._start_state()
        _live.add(self)

    def _start_state(self) -> None:
        # A lock-free queue bounded by two counters, each written by one side only: what the
        # caller put, and what the writer has done. The writer notifies only when someone waits.
        self._queue: deque[PerformanceRecord | Callable[[], object] | None] = deque()
        self._put_count = 0
        self._done_count = 0
        self._wake = threading.Event()  # set by flush and close: deliver now
        self._cond = threading.Condition()
        self._waiting = False
        self._failures: deque[str] = deque()  # sink failures met on the writer thread, said on the caller's
        self._thread: threading.Thread | None = None

    @property
    def sinks(self) -> list[Sink]:
        """The sinks, in delivery order (append to add one)."""
        return self._fanout.sinks

    @property
    def pending(self) -> int:
        """Records queued and not yet delivered to every sink."""
        return self._put_count - self._done_count

    def deliver(self, record: PerformanceRecord) -> None:
        """Hand ``record`` to the sinks: at once when inline, else queue it for the writer thread."""
        if self.inline:
            if self.before is not None:
                self.before()
            self._fanout(record)
            return
        sinks = self._fanout.sinks
        if not sinks:
            return
        if sinks != self._checked:  # a sink was added: which run on the training thread?
            self._checked = list(sinks)
            here = [on_training_thread(sink) for sink in sinks]
            self._some_on_training_thread, self._some_on_writer = any(here), not all(here)
        if self._some_on_training_thread:
            if self.before is not None:
                self.before()
            for failure in self._fanout.deliver(record, training_thread=True):
                self._say(failure)
        if self._some_on_writer:  # sinks that all run here (memory sinks) need no writer thread
            self._put(record)

    def nudge(self) -> None:
        """The caller is about to wait without holding the interpreter (a loader, the device): the
        writer delivers what is queued now, when it takes nothing from the caller's thread."""
        if self._put_count - self._done_count >= NUDGE_AT and not self._wake.is_set():
            self._wake.set()

    def submit(self, task: Callable[[], object]) -> None:
        """Run ``task`` where the sinks run, after the records delivered before it (a sink's other
        writes, such as a run directory's spans). A task that raises is said once, like a sink."""
        if self.inline:
            try:
                task()
            except Exception as exc:  # noqa: BLE001 - never stops training
                self._say_task(task, exc)
            return
        self._put(task)

    def tell(self, event: Mapping[str, Any]) -> None:
        """Hand a run's ``event`` to the sinks' ``on_cluster`` where the sinks run, after the records before
        it; a sink that raises is said once, as for records."""
        fanout = self._fanout

        def tell_sinks() -> None:
            self._failures.extend(fanout.tell(event))

        if self.inline:
            tell_sinks()
            self._say_failures()
        else:
            self._put(tell_sinks)

    def _say_task(self, task: Callable[[], object], exc: BaseException) -> None:
        self._say(f"trainperf: writing {_name(task)} failed: {describe(exc)}")

    def _put(self, item: PerformanceRecord | Callable[[], object]) -> None:
        if self._thread is None:
            self._start_writer()
        if self._put_count - self._done_count < self._queue_size:
            self._put_count += 1
            self._queue.append(item)  # the writer takes it at its next wake
        else:
            self.dropped += 1
            if not self._said_dropped:
                self._said_dropped = True
                self._say(f"the sinks fall behind: the writer's queue holds {self._queue_size} records and a record "
                          "was dropped (the listener's `dropped` counts them; a slow or hanging sink?)")
        self._say_failures()

    def _start_writer(self) -> None:
        thread = threading.Thread(target=self._write, name="trainperf-writer", daemon=True)
        self._thread = thread
        thread.start()

    def _write(self) -> None:
        queue, wake, clock = self._queue, self._wake, time.perf_counter
        batch = 1  # records handed to the sinks at once: as many as fit in a slice
        while True:
            wake.wait(WRITE_EVERY_S)
            wake.clear()
            began = clock()
            while queue:
                item = queue[0]
                if item is None:
                    return
                if not isinstance(item, PerformanceRecord):
                    queue.popleft()
                    self._run_task(item)
                    self._done(1)
                else:
                    records = [item]
                    queue.popleft()
                    while len(records) < batch and queue and isinstance(queue[0], PerformanceRecord):
                        records.append(queue.popleft())  # type: ignore[arg-type]
                    started = clock()
                    self._write_records(records)
                    took = (clock() - started) / len(records)
                    batch = max(1, min(MAX_BATCH, int(SLICE_S / took))) if took > 0 else MAX_BATCH
                    self._done(len(records))
                if clock() - began >= SLICE_S:
                    time.sleep(YIELD_S)  # the training thread takes the interpreter, if it waits for it
                    began = clock()

    def _write_records(self, records: list[PerformanceRecord]) -> None:
        try:
            if self.before is not None:
                self.before()
            failures = self._fanout.deliver_many(records)
        except Exception as exc:  # noqa: BLE001 - the writer never dies
            failures = [f"trainperf: writing records failed: {describe(exc)}"]
        self._failures.extend(failures)

    def _run_task(self, task: Callable[[], object]) -> None:
        try:
            task()
        except Exception as exc:  # noqa: BLE001 - the writer never dies
            self._failures.append(f"trainperf: writing {_name(task)} failed: {describe(exc)}")

    def _done(self, count: int) -> None:
        self._done_count += count
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def _say_failures(self) -> None:
        failures = self._failures
        while failures:
            self._say(failures.popleft())

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued record reached every sink, at most ``timeout_s`` (default
        :data:`FLUSH_TIMEOUT_S`); whether it did. A sink still busy then is said in a warning."""
        if self.before is not None:
            self.before()
        if self.inline or self._thread is None:
            return True
        if timeout_s is None:
            timeout_s = FLUSH_TIMEOUT_S
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._waiting = True
            self._wake.set()
            try:
                while self.pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(min(left, 0.05))  # the writer notifies; the timeout only bounds a miss
            finally:
                self._waiting = False
            pending = self.pending
            done = not pending
        self._say_failures()
        if not done:
            self._say(f"a sink did not finish within {timeout_s:g} s: {pending} record(s) not yet delivered "
                      "(a hanging sink?)")
        return done

    def close(self, timeout_s: float | None = None) -> None:
        """Deliver what is queued (at most ``timeout_s``), stop the writer, and close the sinks (all
        of them, even when one fails or one still hangs). Idempotent."""
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        done = self.flush(timeout_s)
        thread = self._thread
        if thread is not None:
            self._queue.append(None)
            self._wake.set()
            if done:
                thread.join(FLUSH_TIMEOUT_S if timeout_s is None else timeout_s)
        self._fanout.close()

    @property
    def closed(self) -> bool:
        return self._closed


def _name(task: object) -> str:
    qualname = getattr(task, "__qualname__", None)
    return repr(qualname) if isinstance(qualname, str) else describe(task)


def _warn(message: str) -> None:
    warnings.warn(message if message.startswith("trainperf") else f"trainperf: {message}", SinkError, stacklevel=3)


def _flush_at_exit() -> None:
    """Records still queued at interpreter exit reach their sinks (bounded wait)."""
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    for emitter in list(_live):
        emitter.flush(max(0.0, deadline - time.monotonic()))


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker, a forked rank) has none of the parent's threads: each
    emitter starts afresh there, with a writer of its own when it next delivers (the lock and the
    queue may have been held by the parent's writer, and the parent delivers what it had queued)."""
    for emitter in list(_live):
        emitter._start_state()


atexit.register(_flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def say_sink(message: str) -> None:
    """A sink's failure, said as a :class:`~trainperf.SinkError` warning at the user's call."""
    warnings.warn(message if message.startswith("trainperf") else f"trainperf: {message}", SinkError,
                  stacklevel=user_stacklevel())
