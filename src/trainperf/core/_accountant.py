"""One iteration's account from plain events: the same definitions for every framework's adapter.

An adapter translates its framework's hooks into a few calls, each with readings of one clock (the
listener's, which stands still while trainperf works):

* :meth:`StepAccountant.fetch`: the training loader delivered a batch (or, with ``batch=False``,
  started or ended an epoch) after blocking for some seconds: **data wait**, wherever it falls;
* :meth:`StepAccountant.begin`: the first sign of the step's own work (a batch handed to the
  step, a training forward pass); later calls in the same iteration change nothing;
* :meth:`StepAccountant.wait`: seconds blocked in a collective the framework runs itself, between
  steps or between a step's micro-batches (Lightning's stop-signal broadcast, the Trainer's count of
  tokens across ranks and its gather of the loss when it logs): **collective wait**, never host work;
* :meth:`StepAccountant.span`: seconds of evaluation, checkpoint saving or loading between steps: **other
  host time**, and also its own figure (``eval_ms``, ``checkpoint_ms``, ``checkpoint_load_ms``);
* :meth:`StepAccountant.end`: the optimizer step ended; the iteration is handed to the listener;
  :meth:`StepAccountant.end_gap` instead, when no loader delivered its batches (the data wait is
  then the gap before the step's first sign, with what later micro-batches waited inside the step).

The iteration runs from the previous step's end (its *boundary*) to this one's. Its parts add up:
data wait (every fetch of the iteration, micro-batches after the first included), other host time
(from the boundary to the first sign, less the data wait and collective waits before it: the
loop's own work, evaluation, checkpoints, logging, whatever callbacks run after a step), and the
step itself (the rest: moving the batch, forwards, backward, collectives inside the step, the
optimizer). A framework's hook order moves none of these points: the boundary is the optimizer
step's own end, not the hook an adapter happens to run in.

Example:
    >>> calls = []
    >>> account = StepAccountant(lambda *args: calls.append(args), at=0.0)
    >>> account.fetch(0.010, samples=8)      # 10 ms waiting for the batch
    >>> account.begin(0.012)                 # 2 ms of the loop's own work, then the step
    >>> account.end(0.050)                   # the optimizer step ended
    >>> now, samples, batches, etl, started, other, steps, skipped, tokens = calls[0]
    >>> (now, samples, batches, round(etl, 3), round(other, 3), steps)
    (0.05, 8, 1, 0.01, 0.002, 1)
"""

from __future__ import annotations

from collections.abc import Callable

from ._named_spans import SPAN_KINDS  # what adapters name: eval, checkpoint (saves), checkpoint_load

__all__ = ["Record", "StepAccountant", "SPAN_KINDS"]


#: What receives each iteration: ``(now, samples, batches, etl, started, other, steps, skipped, tokens)``,
#: the order of :meth:`trainperf.PerformanceListener.record_step`.
Record = Callable[[float, "int | None", int, float, "float | None", float, int, int, "int | None"], object]


class StepAccountant:
    """Splits each iteration into data wait, other host time, collective wait and the step.

    Args:
        record: called once per iteration with its figures (the listener's :meth:`record_step`).
        at: where the first iteration begins, on the clock every later reading comes from.
        add_time: where named parts go (the listener's ``add_time``): the spans' seconds.
        add_wait: where collective waits go as they happen (a collective timer's ``add_wait``, so
            that the wait it records for the iteration holds them); without one they count as the
            step's time, never as host time.
        add_tokens: where each iteration's padded and loss tokens go just before it is recorded (the
            listener's ``count_tokens``), when its fetches counted either.
    """

    __slots__ = ("_record", "_add_time", "_add_wait", "_add_tokens", "boundary", "began", "etl", "_etl_before",
                 "_wait_before", "_span_before", "_span_within", "samples", "batches", "tokens", "tokens_padded",
                 "tokens_loss", "steps", "skipped")

    def __init__(self, record: Record, *, at: float = 0.0, add_time: Callable[[str, float], None] | None = None,
                 add_wait: Callable[[float], None] | None = None,
                 add_tokens: Callable[[int | None, int | None], None] | None = None) -> None:
        self._record = record
        self._add_time = add_time
        self._add_wait = add_wait
        self._add_tokens = add_tokens
        self.restart(at)

    def restart(self, at: float) -> None:
        """Training (re)starts at ``at``: nothing of an unfinished iteration is kept."""
        self.boundary = at
        self._clear()

    def _clear(self) -> None:
        self.began: float | None = None  # the first sign of the step's own work
        self.etl = 0.0
        self._etl_before = 0.0  # data wait before that sign (inside the gap, so not host work)
        self._wait_before = 0.0  # collective waits before that sign
        self._span_before = 0.0  # spans before that sign: other host time, also inside a gap
        self._span_within = 0.0  # spans after it, moved out of the step into other host time
        self.samples: int | None = 0
        self.batches = 0
        self.tokens: int | None = 0
        self.tokens_padded: int | None = 0
        self.tokens_loss: int | None = 0
        self.steps = 0
        self.skipped = 0

    @property
    def open(self) -> bool:
        """Whether the iteration has begun (a batch was delivered, or the step's work seen)."""
        return self.began is not None or self.batches > 0

    # -- events ------------------------------------------------------------------------------------
    def fetch(self, seconds: float, *, samples: int | None = None, tokens: int | None = None,
              batch: bool = True, padded: int | None = None, loss: int | None = None) -> None:
        """The training loader blocked ``seconds`` (its own GC pauses already taken out) and delivered
        a batch of ``samples`` and real ``tokens``, ``padded`` tokens (padding included) and ``loss``
        tokens (``None``: not known); ``batch=False``: it delivered none (an epoch's ``iter()`` starting
        workers, an exhausted loader's ``StopIteration``)."""
        self.etl += seconds
        if self.began is None:
            self._etl_before += seconds
        if not batch:
            return
        self.batches += 1
        counted = self.samples
        self.samples = None if samples is None or counted is None else counted + samples
        have = self.tokens
        self.tokens = None if tokens is None or have is None else have + tokens
        have = self.tokens_padded
        self.tokens_padded = None if padded is None or have is None else have + padded
        have = self.tokens_loss
        self.tokens_loss = None if loss is None or have is None else have + loss

    def begin(self, at: float) -> None:
        """The step's own work began at ``at`` (only the iteration's first sign counts)."""
        if self.began is None:
            self.began = at

    def wait(self, seconds: float) -> None:
        """``seconds`` blocked in a collective the framework runs itself, between steps or inside one
        (between micro-batches): collective wait, never the loop's host time."""
        if self.began is None:
            self._wait_before += seconds
        if self._add_wait is not None:
            self._add_wait(seconds)

    def span(self, kind: str, seconds: float, *, within: bool = False) -> None:
        """``seconds`` of ``kind`` (``"eval"``, ``"checkpoint"``, ``"checkpoint_load"``, or another of
        :meth:`~trainperf.PerformanceListener.span`'s names) between steps: other host time, and
        reported as its own figure (``<kind>_ms``, the mean per iteration of the window).
        ``within``: the span fell after the iteration's first sign (a checkpoint saved after the
        batch was fetched): it is taken out of the step's time and counted as other host time."""
        if not seconds > 0.0:
            return
        if self._add_time is not None:
            self._add_time(kind, seconds)
        if within:
            self._span_within += seconds
        elif self.began is None:
            self._span_before += seconds

    def step(self, skipped: bool = False) -> None:
        """An optimizer step of the iteration happened (``skipped``: a scaler skipped it). Several
        may happen before :meth:`end` (manual optimisation, several optimizers)."""
        self.steps += 1
        if skipped:
            self.skipped += 1

    def end(self, at: float, *, batches: int | None = None) -> None:
        """The iteration's last optimizer step ended at ``at``: hand it over and start the next one
        there. ``batches`` overrides the batch count (micro-batches seen by the framework when no
        loader fetch was). An iteration with no step counted is one step."""
        began = self.began if self.began is not None else at
        other = began - self.boundary - self._etl_before - self._wait_before
        if other < 0.0:
            other = 0.0
        within = self._span_within
        if within:  # out of the step, never more than the step had
            room = at - began - (self.etl - self._etl_before)
            if room > 0.0:
                other += within if within < room else room
        steps = self.steps or 1
        count = self.batches if batches is None else batches
        known = count == self.batches and count > 0
        samples = self.samples if known else None
        tokens = self.tokens if known else None
        if known and self._add_tokens is not None and (self.tokens_padded is not None or self.tokens_loss is not None):
            self._add_tokens(self.tokens_padded, self.tokens_loss)
        etl, skipped = self.etl, self.skipped
        self.boundary = at
        self._clear()
        self._record(at, samples, count, etl, None, other, steps, skipped, tokens)

    def end_gap(self, at: float, *, samples: int | None, batches: int, data: float | None = None) -> None:
        """Like :meth:`end`, for an iteration whose batches no loader delivered (a plain iterable):
        its data wait is the gap from the boundary to its first sign (the listener's ``started=``,
        ``etl_source == "gap"``), less the spans in that gap, which are other host time. ``data``:
        the seconds of the gap timed inside the loop's iterable; then that much of the gap (with the
        fetches' own) is the data wait and the rest other host time, and fetches after the first
        sign (the iterable timed between micro-batches) add to the data wait. ``samples`` and ``batches``
        are the caller's (counted from forward passes); no tokens are known. Without a first sign
        (a forward that was not seen) the fetches' wait alone is the data wait, the rest the step."""
        began = self.began
        etl, other, started = self.etl, 0.0, None
        if began is not None:
            spans = self._span_before
            if data is None:
                started, other = began - spans, spans
            else:
                gap = began - self.boundary
                if gap < 0.0:
                    gap = 0.0
                # the gap's data wait, never more than the gap less its spans; the fetches after the
                # first sign (later micro-batches) are data wait inside the step on top of it
                before = min(gap - spans if gap > spans else 0.0, self._etl_before + data)
                other = gap - before
                etl = before + etl - self._etl_before
        within = self._span_within
        if within:
            room = at - (began if began is not None else self.boundary)
            if room > 0.0:
                other += within if within < room else room
        steps, skipped = self.steps or 1, self.skipped
        self.boundary = at
        self._clear()
        self._record(at, samples, batches, etl, started, other, steps, skipped, None)
