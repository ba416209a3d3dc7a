"""Publishing a closed window, with plain numbers: the record reaches the history, the totals and the
sinks, and a bad verdict that persists is noted once for the warnings."""

from __future__ import annotations

import pytest

from test_build import host
from trainperf._emit import Emitter
from trainperf._notices import Notices
from trainperf._options import ListenerOptions
from trainperf._publish import Publisher
from trainperf._verdict import PERSIST_WINDOWS
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
    from trainperf._window import window_figures

    unknown = host(figures=window_figures(0.0, entries))
    p.publish(unknown, None)
    p.publish(unknown, None)
    assert notices._queued == ["could not find the batch size; samples/sec is left out for this run"]
    quiet, _, said = publisher(report_sample=False)
    quiet.publish(unknown, None)
    assert said._queued == []
