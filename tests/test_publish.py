"""Publishing a closed window, with plain numbers: the record reaches the history, the totals and the
sinks, and a bad verdict that persists is noted once for the warnings."""

from __future__ import annotations

import pytest

from test_build import host
from trainperf.core._emit import Emitter
from trainperf.core._notices import Notices
from trainperf.core._options import ListenerOptions
from trainperf.core._publish import Publisher
from trainperf.records._verdict import PERSIST_WINDOWS
from trainperf.sinks._memory import MemorySink


def publisher(**options) -> tuple[Publisher, list, Notices]:
    got: list = []
    notices = Notices()
    emitter = Emitter([got.append], inline=True)
    made = Publisher(ListenerOptions(**options), MemorySink(None), emitter, notices, host_name="node", pid=7)
    return made, got, notices


def test_a_published_record_is_in_the_history_and_every_sink_and_counts_in_the_totals():
    p, got, _ = publisher()
    warm = p.publish(host(warmup=True, first_iteration=1, iteration=4), None)
    record = p.publish(host(), None)
    assert list(p.history) == [warm, record] and got == [warm, record]
    assert (record.host, record.pid, record.iteration) == ("node", 7, 8)
    totals = p.totals
    assert (totals.iterations, totals.samples) == (4, 32)  # the warm-up left out
    assert totals.wall_s == pytest.approx(0.040) and totals.etl_s == pytest.approx(0.008)
    summary = p.summary(8, lambda kind: [f"fix {kind}"])
    assert summary.iterations == 4 and summary.etl_pct == pytest.approx(20.0)


def test_a_bad_verdict_is_noted_once_it_persists_and_never_from_the_warm_up():
    p, _, notices = publisher()
    p.publish(host(warmup=True, etl_source="given"), None)
    for k in range(PERSIST_WINDOWS):
        assert not notices._bottlenecks, k
        p.publish(host(), None)  # input-bound: 20% data wait
    assert [v.kind for v in notices._bottlenecks] == ["input-bound"]


def test_a_window_without_samples_is_said_once_when_samples_are_reported():
    p, _, notices = publisher()
    entries = [(0.010 * k, 0.0, None, None, 1, 0.0, 1, 0) for k in (1, 2)]
    from trainperf.records._window import window_figures

    unknown = host(figures=window_figures(0.0, entries))
    p.publish(unknown, None)
    p.publish(unknown, None)
    assert notices._queued == ["could not find the batch size; samples/sec is left out for this run"]
    quiet, _, said = publisher(report_sample=False)
    quiet.publish(unknown, None)
    assert said._queued == []


def window(etl_s: float, **kw):
    from trainperf.records._window import window_figures

    entries = [(0.010 * k, etl_s, None, 8, 1, 0.0, 1, 0) for k in (1, 2, 3, 4)]
    return host(figures=window_figures(0.0, entries), **kw)


def test_the_warm_up_sets_no_precedent_for_the_next_windows_verdict():
    """18% data wait is below the 20% line but above its hysteresis (16%): it stays input-bound only
    after an input-bound window that was not the warm-up."""
    p, _, _ = publisher()
    p.publish(window(0.002, warmup=True), None)
    assert p.publish(window(0.0018), None).verdict.kind == "fine"
    p.publish(window(0.002), None)
    assert p.publish(window(0.0018), None).verdict.kind == "input-bound"


def test_a_persisting_cpu_contention_is_noted_and_a_fine_run_never():
    from trainperf.records._verdict import CpuLoad

    busy = CpuLoad(100.0, 100.0, 2)  # the process and its workers fill both cores
    p, _, notices = publisher()
    for _ in range(PERSIST_WINDOWS):
        assert p.publish(window(0.0, hardware={}), None, busy).verdict.kind == "cpu-contention"
    assert [v.kind for v in notices._bottlenecks] == ["cpu-contention"]
    fine, _, quiet = publisher()
    for _ in range(2 * PERSIST_WINDOWS):
        assert fine.publish(window(0.0, hardware={}), None).verdict.kind == "fine"
    assert quiet._bottlenecks == []


def test_the_workers_cpu_use_read_with_a_window_reaches_the_notices():
    p, _, notices = publisher()
    p.publish(window(0.0, hardware={"cpu_pct": 90.0, "workers_cpu_pct": 400.0}), None)
    assert notices.workers_cpu_pct == 400.0
    p.publish(window(0.0, hardware={}), None)  # a window without a reading keeps the last one
    assert notices.workers_cpu_pct == 400.0
