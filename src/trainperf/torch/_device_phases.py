"""DDP's phases and collective wait on the device: events at the phase boundaries, read once completed.

On CUDA with NCCL the host does not block in the gradient all-reduce: at the end of the backward
pass DDP makes the compute stream wait for the communication stream and returns. What the host
times there says nothing about which rank arrived last; the device's own timeline does. At the
boundaries the host already sees (forward start and end, the last gradient, the end of the backward
pass after DDP's finalize, the end of the optimizer step) an event is recorded on the current
stream; between two events lies the device's time for that phase:

* ``forward``: forward start to forward end;
* ``backward``: forward end to the last gradient, less the comm hooks' host time before it;
* ``wait``: the last gradient to the end of the backward pass, less the comm hooks' host time after
  the last gradient, plus host-timed waits in other collectives. The compute stream sits there until
  every rank's gradients are reduced, so the rank whose gradients come last waits least;
* ``step``: the end of the backward pass to the end of the optimizer step.

Nothing here waits for the device. The events of a stretch of work (a backward pass with its
forward, or an optimizer step) stay in a queue until every one of them has completed, asked with a
non-blocking query, the last first (so a stretch still running costs one query); only then are the
durations read and handed to the listener's ``add_time`` and ``add_sample``. They land in the
window that is open when they are read, typically a few iterations after the work ran on the
device. The queue is bounded: when the device is that far behind, the oldest stretch is dropped and
counted in :attr:`DevicePhases.dropped`. At :meth:`DevicePhases.close` whatever has not been read
is forgotten. Events go back to the source once read, to be recorded again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

__all__ = ["BackwardPass", "DevicePhases", "EventSource"]

#: The phase boundaries, in the order they follow each other.
FORWARD_START, FORWARD_END, LAST_GRADIENT, BACKWARD_END, STEP_END = range(5)


class EventSource(Protocol):
    """Where the device's events come from: CUDA's (:class:`trainperf.torch._cuda.CudaEvents`) or a
    test's fake device."""

    def record(self) -> Any:
        """An event recorded now on the stream the model's work is queued on."""

    def done(self, event: Any) -> bool:
        """Whether the device has reached ``event`` (never waits)."""

    def elapsed_s(self, start: Any, end: Any) -> float:
        """Device seconds from ``start`` to ``end``, both completed."""

    def release(self, event: Any) -> None:
        """``event`` is no longer needed: it may be recorded again."""


class BackwardPass(NamedTuple):
    """What the host knows of a backward pass when it ends.

    Args:
        syncs: the pass ran DDP's all-reduce (outside ``no_sync``): it gives a wait.
        comm_before_s: the comm hooks' host time before the last gradient.
        comm_after_s: the comm hooks' host time after the last gradient.
        host_wait_s: time the host was blocked in other collectives (the buffer broadcast, a
            framework's own), added to the wait.
    """

    syncs: bool
    comm_before_s: float = 0.0
    comm_after_s: float = 0.0
    host_wait_s: float = 0.0


#: One boundary: its kind, its event and, at the end of a backward pass, what the host knew of it.
#: A plain tuple, unpacked where it is read: a named tuple costs more to build, five times an iteration.
_Mark = tuple[int, Any, "BackwardPass | None"]


class DevicePhases:
    """The device's time for each phase of DDP iterations; see the module's docstring.

    Args:
        source: the device's events.
        add_time: the listener's ``add_time(name, seconds)``.
        add_sample: the listener's ``add_sample(name, seconds)``, for the wait.
        max_pending: stretches of work kept unread before the oldest is dropped.
    """

    def __init__(self, source: EventSource, add_time: Callable[[str, float], None],
                 add_sample: Callable[[str, float], None], *, max_pending: int = 256) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be a positive int, got {max_pending!r}")
        self._source = source
        self._record = source.record
        self._add = add_time
        self._add_sample = add_sample
        self._max_pending = max_pending
        self._open: list[_Mark] = []  # the stretch being recorded
        self._pending: deque[list[_Mark]] = deque()  # recorded, not read yet, oldest first
        # events already read that a later stretch's phase starts from, by kind
        self._held: list[Any] = [None] * 5
        self.dropped = 0
        """Stretches dropped unread because the device was ``max_pending`` stretches behind."""

    @property
    def pending(self) -> int:
        """Stretches recorded and not read yet."""
        return len(self._pending)

    # -- recording (the training thread, and the autograd engine's for the last gradient) -------
    def forward_start(self) -> None:
        if self._open:  # a forward pass that had no backward pass (or one that raised)
            self._close()
        self._open.append((FORWARD_START, self._record(), None))

    def forward_end(self) -> None:
        self._open.append((FORWARD_END, self._record(), None))

    def last_gradient(self) -> None:
        """A gradient is in; a later call in the same backward pass replaces this mark."""
        opened = self._open
        if opened:
            kind, event, _ = opened[-1]
            if kind == LAST_GRADIENT:
                opened.pop()
                self._source.release(event)
        opened.append((LAST_GRADIENT, self._record(), None))

    def backward_end(self, backward: BackwardPass) -> None:
        """The backward pass ended after DDP's finalize (the stream then waits for the all-reduce)."""
        self._open.append((BACKWARD_END, self._record(), backward))
        self._close()

    def step_end(self) -> None:
        self._open.append((STEP_END, self._record(), None))
        self._close()

    # -- reading -----------------------------------------------------------------------------
    def _close(self) -> None:
        pending = self._pending
        pending.append(self._open)
        self._open = []
        if len(pending) > self._max_pending:
            self._forget(pending.popleft())
            self._forget_held()
            self.dropped += 1
        self.poll()

    def poll(self) -> None:
        """Read every stretch whose events have all completed, oldest first (non-blocking)."""
        pending, done = self._pending, self._source.done
        while pending:
            stretch = pending[0]
            for _, event, _ in reversed(stretch):
                if not done(event):
                    return
            pending.popleft()
            self._read(stretch)

    def _read(self, stretch: list[_Mark]) -> None:
        held, elapsed, release = self._held, self._source.elapsed_s, self._source.release
        for kind, event, backward in stretch:
            start = None
            if kind == FORWARD_END:
                start, held[FORWARD_START] = held[FORWARD_START], None
                if start is not None:
                    self._add("forward", max(0.0, elapsed(start, event)))
            elif kind == BACKWARD_END and backward is not None:
                start, held[FORWARD_END] = held[FORWARD_END], None
                gradient, held[LAST_GRADIENT] = held[LAST_GRADIENT], None
                if gradient is not None:
                    if start is not None:
                        took = elapsed(start, gradient)
                        if took > 0.0:
                            self._add("backward", max(0.0, took - backward.comm_before_s))
                        release(start)
                    if backward.syncs:  # under no_sync no collective ran: its wait comes with a later pass
                        waited = max(0.0, elapsed(gradient, event) - backward.comm_after_s)
                        self._add_sample("wait", waited + backward.host_wait_s)
                    start = gradient
            elif kind == STEP_END:
                start, held[BACKWARD_END] = held[BACKWARD_END], None
                if start is not None:
                    self._add("step", max(0.0, elapsed(start, event)))
                release(event)
                event = None
            if start is not None:
                release(start)
            if event is not None:
                previous, held[kind] = held[kind], event
                if previous is not None:
                    release(previous)

    def _forget(self, stretch: list[_Mark]) -> None:
        release = self._source.release
        for _, event, _ in stretch:
            release(event)

    def _forget_held(self) -> None:
        held, release = self._held, self._source.release
        for kind, event in enumerate(held):
            if event is not None:
                release(event)
                held[kind] = None

    def close(self) -> None:
        """Forget what has not been read, without waiting for the device; record nothing more."""
        self._forget(self._open)
        self._open = []
        while self._pending:
            self._forget(self._pending.popleft())
        self._forget_held()
