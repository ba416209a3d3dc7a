"""Goodput: where a rank's and a job's whole time went, from their attempts' accounts.

A rank's wall time runs from its first process's start to its last sign of life, restarts and the
gaps between them included; it splits into rows that add up to it (:data:`GOODPUT_ROWS`). The **ideal step**
is the median of the steady windows' per-iteration step (the warm-up windows' when there is no
other); **goodput** is ``ideal step x net progress / wall time``, where net progress is the iteration
the last attempt reached less the one the first attempt started from. The step time of every window
splits into the productive row (ideal step x net progress), lost progress (ideal step x iterations
trained again after a restart from an earlier checkpoint), the warm-up's excess over the ideal step,
and slowdown (the rest: steps slower than the ideal, less those faster). The job's wall time is its
slowest rank's, and its rows are that rank's against the job's ideal step (all ranks' steady windows).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._goodput import WINDOW_PARTS, AttemptAccount, StepHistogram, merged_steps

__all__ = ["GoodputAccount", "GOODPUT_ROWS", "account_rank", "account_job", "live_goodput", "duration_words"]

#: Each row's key (in JSON) and words, in the order they are shown.
GOODPUT_ROWS = (
    ("productive", "productive steps (ideal step x net progress)"),
    ("startup", "start-up (process start to training)"),
    ("warmup", "compilation and warm-up above the ideal step"),
    ("data_wait", "data wait (blocking)"),
    ("gc", "garbage collection"),
    ("eval", "evaluation"),
    ("checkpoint_save", "checkpoint save"),
    ("checkpoint_load", "checkpoint load"),
    ("other_host", "other host time"),
    ("collective_wait", "collective wait"),
    ("slowdown", "slowdown against the ideal step"),
    ("lost_progress", "lost progress (iterations trained again)"),
    ("restart_gaps", "restart gaps"),
    ("trainperf", "trainperf's own time"),
)
#: A span's name (``add_time``'s) to the row it is counted in; any other name is other host time.
_SPAN_ROWS = {"eval": "eval", "checkpoint": "checkpoint_save", "checkpoint_load": "checkpoint_load"}


@dataclass(frozen=True)
class Attempt:
    """One attempt on the timeline: wall times (seconds since the epoch) and iterations."""

    process_start: float
    started: float | None
    last_seen: float
    start_iteration: int
    reached: int
    clean: bool
    pid: int


@dataclass(frozen=True)
class GoodputAccount:
    """A rank's or a job's time account.

    Attributes:
        wall_s: from the first process's start to the last sign of life.
        rows: seconds per :data:`GOODPUT_ROWS` key; they add up to ``wall_s``.
        goodput: ``rows["productive"] / wall_s`` (0 to 1); ``None`` with no window.
        ideal_step_s: the ideal step, ``None`` with no window.
        net_progress: iterations that stay trained; ``lost_iterations`` those trained again.
        first_iteration, last_iteration: where the first attempt started and the last one reached.
        attempts: each attempt, oldest first.
        rank: the rank (the slowest one, for a job); ``ranks``: each rank's own account (a job's).
        tail_windows: windows read from files past what the ledger held (a killed attempt's last ones).
    """

    wall_s: float
    rows: dict[str, float]
    goodput: float | None
    ideal_step_s: float | None
    net_progress: int
    lost_iterations: int
    first_iteration: int
    last_iteration: int
    attempts: tuple[Attempt, ...]
    rank: int | None = None
    ranks: dict[int, GoodputAccount] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def share(self, key: str) -> float:
        """A row's share of the wall time, 0 to 1."""
        return self.rows[key] / self.wall_s if self.wall_s > 0.0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: the rows with seconds and shares."""
        out: dict[str, Any] = {
            "wall_s": self.wall_s, "goodput": self.goodput, "ideal_step_s": self.ideal_step_s,
            "net_progress": self.net_progress, "lost_iterations": self.lost_iterations,
            "first_iteration": self.first_iteration, "last_iteration": self.last_iteration,
            "rank": self.rank,
            "rows": [{"row": key, "what": words, "seconds": self.rows[key], "share": self.share(key)}
                     for key, words in GOODPUT_ROWS],
            "attempts": [vars(a) for a in self.attempts],
        }
        if self.ranks:
            out["ranks"] = {str(r): {"wall_s": a.wall_s, "goodput": a.goodput, "ideal_step_s": a.ideal_step_s,
                                     "net_progress": a.net_progress, "lost_iterations": a.lost_iterations,
                                     "attempts": len(a.attempts)}
                            for r, a in sorted(self.ranks.items())}
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def lines(self) -> list[str]:
        """The account in plain words, one row per line, largest first after the productive one."""
        who = "the job" if self.ranks else ("this run" if self.rank is None else f"rank {self.rank}")
        if self.goodput is None or self.ideal_step_s is None:
            head = (f"goodput of {who}: not known (no window was reported); wall time "
                    f"{duration_words(self.wall_s)}")
        else:
            head = (f"goodput of {who}: {100 * self.goodput:.1f}% of {duration_words(self.wall_s)} trained the model "
                    f"(ideal step {1000 * self.ideal_step_s:.4g} ms x {self.net_progress:,} iterations of net progress"
                    f"{', ' + str(len(self.attempts)) + ' attempts' if len(self.attempts) > 1 else ''})")
        out = [head]
        words = dict(GOODPUT_ROWS)
        rest = sorted((k for k, _ in GOODPUT_ROWS if k != "productive"), key=lambda k: -abs(self.rows[k]))
        order = ["productive", *rest]
        for key in order:
            seconds = self.rows[key]
            if key != "productive" and abs(seconds) < 0.0005 * max(self.wall_s, 1e-9):
                continue
            what = words[key]
            if key == "lost_progress":
                what = f"lost progress ({self.lost_iterations:,} iterations trained again)"
            out.append(f"  {100 * self.share(key):5.1f}%  {duration_words(seconds):>13}  {what}")
        if len(self.ranks) > 1 and self.rank is not None:
            out.append(f"  the job's wall time is rank {self.rank}'s, its slowest of {len(self.ranks)}")
        out += [f"  note: {note}" for note in self.notes]
        return out


def duration_words(seconds: float) -> str:
    """Seconds as the account says them: ``"4.50 s"``, ``"1 min 43.4 s"``, ``"2 h 05 min"``."""
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.2f} s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)} min {seconds % 60:04.1f} s"
    return f"{sign}{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def _ideal(steady: StepHistogram, warmup: StepHistogram) -> float | None:
    ideal = steady.median()
    return ideal if ideal is not None else warmup.median()


def account_rank(attempts: Iterable[AttemptAccount], *, ideal: float | None = None, rank: int | None = None,
                 notes: Iterable[str] = ()) -> GoodputAccount:
    """The rows of one rank's attempts (any order; sorted by process start), against ``ideal`` (the
    rank's own ideal step when ``None``)."""
    ordered = sorted(attempts, key=lambda a: (a.process_start, a.first_seen))
    if not ordered:
        raise ValueError("attempts must hold at least one attempt")
    if ideal is None:
        ideal = _ideal(*merged_steps(ordered))
    rows = dict.fromkeys((key for key, _ in GOODPUT_ROWS), 0.0)
    warm_step = steady_step = 0.0
    warm_n = 0
    shown: list[Attempt] = []
    previous: AttemptAccount | None = None
    for a in ordered:
        # a later listener of the same process (a second fit) goes on from where the one before ended:
        # the time between them is the process's own host time, not a start-up or a restart
        same = previous is not None and a.pid == previous.pid and abs(a.process_start - previous.process_start) < 1.0
        origin = previous.last_seen_or_start() if same and previous is not None else a.process_start
        before = max(0.0, a.first_seen - origin)
        spans = _add_spans(rows, a.startup_parts)
        rows["other_host" if same else "startup"] += max(0.0, before - spans)
        for name in WINDOW_PARTS:
            rows[name] += a.parts[name]
        window_parts = sum(a.parts.values())
        tail = _add_spans(rows, a.tail_parts)
        step = a.warmup_step_s + a.steady_step_s
        # what no window holds: the time after the last window (a clean close's teardown), and the
        # small drift between the wall clock and the monotonic one the windows are timed on
        wall = max(0.0, a.last_seen_or_start() - origin)
        rows["other_host"] += wall - max(before, spans) - window_parts - step - tail
        warm_step += a.warmup_step_s
        warm_n += a.warmup_iterations
        steady_step += a.steady_step_s
        if previous is not None and not same:
            rows["restart_gaps"] += max(0.0, a.process_start - previous.last_seen_or_start())
        shown.append(Attempt(a.process_start, a.started, a.last_seen_or_start(), a.start_iteration, a.reached,
                             a.ended is not None, a.pid))
        if previous is None or a.last_seen_or_start() >= previous.last_seen_or_start():
            previous = a
    first = ordered[0].start_iteration
    # the progress that stays is where the attempt that ended last left the model (a restart from an
    # older checkpoint that stopped short of where an earlier attempt had been loses the difference)
    net = max(0, max(ordered, key=lambda a: a.last_seen_or_start()).reached - first)
    # iterations trained more than once: every attempt's, less the progress that stayed (a kill at 250
    # and a resume from 200 train 201-250 twice)
    lost = max(0, sum(max(0, a.reached - a.start_iteration) for a in ordered) - net)
    total = warm_step + steady_step
    if ideal is not None:
        rows["productive"] = ideal * net
        rows["lost_progress"] = ideal * lost
        rows["warmup"] = max(0.0, warm_step - ideal * warm_n)
        rows["slowdown"] = total - rows["productive"] - rows["lost_progress"] - rows["warmup"]
    else:
        rows["slowdown"] = total
    wall = sum(rows.values())
    goodput = rows["productive"] / wall if ideal is not None and wall > 0.0 else None
    return GoodputAccount(wall, rows, goodput, ideal, net, lost, first, first + net, tuple(shown), rank=rank,
                          notes=tuple(notes))


def _add_spans(rows: dict[str, float], spans: Mapping[str, float]) -> float:
    total = 0.0
    for name, seconds in spans.items():
        rows[_SPAN_ROWS.get(name, "other_host")] += seconds
        total += seconds
    return total


def account_job(ranks: Mapping[int, Iterable[AttemptAccount]], *, notes: Iterable[str] = ()) -> GoodputAccount:
    """The job's account: every rank's own, and the job's rows (its slowest rank's against the ideal
    step of every rank's steady windows)."""
    lists = {rank: list(attempts) for rank, attempts in ranks.items() if attempts}
    if not lists:
        raise ValueError("ranks must hold at least one rank with an attempt")
    own = {rank: account_rank(attempts, rank=rank) for rank, attempts in lists.items()}
    ideal = _ideal(*merged_steps(a for attempts in lists.values() for a in attempts))
    slowest = max(own, key=lambda r: (own[r].wall_s, -r))
    job = account_rank(lists[slowest], ideal=ideal, rank=slowest, notes=notes)
    return GoodputAccount(job.wall_s, job.rows, job.goodput, ideal, job.net_progress, job.lost_iterations,
                          job.first_iteration, job.last_iteration, job.attempts, rank=slowest, ranks=own,
                          notes=job.notes)


def live_goodput(steps: StepHistogram, first_start: float, first_iteration: int, iteration: int,
                 now: float) -> float | None:
    """The job's goodput so far: the ideal step (``steps``' median) x the iterations trained since the
    first attempt started, over the time since its process started; ``None`` before a steady window."""
    ideal = steps.median()
    wall = now - first_start
    if ideal is None or not wall > 0.0 or not math.isfinite(wall):
        return None
    return max(0.0, ideal * (iteration - first_iteration) / wall)
