"""Progress of a long command, said on standard error while standard output is kept for its result:
what is being done, step n of N, the count so far and the time elapsed, at least every few seconds."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__: list[str] = []

#: The most seconds between two lines while a step lasts, unless a :class:`Progress` is given its own.
EVERY_S = 3.0


class Progress:
    """Says each step of long work as it begins (``trainperf bench: [2/10] prefetch, run 1 of 3``) and,
    while a step lasts, every ``every_s`` seconds how far it got (``: 40/60 batches (12 s elapsed)``),
    from a thread of its own: a step that blocks (a slow first batch) is still said.

    Use it as a context manager: the thread starts on entry and stops on exit.

    Args:
        command: the words each line starts with (``trainperf bench``).
        total: how many steps there will be (``None``: not known).
        unit: what :meth:`advance` counts (``batches``).
        every_s: the most seconds between two lines while work goes on (:data:`EVERY_S` when ``None``).
        announce: say each step as it begins, and the end; otherwise only a step that lasts past
            ``every_s`` is said, so that quick work prints nothing.
        out: where lines go (standard error when ``None``).
        clock: monotonic seconds.

    Example:
        >>> with Progress("trainperf bench", total=2, out=sys.stdout, clock=lambda: 0.0) as progress:
        ...     progress.step("as given, run 1 of 1", expected=3)
        ...     progress.advance()
        trainperf bench: [1/2] as given, run 1 of 1 (0.0 s elapsed)
        trainperf bench: done in 0.0 s
    """

    def __init__(self, command: str, *, total: int | None = None, unit: str = "batches", every_s: float | None = None,
                 announce: bool = True, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        every_s = EVERY_S if every_s is None else every_s
        if isinstance(every_s, bool) or not isinstance(every_s, (int, float)) or not every_s > 0:
            raise ValueError(f"every_s must be a positive number of seconds, got {every_s!r}")
        self.command, self.total, self.unit, self.announce = command, total, unit, announce
        self.every_s, self.out, self.clock = float(every_s), out, clock
        #: what the current step has done so far (:meth:`advance` adds to it)
        self.count = 0
        self._n = 0
        self._label = ""
        self._expected: int | None = None
        self._started = self._last = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self, label: str, *, expected: int | None = None) -> None:
        """The next step begins: ``label`` says what it does, ``expected`` how many units it will count."""
        with self._lock:
            self._n += 1
            self._label, self._expected, self.count = label, expected, 0
            if self.announce:
                self._say()
            else:
                self._last = self.clock()  # a quiet step is said once it has lasted every_s

    def advance(self, units: int = 1) -> None:
        """``units`` more done in the current step (an addition: cheap enough for every batch)."""
        self.count += units

    def poll(self) -> bool:
        """Say where the work is if nothing was said for ``every_s`` seconds (the thread calls it);
        returns whether a line was said."""
        with self._lock:
            if self._n == 0 or self.clock() - self._last < self.every_s:
                return False
            self._say()
            return True

    def _say(self) -> None:
        now = self.clock()
        self._last = now
        where = f"[{self._n}/{self.total}] " if self.total is not None else ""
        done = ""
        if self.count:
            done = f": {self.count}/{self._expected} {self.unit}" if self._expected else f": {self.count} {self.unit}"
        self._print(f"{where}{self._label}{done} ({_seconds(now - self._started)} elapsed)")

    def _print(self, text: str) -> None:
        try:
            print(f"{self.command}: {text}", file=self.out or sys.stderr, flush=True)
        except (OSError, ValueError):  # a closed or broken standard error: the work goes on unsaid
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.every_s / 4):
            self.poll()

    def __enter__(self) -> Progress:
        self._thread = threading.Thread(target=self._run, name="trainperf-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.announce and kind is None:
            self._print(f"done in {_seconds(self.clock() - self._started)}")


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
