"""The progress of a long command on standard error: each step as it begins, and while a step lasts, a
line at least every ``every_s`` seconds with its count and the time elapsed."""

from __future__ import annotations

import io
import time

import pytest

from trainperf.base import Progress


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_each_step_is_said_as_it_begins_and_a_long_one_every_few_seconds_with_its_count(clock):
    out = io.StringIO()
    progress = Progress("trainperf bench", total=3, every_s=2.0, out=out, clock=clock)
    progress.step("pre-saving the batches", expected=None)
    progress.advance(5)
    clock.advance(1.9)
    assert not progress.poll()  # said 1.9 s ago: not yet
    clock.advance(0.1)
    assert progress.poll()
    progress.step("as given, run 1 of 1", expected=60)
    clock.advance(10.0)
    progress.advance(40)
    assert progress.poll() and not progress.poll()
    assert lines(out) == [
        "trainperf bench: [1/3] pre-saving the batches (0.0 s elapsed)",
        "trainperf bench: [1/3] pre-saving the batches: 5 batches (2.0 s elapsed)",
        "trainperf bench: [2/3] as given, run 1 of 1 (2.0 s elapsed)",
        "trainperf bench: [2/3] as given, run 1 of 1: 40/60 batches (12 s elapsed)",
    ]


def test_a_quiet_progress_says_nothing_of_quick_work_and_only_what_lasts(clock):
    out = io.StringIO()
    with Progress("trainperf report", announce=False, every_s=2.0, out=out, clock=clock) as progress:
        progress.step("reading runs/today")
        clock.advance(1.0)
        assert not progress.poll()
        progress.step("writing report.html")
        clock.advance(2.5)
        assert progress.poll()
    assert lines(out) == ["trainperf report: writing report.html (3.5 s elapsed)"]


def test_the_thread_says_a_step_that_blocks_and_stops_on_exit():
    out = io.StringIO()
    with Progress("trainperf bench", total=1, every_s=0.05, out=out) as progress:
        progress.step("a slow first batch")
        deadline = time.monotonic() + 30
        while len(lines(out)) < 3 and time.monotonic() < deadline:  # the step line and two said by the thread
            time.sleep(0.01)
    said = lines(out)
    assert said[0].startswith("trainperf bench: [1/1] a slow first batch (")
    assert said[1].startswith("trainperf bench: [1/1] a slow first batch (") and said[-1].startswith(
        "trainperf bench: done in ")
    count = len(said)
    time.sleep(0.2)
    assert len(lines(out)) == count  # nothing after the exit


def test_every_s_must_be_positive():
    with pytest.raises(ValueError, match="every_s must be a positive number of seconds, got 0"):
        Progress("trainperf bench", every_s=0)
