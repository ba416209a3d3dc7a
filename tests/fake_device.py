"""A fake asynchronous device, its timeline and its events, driven by the tests' fake host clock.

The device runs queued work one item after another: work launched at host time ``t`` starts at
``max(t, the end of the work before it)``. An event recorded at host time ``t`` gets the device
time at which the work queued before it is done, ``max(t, busy_until)``, and has completed once
the host clock has passed that time (or, when a test holds the device, once the test says so).
The host can run at most ``max_ahead_s`` of device work ahead, as a full launch queue blocks a
real one. Every call is counted, so tests can assert that nothing waited for the device.
:class:`FakeEvents` is the collective timing's event source on the same device.
"""

from __future__ import annotations

from collections import Counter, deque


class FakeDevice:
    """The device: a queue of work with known durations, on the host's fake clock.

    Args:
        clock: the tests' :class:`FakeClock`, which the host advances.
        max_ahead_s: device work the host can queue ahead before a launch blocks it.
    """

    def __init__(self, clock, max_ahead_s: float = 0.1) -> None:
        self.clock = clock
        self.max_ahead_s = max_ahead_s
        self.busy_until = clock.now
        self.busy_s = 0.0  # device time spent on work
        self.user_syncs = 0

    def launch(self, seconds: float) -> None:
        """Queue ``seconds`` of device work; blocks the host while the queue is full."""
        now = self.clock.now
        if self.busy_until - now > self.max_ahead_s:
            self.clock.advance(self.busy_until - now - self.max_ahead_s)
            now = self.clock.now
        self.busy_until = max(now, self.busy_until) + seconds
        self.busy_s += seconds

    def synchronize(self) -> None:
        """What ``loss.item()`` does: the host waits for every queued work item."""
        self.user_syncs += 1
        if self.busy_until > self.clock.now:
            self.clock.advance(self.busy_until - self.clock.now)

    def event_time(self) -> float:
        return max(self.clock.now, self.busy_until)

    def wait_until(self, device_time: float) -> None:
        """The stream waits for another one (NCCL's) until ``device_time``: work queued from now on
        starts no earlier. The host does not wait."""
        self.busy_until = max(self.busy_until, device_time)


class FakeTimeline:
    """A :class:`trainperf.DeviceTimeline` over a :class:`FakeDevice`.

    ``completed_up_to`` (device time) holds the device back when set: events after it have not
    completed, whatever the host clock says. ``calls`` counts every method call.
    """

    def __init__(self, device: FakeDevice) -> None:
        self.device = device
        self.completed_up_to: float | None = None
        self.calls: Counter[str] = Counter()
        self._begin: float | None = None
        self._ended: deque[tuple[float | None, float]] = deque()
        self._origin = 0.0
        self.staged: list[object] = []

    def _done_until(self) -> float:
        if self.completed_up_to is not None:
            return self.completed_up_to
        return self.device.clock.now

    def start(self) -> None:
        self.calls["start"] += 1
        self._ended.clear()
        self._begin = None
        self._origin = self.device.event_time()

    def begin(self) -> None:
        self.calls["begin"] += 1
        if self._begin is None:
            self._begin = self.device.event_time()

    def end(self) -> None:
        self.calls["end"] += 1
        self._ended.append((self._begin, self.device.event_time()))
        self._begin = None

    def ready(self, count: int) -> bool:
        self.calls["ready"] += 1
        return count <= len(self._ended) and self._ended[count - 1][1] <= self._done_until()

    def take(self, count: int) -> list[tuple[float | None, float]]:
        self.calls["take"] += 1
        assert self.ready(count), "take() of events that have not completed would block"
        self.calls["ready"] -= 1
        origin = self._origin
        out = []
        for _ in range(count):
            begin, end = self._ended.popleft()
            out.append((None if begin is None else begin - origin, end - origin))
        self._origin = end
        return out

    def wait(self) -> None:
        self.calls["wait"] += 1
        self.completed_up_to = None
        self.device.synchronize()
        self.device.user_syncs -= 1  # not the user's

    def stage(self, value):
        self.calls["stage"] += 1
        self.staged.append(value)
        return value

    @property
    def pending(self) -> int:
        return len(self._ended)


class RealClock:
    """The host's real clock in the shape of the tests' ``FakeClock``, for a fake device in a real-time run."""

    @property
    def now(self) -> float:
        import time

        return time.perf_counter()

    def advance(self, seconds: float) -> None:
        import time

        time.sleep(seconds)


class FakeEvent:
    """One event of :class:`FakeEvents`: the device time it was recorded at."""

    def __init__(self) -> None:
        self.t = 0.0


class FakeEvents:
    """The collective timing's event source (``record``, ``done``, ``elapsed_s``, ``release``) over a
    :class:`FakeDevice`, with a pool as CUDA's has.

    ``completed_up_to`` (device time) holds the device back when set, as in :class:`FakeTimeline`.
    ``calls`` counts every method call, ``created`` the events made, ``free`` the pool.
    """

    def __init__(self, device: FakeDevice) -> None:
        self.device = device
        self.completed_up_to: float | None = None
        self.calls: Counter[str] = Counter()
        self.created = 0
        self.free: list[FakeEvent] = []

    def record(self) -> FakeEvent:
        self.calls["record"] += 1
        if self.free:
            event = self.free.pop()
        else:
            event = FakeEvent()
            self.created += 1
        event.t = self.device.event_time()
        return event

    def _reached(self, event: FakeEvent) -> bool:
        limit = self.device.clock.now if self.completed_up_to is None else self.completed_up_to
        return event.t <= limit

    def done(self, event: FakeEvent) -> bool:
        self.calls["done"] += 1
        return self._reached(event)

    def elapsed_s(self, start: FakeEvent, end: FakeEvent) -> float:
        self.calls["elapsed_s"] += 1
        assert self._reached(start) and self._reached(end), "elapsed time of an event not reached would fail"
        return end.t - start.t

    def release(self, event: FakeEvent) -> None:
        self.calls["release"] += 1
        assert all(event is not e for e in self.free), "an event given back twice"
        self.free.append(event)
