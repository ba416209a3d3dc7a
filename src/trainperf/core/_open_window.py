"""The window being measured: where it began, one entry per iteration so far, and what adapters added
to it (named times, host time left out before an iteration). It knows nothing of the listener and
takes no lock: the listener calls it on the thread that records, or under its lock."""

from __future__ import annotations

from typing import Any

from ..records import WindowEntry, percentile
from ._step_flops import StepShape

__all__: list[str] = []


class OpenWindow:
    """The open window's state.

    Attributes:
        start: when it began, on the listener's clock.
        entries: one :data:`~trainperf.records._window.WindowEntry` per iteration recorded in it.
        first_iteration: the number of its first iteration.
        end: the iteration count at which it closes.
        warmup: whether it is the first window of the run.
        score: the latest loss given in it (read only when it is reported).
        shapes: how many of its iterations trained on each step shape (adapters that follow the
            batch's shape add one per iteration; see :mod:`~trainperf.core._step_flops`).
    """

    __slots__ = ("start", "entries", "first_iteration", "end", "warmup", "score", "shapes", "_tokens",
                 "_tokens_counted", "_padded", "_padded_counted", "_loss", "_loss_counted", "_times", "_samples",
                 "_excluded")

    def __init__(self) -> None:
        self.start = 0.0
        self.entries: list[WindowEntry] = []
        self.first_iteration = 1
        self.end = 0
        self.warmup = True
        self.score: Any = None
        self.shapes: dict[StepShape, int] = {}
        self._tokens = 0  # the real tokens of the iterations that counted theirs
        self._tokens_counted = 0  # how many iterations did
        self._padded = self._padded_counted = 0  # the same for padded tokens,
        self._loss = self._loss_counted = 0  # and for loss tokens
        self._times: dict[str, float] = {}
        self._samples: dict[str, list[float]] = {}  # per-iteration values of add_sample
        self._excluded: dict[int, float] = {}  # iteration index -> host seconds left out before it

    def reset(self, now: float, count: int, frequency: int, *, first: bool) -> None:
        """Open the next window at ``now``, after ``count`` iterations, for ``frequency`` more."""
        self.start = now
        self.entries = []
        self.score = None
        self.shapes = {}
        self._tokens = self._tokens_counted = 0
        self._padded = self._padded_counted = self._loss = self._loss_counted = 0
        self.end = count + frequency
        self.first_iteration = count + 1
        self.warmup = first

    @property
    def last_end(self) -> float:
        """When the last iteration recorded in it ended (its start while there is none)."""
        return self.entries[-1][0] if self.entries else self.start

    def add_tokens(self, tokens: int) -> None:
        """One iteration's real tokens (called only for iterations that counted them)."""
        self._tokens += tokens
        self._tokens_counted += 1

    def window_tokens(self, iterations: int) -> int | None:
        """The window's real tokens when each of its ``iterations`` counted them, else ``None``."""
        return self._tokens if iterations and self._tokens_counted == iterations else None

    def add_token_counts(self, padded: int | None, loss: int | None) -> None:
        """One iteration's padded and loss tokens (``None``: that one was not counted)."""
        if padded is not None:
            self._padded += padded
            self._padded_counted += 1
        if loss is not None:
            self._loss += loss
            self._loss_counted += 1

    def window_token_counts(self, iterations: int) -> tuple[int | None, int | None]:
        """The window's padded and loss tokens, each when all its ``iterations`` counted them."""
        if not iterations:
            return None, None
        return (self._padded if self._padded_counted == iterations else None,
                self._loss if self._loss_counted == iterations else None)

    def add_time(self, name: str, seconds: float) -> None:
        times = self._times
        times[name] = times.get(name, 0.0) + seconds

    def take_named(self) -> dict[str, float]:
        """The named times in seconds (those added outside any window: before training, after its
        last iteration), forgotten once taken."""
        times, self._times, self._samples = self._times, {}, {}
        return times

    def add_sample(self, name: str, seconds: float) -> None:
        self.add_time(name, seconds)
        samples = self._samples.get(name)
        if samples is None:
            samples = self._samples[name] = []
        samples.append(seconds)

    def take_times(self, iterations: int) -> dict[str, float]:
        """The named times as ``<name>_ms`` means over ``iterations`` (and ``<name>_p50_ms`` medians of
        the sampled ones), forgotten once taken."""
        if not self._times:
            return {}
        times, self._times = self._times, {}
        out = {f"{name}_ms": 1000.0 * seconds / iterations for name, seconds in times.items()}
        if self._samples:
            samples, self._samples = self._samples, {}
            for name, values in samples.items():
                out[f"{name}_p50_ms"] = 1000.0 * percentile(sorted(values), 50)
        return out

    def exclude_before(self, index: int, seconds: float) -> None:
        """``seconds`` of host time left out just before the iteration of 0-based ``index``."""
        self._excluded[index] = self._excluded.get(index, 0.0) + seconds

    def take_excluded(self, count: int, iterations: int) -> tuple[float, ...]:
        """Per iteration of the ``iterations`` that end at ``count``, the host seconds left out before
        it (empty when none was); forgotten once taken."""
        if not self._excluded:
            return ()
        first = count - iterations
        out = tuple(self._excluded.pop(i, 0.0) for i in range(first, count))
        self._excluded = {i: s for i, s in self._excluded.items() if i >= count}
        return out
