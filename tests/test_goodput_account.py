"""The goodput account's pure math, figure by figure: one attempt's parts from its windows, the step
histogram's median, a ledger entry read back (and refused when it is not one), the rows of a rank and
of a job, and the account in words."""

from __future__ import annotations

import json
import math

import pytest

from trainperf.records import (
    GOODPUT_ROWS,
    AttemptAccount,
    GoodputAccount,
    StepHistogram,
    account_job,
    account_rank,
    live_goodput,
)
from trainperf.records._goodput import _ms
from trainperf.records._goodput_rows import duration_words as _duration


def window(account: AttemptAccount, iteration: int, n: int = 10, *, compute: float = 10.0, other: float = 0.0,
           etl: float = 0.0, gc: float | None = None, overhead: float = 0.0, warmup: bool = False,
           stamp: float | None = None, window_s: float | None = None, **extra: float) -> None:
    """A window of ``n`` iterations of ``compute`` ms each (means per iteration, as records hold them)."""
    if window_s is None:
        window_s = n * (compute + other) / 1000.0 + etl / 1000.0 + (gc or 0.0) / 1000.0
    account.add_window(iteration, n, window_s, warmup, stamp, etl_total_ms=etl, gc_total_ms=gc, compute_ms=compute,
                       other_ms=other, overhead_ms=overhead, extra=extra or None)


@pytest.mark.parametrize("value, seconds", [
    (1500.0, 1.5), (2, 0.002), (1, 0.001), (0, 0.0), (-3, 0.0), (0.0, 0.0), (-3.0, 0.0), (math.nan, 0.0),
    (math.inf, 0.0), (None, 0.0),
    (True, 0.0), ("12", 0.0), (-math.inf, 0.0), (10**400, 0.0),
])
def test_a_millisecond_figure_is_seconds_and_anything_else_nothing(value, seconds):
    assert _ms(value) == pytest.approx(seconds)


def test_a_window_s_parts_add_up_to_its_wall_time():
    a = AttemptAccount(0.0)
    window(a, 10, compute=20.0, other=5.0, etl=30.0, gc=4.0, overhead=2.0, eval_ms=3.0, checkpoint_ms=1.0,
           checkpoint_load_ms=0.5, wait_ms=6.0)
    assert a.eval == pytest.approx(0.030) and a.checkpoint_save == pytest.approx(0.010)
    assert a.checkpoint_load == pytest.approx(0.005)
    assert a.other_host == pytest.approx(0.050 - 0.045)  # the spans come out of the host time that holds them
    assert a.collective_wait == pytest.approx(0.060) and a.data_wait == pytest.approx(0.030)
    assert a.gc == pytest.approx(0.004) and a.trainperf == pytest.approx(0.002)
    assert a.steady_step_s == pytest.approx(0.200 - 0.060)
    assert a.window_wall_s == pytest.approx(0.250 + 0.030 + 0.004 + 0.002)
    assert sum(a.parts.values()) + a.steady_step_s == pytest.approx(a.window_wall_s)


def test_spans_the_host_time_does_not_hold_come_out_of_the_step_and_never_below_zero():
    a = AttemptAccount(0.0)
    window(a, 10, compute=20.0, other=1.0, eval_ms=5.0)  # a plain loop that gave no other time for its eval
    assert a.other_host == 0.0 and a.eval == pytest.approx(0.050)
    assert a.steady_step_s == pytest.approx(0.200 - 0.040)
    b = AttemptAccount(0.0)
    window(b, 10, compute=2.0, checkpoint_ms=50.0)
    assert b.steady_step_s == 0.0 and b.steady.median() == 0.0


def test_the_collective_wait_is_never_more_than_the_compute_that_holds_it():
    a = AttemptAccount(0.0)
    window(a, 10, compute=5.0, wait_ms=8.0)
    assert a.collective_wait == pytest.approx(0.050) and a.steady_step_s == 0.0


def test_warm_up_and_steady_windows_are_kept_apart_and_the_last_ones_move_forward_only():
    a = AttemptAccount(0.0)
    window(a, 10, compute=50.0, warmup=True, stamp=5.0)
    window(a, 20, compute=10.0, stamp=6.0)
    window(a, 15, n=5, compute=12.0, stamp=math.nan)  # out of order and with no time: neither moves back
    assert (a.last_iteration, a.last_seen) == (20, 6.0)
    window(a, 30, compute=11.0, stamp=None)
    assert (a.warmup_iterations, a.steady_iterations, a.iterations, a.windows) == (10, 25, 35, 4)
    assert a.warmup_step_s == pytest.approx(0.5) and a.steady_step_s == pytest.approx(0.1 + 0.06 + 0.11)
    assert (a.last_iteration, a.last_seen) == (30, 6.0)
    assert a.last_step == pytest.approx(0.011)
    assert a.warmup.total == 1 and a.steady.total == 3


def test_a_window_with_no_valid_wall_time_adds_only_its_overhead():
    a = AttemptAccount(0.0)
    window(a, 10, window_s=math.inf, overhead=3.0)
    window(a, 20, window_s=-1.0)
    assert a.window_wall_s == pytest.approx(0.003)


def test_the_histogram_follows_the_median_as_windows_come_and_merges_exactly():
    h = StepHistogram()
    assert h.median() is None
    seen: list[float] = []
    for value in (0.010, 0.0, 0.020, 0.5, 0.011, 0.0099, 0.0, 1e-6, 0.010):
        h.add(value)
        seen.append(value)
        middle = sorted(seen)[(len(seen) + 1) // 2 - 1]
        assert h.median() == (0.0 if middle == 0.0 else pytest.approx(middle, rel=1e-3))
    again = StepHistogram(h.counts)
    assert again.median() == h.median() and again.total == h.total == 9
    assert StepHistogram({5: 0, 7: -1}).total == 0 and StepHistogram({5: 0}).median() is None
    low, high = StepHistogram(), StepHistogram()
    for _ in range(3):
        low.add(0.001)
    for _ in range(4):
        high.add(0.1)
    low.merge(high)
    assert low.median() == pytest.approx(0.1, rel=1e-3) and low.total == 7


def test_an_even_count_s_median_is_the_lower_middle_window():
    h = StepHistogram()
    for value in (0.04, 0.01, 0.03, 0.02):
        h.add(value)
    assert h.median() == pytest.approx(0.02, rel=1e-3)


def entry(**changes: object) -> dict[str, object]:
    a = AttemptAccount(100.0, started=103.0, start_iteration=7, pid=42)
    window(a, 17, eval_ms=1.0)
    a.add_startup({"checkpoint_load": 0.5})
    a.add_tail({"checkpoint": 0.25, "nothing": 0.0, "bad": math.nan})
    a.close(200.0)
    data = json.loads(json.dumps(a.to_dict()))
    data.update(changes)
    return data


def test_a_ledger_entry_round_trips_and_keeps_what_the_rows_need():
    data = entry()
    a = AttemptAccount.from_dict(data)
    assert a.to_dict() == data
    assert a.startup_parts == {"checkpoint_load": 0.5} and a.tail_parts == {"checkpoint": 0.25}
    assert (a.ended, a.last_seen, a.start_iteration, a.pid, a.reached) == (200.0, 200.0, 7, 42, 17)
    assert a.copy().to_dict() == data
    assert AttemptAccount.from_dict(entry(started=None, last_iteration=None, ended=None)).reached == 7


@pytest.mark.parametrize("field, value", [
    ("process_start", None), ("process_start", "1"), ("process_start", True), ("process_start", math.inf),
    ("started", "x"), ("pid", -1), ("pid", 1.5), ("pid", True), ("start_iteration", 2**62), ("windows", "3"),
    ("last_iteration", -2), ("warmup_step_s", None), ("steady_iterations", None),
    ("parts", []), ("parts", {"gc": -1.0}), ("parts", {"gc": True}), ("parts", {"gc": 1e9}),
    ("startup_parts", {"x": "1"}), ("steady", []), ("steady", {"x": 1}), ("steady", {"3": 0}),
    ("steady", {"3": True}), ("steady", {"3": -2}), ("warmup", {"3": 2**62}), ("window_wall_s", math.nan),
    ("parts", {"gc": 1e10}), ("process_start", -1.0), ("process_start", 1e11), ("ended", 1e300),
    ("steady_step_s", 1e12), ("last_seen", -5.0),
])
def test_a_ledger_entry_of_the_wrong_kind_is_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        AttemptAccount.from_dict(entry(**{field: value}))


def test_seconds_maps_take_zero_and_a_histogram_of_a_million_bins_is_no_ledger_s():
    assert AttemptAccount.from_dict(entry(parts={"gc": 0})).gc == 0.0
    with pytest.raises(ValueError, match="steady"):
        AttemptAccount.from_dict(entry(steady={str(k): 1 for k in range(1_000_001)}))


def attempt(start: float, first_seen: float, begin: int, end: int, *, last_seen: float, step_ms: float = 10.0,
            pid: int = 1, ended: bool = True) -> AttemptAccount:
    a = AttemptAccount(start, started=first_seen, start_iteration=begin, pid=pid)
    t = first_seen
    for i in range(begin + 10, end + 1, 10):
        t += 10 * step_ms / 1000.0
        window(a, i, compute=step_ms, stamp=t, warmup=i == begin + 10)
    if ended:
        a.close(last_seen)
    else:
        a.last_seen = last_seen
    return a


def test_three_attempts_lose_the_progress_of_each_restart_and_their_gaps_add_up():
    first = attempt(0.0, 2.0, 0, 250, last_seen=4.5, ended=False)
    second = attempt(10.0, 12.0, 200, 230, last_seen=12.3, pid=2, ended=False)
    third = attempt(20.0, 22.0, 200, 500, last_seen=25.0, pid=3)
    account = account_rank([third, first, second], rank=3)
    assert account.lost_iterations == 50 + 30 and account.net_progress == 500
    assert account.rows["restart_gaps"] == pytest.approx((10.0 - 4.5) + (20.0 - 12.3))
    assert account.rows["startup"] == pytest.approx(3 * 2.0)
    assert account.rows["productive"] == pytest.approx(500 * account.ideal_step_s)
    assert account.rows["lost_progress"] == pytest.approx(80 * account.ideal_step_s)
    assert sum(account.rows.values()) == pytest.approx(account.wall_s) == pytest.approx(25.0)
    assert [a.clean for a in account.attempts] == [False, False, True]
    assert (account.first_iteration, account.last_iteration, account.rank) == (0, 500, 3)
    assert account.goodput == pytest.approx(account.rows["productive"] / 25.0)


def test_a_restart_that_resumes_past_where_the_last_one_stopped_loses_nothing():
    account = account_rank([attempt(0.0, 1.0, 0, 100, last_seen=2.0), attempt(5.0, 6.0, 100, 200, last_seen=7.0,
                                                                             pid=2)])
    assert account.lost_iterations == 0 and account.net_progress == 200 and account.rows["lost_progress"] == 0.0


def test_another_process_that_starts_within_a_second_of_the_first_is_a_restart_not_the_same_process():
    quick = attempt(0.0, 0.1, 0, 10, last_seen=0.6, ended=False)
    for pid, start in ((2, 0.8), (0, 0.8), (1, 1.0)):  # other pids; or the same (a container's) a second later
        again = attempt(start, start + 0.1, 0, 10, last_seen=start + 0.5, pid=pid)
        account = account_rank([quick, again])
        assert account.rows["restart_gaps"] == pytest.approx(start - 0.6), pid
        assert account.rows["startup"] == pytest.approx(0.2), pid


def test_an_attempt_that_starts_before_the_last_one_ended_makes_no_negative_gap():
    account = account_rank([attempt(0.0, 1.0, 0, 100, last_seen=5.0), attempt(4.0, 6.0, 100, 200, last_seen=7.0,
                                                                             pid=2)])
    assert account.rows["restart_gaps"] == 0.0


def test_the_ideal_step_is_the_median_of_steady_windows_else_the_warm_up_s_and_can_be_given():
    a = attempt(0.0, 1.0, 0, 100, last_seen=3.0, step_ms=10.0)
    assert account_rank([a]).ideal_step_s == pytest.approx(0.010, rel=1e-3)
    given = account_rank([a], ideal=0.008)
    assert given.ideal_step_s == 0.008 and given.rows["productive"] == pytest.approx(0.8)
    assert given.rows["slowdown"] == pytest.approx(0.9 - 0.8 * 0.9 / 1.0 * 1.0 - 0.0, abs=0.1)
    assert sum(given.rows.values()) == pytest.approx(given.wall_s)
    only_warmup = attempt(0.0, 1.0, 0, 10, last_seen=2.0, step_ms=30.0)
    assert account_rank([only_warmup]).ideal_step_s == pytest.approx(0.030, rel=1e-3)
    assert account_rank([only_warmup]).rows["warmup"] == 0.0


def test_the_warm_up_s_excess_over_the_ideal_is_its_own_row_and_a_fast_warm_up_adds_none():
    a = AttemptAccount(0.0, started=1.0)
    window(a, 10, compute=50.0, warmup=True, stamp=1.5)
    for i in range(20, 60, 10):
        window(a, i, compute=10.0, stamp=1.5 + (i - 10) / 100)
    account = account_rank([a])
    assert account.rows["warmup"] == pytest.approx(0.4, rel=1e-3)
    assert abs(account.rows["slowdown"]) < 1e-3
    fast = AttemptAccount(0.0, started=1.0)
    window(fast, 10, compute=5.0, warmup=True, stamp=1.05)
    window(fast, 20, compute=10.0, stamp=1.15)
    rows = account_rank([fast]).rows
    assert rows["warmup"] == 0.0 and rows["slowdown"] == pytest.approx(-0.05, rel=1e-2)


def test_an_attempt_with_no_window_has_no_goodput_but_its_time_is_counted():
    a = AttemptAccount(0.0, started=2.0)
    a.add_startup({"checkpoint_load": 0.5, "eval": 0.25, "warm": 0.1})
    a.close(3.0)
    account = account_rank([a])
    assert account.goodput is None and account.ideal_step_s is None
    assert account.rows["startup"] == pytest.approx(2.0 - 0.85) and account.rows["checkpoint_load"] == 0.5
    assert account.rows["eval"] == 0.25 and account.rows["other_host"] == pytest.approx(0.1 + 1.0)
    assert account.wall_s == pytest.approx(3.0)
    assert "not known" in account.lines()[0]


def test_a_start_up_shorter_than_its_spans_counts_the_spans_and_no_start_up():
    a = AttemptAccount(0.0, started=0.5)
    a.add_startup({"checkpoint_load": 0.8})
    a.close(1.0)
    account = account_rank([a])
    assert account.rows["startup"] == 0.0 and account.rows["checkpoint_load"] == 0.8
    assert sum(account.rows.values()) == pytest.approx(account.wall_s)


def test_the_job_is_its_slowest_rank_against_every_rank_s_ideal_step():
    fast = attempt(0.0, 1.0, 0, 100, last_seen=3.0, step_ms=10.0)
    slow = attempt(0.0, 1.0, 0, 100, last_seen=5.0, step_ms=20.0)
    same = attempt(0.0, 1.0, 0, 100, last_seen=5.0, step_ms=10.0)
    twin = attempt(0.0, 1.0, 0, 100, last_seen=5.0, step_ms=10.0)
    assert account_job({4: [twin], 2: [same]}).rank == 2  # a tie: the lower rank
    job = account_job({0: [fast], 4: [slow], 2: [same]})
    assert job.rank in (2, 4) and job.wall_s == max(job.ranks[2].wall_s, job.ranks[4].wall_s)
    assert set(job.ranks) == {0, 2, 4} and job.ranks[4].ideal_step_s == pytest.approx(0.020, rel=1e-3)
    assert job.ideal_step_s == pytest.approx(0.010, rel=1e-3)
    assert job.wall_s == pytest.approx(5.0) and sum(job.rows.values()) == pytest.approx(5.0)
    data = job.to_dict()
    assert set(data["ranks"]) == {"0", "2", "4"} and data["rank"] == 2
    assert "slowest of 3" in "\n".join(job.lines())
    assert account_job({1: [fast], 2: []}).ranks.keys() == {1}


def test_the_account_in_words_and_in_json():
    account = account_rank([attempt(0.0, 2.0, 0, 250, last_seen=4.5, ended=False),
                            attempt(10.0, 12.0, 200, 300, last_seen=14.0, pid=2)], rank=1, notes=["a note"])
    lines = account.lines()
    assert lines[0].startswith("goodput of rank 1: ") and "2 attempts" in lines[0] and "300 iterations" in lines[0]
    assert lines[1].split()[-1] == "progress)" and "productive" in lines[1]
    assert any("lost progress (50 iterations trained again)" in line for line in lines)
    assert lines[-1] == "  note: a note"
    shares = [float(line.split("%")[0]) for line in lines[1:-1]]
    assert shares[1:] == sorted(shares[1:], reverse=True)
    data = account.to_dict()
    assert [r["row"] for r in data["rows"]] == [key for key, _ in GOODPUT_ROWS]
    assert sum(r["seconds"] for r in data["rows"]) == pytest.approx(data["wall_s"])
    assert sum(r["share"] for r in data["rows"]) == pytest.approx(1.0)
    assert data["notes"] == ["a note"] and "ranks" not in data
    assert json.loads(json.dumps(data)) == data
    assert account_rank([attempt(0.0, 1.0, 0, 50, last_seen=2.0)]).lines()[0].startswith("goodput of this run")


def test_a_row_s_share_of_no_time_is_zero_and_an_account_is_frozen():
    rows = dict.fromkeys((k for k, _ in GOODPUT_ROWS), 0.0)
    empty = GoodputAccount(0.0, rows, None, None, 0, 0, 0, 0, ())
    assert empty.share("productive") == 0.0
    tiny = GoodputAccount(0.5, dict(rows, productive=0.25, startup=0.25), 0.5, 0.01, 25, 0, 0, 25, ())
    assert tiny.share("productive") == 0.5
    with pytest.raises(AttributeError):
        tiny.wall_s = 1.0  # type: ignore[misc]


def test_rows_below_half_a_permille_of_the_wall_time_are_left_out_of_the_words_but_not_of_the_json():
    rows = dict.fromkeys((k for k, _ in GOODPUT_ROWS), 0.0)
    rows.update(productive=50.0, startup=49.9, gc=0.06, eval=0.04)
    account = GoodputAccount(100.0, rows, 0.5, 0.01, 5000, 0, 0, 5000, ())
    lines = account.lines()
    assert lines[1] == "   50.0%        50.00 s  productive steps (ideal step x net progress)"
    assert lines[2] == "   49.9%        49.90 s  start-up (process start to training)"
    assert any("garbage collection" in line for line in lines) and not any("evaluation" in line for line in lines)
    assert {r["row"]: r["seconds"] for r in account.to_dict()["rows"]}["eval"] == 0.04


@pytest.mark.parametrize("seconds, text", [(0.0, "0.00 s"), (1.234, "1.23 s"), (59.994, "59.99 s"),
                                           (60.0, "1 min 00.0 s"), (61.0, "1 min 01.0 s"),
                                           (125.5, "2 min 05.5 s"),
                                           (3599.0, "59 min 59.0 s"), (3600.0, "1 h 00 min"),
                                           (7322.0, "2 h 02 min"), (-0.5, "-0.50 s")])
def test_durations_are_said_in_the_unit_that_reads(seconds, text):
    assert _duration(seconds) == text


def test_the_live_goodput_is_none_until_a_steady_window_and_on_no_time():
    steps = StepHistogram()
    assert live_goodput(steps, 0.0, 0, 10, 5.0) is None
    steps.add(0.01)
    assert live_goodput(steps, 0.0, 0, 100, 2.0) == pytest.approx(0.5, rel=1e-3)
    assert live_goodput(steps, 0.0, 100, 50, 2.0) == 0.0  # behind where the job started: no progress
    assert live_goodput(steps, 5.0, 0, 100, 5.0) is None and live_goodput(steps, 5.0, 0, 100, math.nan) is None
    assert live_goodput(steps, 5.0, 0, 100, 4.0) is None  # a clock that went back
    assert live_goodput(steps, 0.0, 10, 100, 2.0) == pytest.approx(0.45, rel=1e-3)


def test_a_last_attempt_that_stops_short_of_an_earlier_one_leaves_the_progress_where_it_stopped():
    account = account_rank([attempt(0.0, 1.0, 0, 250, last_seen=4.0, ended=False),
                            attempt(9.0, 10.0, 200, 220, last_seen=11.0, pid=2)])
    assert (account.net_progress, account.lost_iterations, account.last_iteration) == (220, 50, 220)
    assert sum(account.rows.values()) == pytest.approx(account.wall_s)


def test_the_headline_says_the_goodput_the_wall_time_the_ideal_step_and_the_progress():
    account = account_rank([attempt(0.0, 1.0, 0, 100, last_seen=3.0, step_ms=10.0)])
    assert account.lines()[0] == (f"goodput of this run: {100 * account.goodput:.1f}% of 3.00 s trained the model "
                                  f"(ideal step {1000 * account.ideal_step_s:.4g} ms x 100 iterations of net progress)")
    assert account.lines()[0].startswith("goodput of this run: 33.3% of 3.00 s") and "9.997 ms" in account.lines()[0]
    single = account_job({5: [attempt(0.0, 1.0, 0, 100, last_seen=3.0)]})
    assert not any("slowest" in line for line in single.lines()) and single.rank == 5


def test_a_resumed_rank_s_last_iteration_and_a_rank_that_made_no_progress():
    resumed = account_rank([attempt(0.0, 0.1, 200, 300, last_seen=0.5, step_ms=4.0)])  # windows end at 0.5 s
    assert (resumed.first_iteration, resumed.last_iteration, resumed.net_progress) == (200, 300, 100)
    assert resumed.wall_s == pytest.approx(0.5)
    assert resumed.goodput is not None and resumed.goodput == pytest.approx(resumed.rows["productive"] / 0.5)
    idle = AttemptAccount(0.0, started=1.0, start_iteration=40)
    idle.close(2.0)
    account = account_rank([idle])
    assert (account.net_progress, account.lost_iterations, account.last_iteration) == (0, 0, 40)
