"""The step accountant with plain numbers: no clock, no listener, no framework."""

from __future__ import annotations

import pytest

from trainperf.core._accountant import StepAccountant


class Calls:
    def __init__(self):
        self.rows = []
        self.times = []
        self.waits = []

    def record(self, *args):
        self.rows.append(args)

    def add_time(self, name, seconds):
        self.times.append((name, seconds))

    def add_wait(self, seconds):
        self.waits.append(seconds)


def make(at=0.0, waits=True):
    calls = Calls()
    account = StepAccountant(calls.record, at=at, add_time=calls.add_time,
                             add_wait=calls.add_wait if waits else None)
    return calls, account


def split(row):
    now, samples, batches, etl, started, other, steps, skipped, tokens = row
    return dict(now=now, samples=samples, batches=batches, etl=etl, started=started, other=other, steps=steps,
                skipped=skipped, tokens=tokens)


def test_parts_add_up_to_the_iteration():
    calls, account = make(at=1.0)
    account.fetch(0.020, samples=8, tokens=100)
    account.begin(1.030)  # 10 ms of the loop's own work after the 20 ms fetch
    account.end(1.100)
    row = split(calls.rows[0])
    assert row["now"] == 1.100
    assert row["etl"] == pytest.approx(0.020)
    assert row["other"] == pytest.approx(0.010)
    assert (row["samples"], row["batches"], row["tokens"], row["steps"], row["skipped"]) == (8, 1, 100, 1, 0)
    assert row["started"] is None
    compute = row["now"] - 1.0 - row["etl"] - row["other"]
    assert compute == pytest.approx(0.070)


def test_the_next_iteration_starts_where_the_step_ended():
    calls, account = make(at=0.0)
    account.fetch(0.01, samples=4)
    account.begin(0.01)
    account.end(0.05)
    account.begin(0.08)  # 30 ms after the step: a user's callback, logging
    account.fetch(0.01, samples=4)  # fetched after the step began (a later micro-batch)
    account.end(0.12)
    second = split(calls.rows[1])
    assert second["other"] == pytest.approx(0.03)
    assert second["etl"] == pytest.approx(0.01)
    assert second["samples"] == 4 and second["batches"] == 1


def test_micro_batches_fetched_inside_the_step_are_data_wait_not_taken_from_other():
    calls, account = make()
    account.fetch(0.01, samples=2, tokens=5)
    account.begin(0.015)
    account.fetch(0.02, samples=2, tokens=7)
    account.fetch(0.03, samples=3, tokens=None)
    account.end(0.2)
    row = split(calls.rows[0])
    assert row["etl"] == pytest.approx(0.06)
    assert row["other"] == pytest.approx(0.005)
    assert row["batches"] == 3 and row["samples"] == 7 and row["tokens"] is None


def test_epoch_fetches_are_data_wait_without_a_batch():
    calls, account = make()
    account.fetch(0.5, batch=False)  # iter() starting workers
    account.fetch(0.1, samples=3)
    account.begin(0.7)
    account.end(1.0)
    row = split(calls.rows[0])
    assert row["etl"] == pytest.approx(0.6)
    assert row["other"] == pytest.approx(0.1)
    assert row["batches"] == 1 and row["samples"] == 3


def test_collective_wait_between_steps_is_neither_host_time_nor_data():
    calls, account = make()
    account.wait(0.04)
    account.fetch(0.01, samples=1)
    account.begin(0.06)
    account.wait(0.5)  # inside the step: not taken from other either way
    assert calls.waits == [pytest.approx(0.04), pytest.approx(0.5)]  # as they happen: the step's wait holds them
    account.end(0.9)
    row = split(calls.rows[0])
    assert row["other"] == pytest.approx(0.01)
    assert row["etl"] == pytest.approx(0.01)
    assert len(calls.waits) == 2


def test_without_a_wait_sink_collective_waits_stay_in_the_step():
    calls, account = make(waits=False)
    account.wait(0.04)
    account.begin(0.05)
    account.end(0.1)
    assert split(calls.rows[0])["other"] == pytest.approx(0.01)


def test_spans_are_other_time_and_their_own_figure():
    calls, account = make()
    account.span("eval", 0.3)
    account.span("checkpoint", 0.2)
    account.span("eval", 0.0)  # nothing to say
    account.fetch(0.01, samples=2)
    account.begin(0.6)
    account.end(0.7)
    row = split(calls.rows[0])
    assert row["other"] == pytest.approx(0.59)
    assert calls.times == [("eval", 0.3), ("checkpoint", 0.2)]


def test_steps_and_skipped_steps_are_counted():
    calls, account = make()
    account.begin(0.0)
    account.step()
    account.step(skipped=True)
    account.end(0.1)
    row = split(calls.rows[0])
    assert (row["steps"], row["skipped"]) == (2, 1)
    account.begin(0.2)
    account.end(0.3)
    assert split(calls.rows[1])["steps"] == 1 and split(calls.rows[1])["skipped"] == 0


def test_no_sign_of_the_step_makes_the_whole_gap_host_time_less_data():
    calls, account = make()
    account.fetch(0.02, samples=1)
    account.end(0.05)
    row = split(calls.rows[0])
    assert row["other"] == pytest.approx(0.03)


def test_given_batch_count_without_fetches_leaves_samples_unknown():
    calls, account = make()
    account.begin(0.0)
    account.end(0.1, batches=4)
    row = split(calls.rows[0])
    assert row["batches"] == 4 and row["samples"] is None and row["tokens"] is None


def test_a_given_count_that_disagrees_with_the_fetches_leaves_samples_unknown():
    calls, account = make()
    account.fetch(0.0, samples=2, tokens=3)
    account.end(0.1, batches=2)
    row = split(calls.rows[0])
    assert row["batches"] == 2 and row["samples"] is None and row["tokens"] is None


def test_other_is_never_negative():
    calls, account = make(at=1.0)
    account.fetch(0.5, samples=1)  # a fetch reading longer than the gap (clock granularity)
    account.begin(1.1)
    account.end(1.2)
    assert split(calls.rows[0])["other"] == 0.0


def test_restart_forgets_an_unfinished_iteration():
    calls, account = make()
    account.fetch(0.3, samples=9)
    account.begin(0.4)
    account.restart(5.0)
    assert not account.open
    account.fetch(0.1, samples=1)
    assert account.open
    account.begin(5.2)
    account.end(5.3)
    row = split(calls.rows[0])
    assert row["etl"] == pytest.approx(0.1) and row["other"] == pytest.approx(0.1) and row["samples"] == 1


def test_a_span_after_the_first_sign_moves_from_the_step_into_other_time_when_said_so():
    calls, account = make()
    account.fetch(0.010, samples=4)
    account.begin(0.010)
    account.span("checkpoint", 0.020, within=True)  # saved after the batch came
    account.span("eval", 0.005)  # not said: it stays in the step, as before
    account.end(0.100)
    row = split(calls.rows[0])
    assert row["other"] == pytest.approx(0.020) and row["etl"] == pytest.approx(0.010)
    assert calls.times == [("checkpoint", 0.020), ("eval", 0.005)]


def test_a_span_inside_the_step_never_takes_more_than_the_step_had():
    calls, account = make()
    account.begin(0.0)
    account.fetch(0.030, samples=1)
    account.span("checkpoint", 0.5, within=True)
    account.end(0.040)  # 10 ms of step beside the 30 ms fetch
    row = split(calls.rows[0])
    assert row["other"] == pytest.approx(0.010)
    assert row["etl"] + row["other"] <= 0.040


def test_a_nan_or_negative_span_says_nothing_and_moves_nothing():
    calls, account = make()
    account.span("eval", float("nan"))
    account.span("eval", -1.0, within=True)
    account.begin(0.01)
    account.end(0.02)
    assert calls.times == [] and split(calls.rows[0])["other"] == pytest.approx(0.01)


def test_without_a_loader_the_gap_is_the_data_wait_given_as_its_end():
    calls, account = make(at=1.0)
    account.begin(1.030)  # the first forward: the gap before it stands for the data wait
    account.step()
    account.end_gap(1.050, samples=8, batches=2)
    row = split(calls.rows[0])
    assert (row["started"], row["other"], row["samples"], row["batches"], row["tokens"]) == (1.030, 0.0, 8, 2, None)
    assert row["steps"] == 1 and calls.rows[0][0] == 1.050


def test_without_a_loader_spans_in_the_gap_are_other_time_not_data_wait():
    calls, account = make(at=0.0)
    account.span("eval", 0.012)
    account.span("checkpoint", 0.006)
    account.begin(0.030)
    account.end_gap(0.040, samples=None, batches=1)
    row = split(calls.rows[0])
    # the listener takes the data wait as started - boundary: 12 ms, and 18 ms of other time
    assert row["started"] == pytest.approx(0.012) and row["other"] == pytest.approx(0.018)


def test_without_a_loader_the_iterables_timed_share_of_the_gap_is_the_data_wait():
    calls, account = make(at=0.0)
    account.fetch(0.002, batch=False)  # an epoch's iter() that was timed
    account.span("eval", 0.010)
    account.begin(0.030)
    account.end_gap(0.050, samples=4, batches=1, data=0.008)
    row = split(calls.rows[0])
    assert row["started"] is None
    assert row["etl"] == pytest.approx(0.010) and row["other"] == pytest.approx(0.020)
    # the timed share can't exceed the gap less its spans
    account.span("eval", 0.015)
    account.begin(0.070)
    account.end_gap(0.080, samples=4, batches=1, data=0.050)
    row = split(calls.rows[1])
    assert row["etl"] == pytest.approx(0.005) and row["other"] == pytest.approx(0.015)


def test_without_a_loader_or_a_first_sign_only_the_fetches_are_data_wait():
    calls, account = make(at=0.0)
    account.fetch(0.004, batch=False)
    account.step()
    account.step(skipped=True)
    account.end_gap(0.050, samples=None, batches=1)
    row = split(calls.rows[0])
    assert (row["started"], row["etl"], row["other"], row["steps"], row["skipped"]) == (None, 0.004, 0.0, 2, 1)
    account.begin(0.060)
    account.end_gap(0.070, samples=None, batches=1)  # the next one starts where this ended
    assert split(calls.rows[1])["started"] == 0.060 and account.boundary == 0.070


def test_without_a_loader_a_span_after_the_first_sign_moves_out_of_the_step_never_more_than_it_had():
    calls, account = make(at=0.0)
    account.begin(0.010)
    account.span("checkpoint", 0.004, within=True)
    account.end_gap(0.030, samples=None, batches=1)
    row = split(calls.rows[0])
    assert row["started"] == pytest.approx(0.010) and row["other"] == pytest.approx(0.004)
    assert calls.times == [("checkpoint", 0.004)]
    account.begin(0.040)
    account.span("checkpoint", 0.050, within=True)  # longer than the 20 ms the step had
    account.end_gap(0.060, samples=None, batches=1)
    assert split(calls.rows[1])["other"] == pytest.approx(0.020)


def test_without_a_loader_or_a_first_sign_a_span_inside_comes_out_of_the_whole_iteration():
    calls, account = make(at=0.0)
    account.span("checkpoint", 0.004, within=True)
    account.end_gap(0.030, samples=None, batches=1)
    row = split(calls.rows[0])
    assert (row["started"], row["etl"]) == (None, 0.0) and row["other"] == pytest.approx(0.004)
    account.span("checkpoint", 0.5, within=True)
    account.end_gap(0.060, samples=None, batches=1)
    assert split(calls.rows[1])["other"] == pytest.approx(0.030)
    account.restart(1.0)
    account.span("checkpoint", 0.1, within=True)
    account.end_gap(0.5, samples=None, batches=1)  # a reading before the boundary: no room at all
    assert split(calls.rows[2])["other"] == 0.0


def test_without_a_loader_later_micro_batches_timed_in_the_iterable_add_to_the_gaps_data_wait():
    calls, account = make(at=0.0)
    account.span("eval", 0.010)
    account.begin(0.030)  # 20 ms of gap left, 8 of them in the iterable
    account.fetch(0.006, batch=False)  # the iterable between micro-batches, inside the step
    account.fetch(0.007, batch=False)
    account.end_gap(0.080, samples=12, batches=3, data=0.008)
    row = split(calls.rows[0])
    assert row["started"] is None and row["batches"] == 3
    assert row["etl"] == pytest.approx(0.021) and row["other"] == pytest.approx(0.022)
    # only the gap's own share is capped by the gap: 50 ms timed in a 20 ms gap, and 6 ms inside
    account.begin(0.100)
    account.fetch(0.006, batch=False)
    account.end_gap(0.120, samples=None, batches=2, data=0.050)
    row = split(calls.rows[1])
    assert row["etl"] == pytest.approx(0.026) and row["other"] == pytest.approx(0.0)


def test_without_a_loader_spans_longer_than_the_gap_leave_no_data_wait():
    calls, account = make(at=0.0)
    account.span("eval", 0.050)
    account.begin(0.030)
    account.end_gap(0.040, samples=None, batches=1, data=0.010)
    row = split(calls.rows[0])
    assert row["etl"] == 0.0 and row["other"] == pytest.approx(0.030)


def test_without_a_loader_a_first_sign_before_the_boundary_is_an_empty_gap():
    calls, account = make(at=1.0)
    account.begin(0.9)
    account.end_gap(1.1, samples=None, batches=1, data=0.010)
    row = split(calls.rows[0])
    assert (row["etl"], row["other"]) == (0.0, 0.0)
