"""A listener's options as one frozen value: defaults, normalised numbers, the record options."""

from __future__ import annotations

import dataclasses

import pytest

from trainperf import PerformanceListener
from trainperf.core._options import ListenerOptions
from trainperf.records._verdict import Thresholds


def test_defaults_and_normalised_numbers():
    options = ListenerOptions(input_bound_share=25, cluster_timeout_s=5)
    assert options.thresholds == Thresholds(25.0, 10.0, 20.0)
    assert isinstance(options.input_bound_share, float) and options.cluster_timeout_s == 5.0
    assert (options.frequency, options.history, options.sink_thread, options.cluster_every) == (1, 1000, True, 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.frequency = 2  # type: ignore[misc]


def test_the_listener_keeps_its_options_and_records_follow_them():
    listener = PerformanceListener(3, sinks=[], report_score=True, verdict=False, gc_bound_share=5.0)
    assert listener.options == ListenerOptions(3, report_score=True, verdict=False, gc_bound_share=5.0)
    assert listener.options.thresholds == Thresholds(20.0, 5.0, 20.0)
    listener.close()


def test_options_are_read_from_one_place_not_mirrored_on_the_listener():
    listener = PerformanceListener(3, sinks=[], report_gc=True)
    mirrors = ["report_score", "report_gc", "report_etl", "report_iteration", "report_time", "report_sample",
               "report_batch", "thresholds", "strict", "report_hardware", "cluster_every", "cluster_timeout_s"]
    assert [name for name in mirrors if hasattr(listener, name)] == []
    assert listener.options.report_gc is True and listener.frequency == 3
    listener.close()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"frequency": 0}, "frequency must be a positive int, got 0"),
    ({"cluster_timeout_s": 0}, r"cluster_timeout_s must be seconds in \(0, 3600\], got 0"),
    ({"cluster_timeout_s": 3601}, r"cluster_timeout_s must be seconds in \(0, 3600\], got 3601"),
    ({"loop_bound_share": 100.5}, r"loop_bound_share must be a percentage in \(0, 100\], got 100.5"),
    ({"rank": True}, "rank must be a non-negative int or None, got True"),
])
def test_a_wrong_option_names_itself(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ListenerOptions(**kwargs)
    assert ListenerOptions(cluster_timeout_s=3600).cluster_timeout_s == 3600.0
    assert ListenerOptions(loop_bound_share=100).loop_bound_share == 100.0


def test_report_score_is_true_false_or_none_and_records_a_given_score_unless_false():
    assert ListenerOptions().report_score is None
    for value in (True, False, None):
        assert ListenerOptions(report_score=value).report_score is value
    with pytest.raises(TypeError, match="report_score must be a bool or None, got 1"):
        ListenerOptions(report_score=1)  # type: ignore[arg-type]
