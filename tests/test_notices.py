"""What the listener says: each message once, a bottleneck once per kind with its fixes, the most
specific fixes first."""

from __future__ import annotations

import warnings

import pytest

from trainperf import BottleneckWarning, Verdict
from trainperf.core._notices import Notices
from trainperf.records._advice import CUDA_FIXES, DEFAULT_FIXES


def level() -> int:
    return 1


def said(notices: Notices) -> list[tuple[type[Warning], str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        notices.say(level)
    return [(w.category, str(w.message)) for w in caught]


def test_a_message_is_said_once_per_run_and_only_when_said():
    notices = Notices()
    notices.once("no batch size")
    notices.once("no batch size")
    notices.once("a collector failed")
    assert said(notices) == [(RuntimeWarning, "trainperf: no batch size"),
                             (RuntimeWarning, "trainperf: a collector failed")]
    notices.once("no batch size")
    assert said(notices) == []


def test_a_bottleneck_is_warned_once_per_kind_with_its_fixes():
    notices = Notices()
    notices.bottleneck(Verdict("gc-bound", 30.0, "30% of step in garbage collection"))
    notices.bottleneck(Verdict("gc-bound", 40.0, "40% of step in garbage collection"))
    out = said(notices)
    assert len(out) == 1 and out[0][0] is BottleneckWarning
    fixes = "\n".join(f"  - {fix}" for fix in DEFAULT_FIXES["gc-bound"])
    assert out[0][1] == f"trainperf: training is gc-bound (30% of step in garbage collection). Likely fixes:\n{fixes}"
    notices.bottleneck(Verdict("gc-bound", 40.0, "again"))
    assert said(notices) == []


def test_fixes_come_from_the_advisors_first_then_the_general_ones_once_each():
    notices = Notices()
    notices.advisors.append(lambda kind: ["set pin_memory=True", DEFAULT_FIXES["input-bound"][0]])

    def broken(kind):
        raise RuntimeError("advisor bug")

    notices.advisors.append(broken)
    fixes = notices.fixes_for("input-bound")
    assert fixes[:2] == ["set pin_memory=True", DEFAULT_FIXES["input-bound"][0]]
    assert fixes[2:] == list(DEFAULT_FIXES["input-bound"][1:])


def test_cuda_fixes_only_on_cuda_and_worker_tips_from_the_workers_cpu():
    notices = Notices()
    host = notices.fixes_for("input-bound")
    notices.on_cuda = True
    assert notices.fixes_for("input-bound") == host + [f for f in CUDA_FIXES.get("input-bound", ()) if f not in host]
    notices.workers_cpu_pct = 400.0
    busy = notices.fixes_for("input-bound")
    assert busy[0].startswith("the loader's workers use 400% CPU each")
    assert busy[1:] == host + [f for f in CUDA_FIXES.get("input-bound", ()) if f not in host]
    for kind in ("gc-bound", "loop-bound", "host-bound", "cpu-contention"):  # worker tips are for waiting on data
        assert not any("loader's workers use" in fix for fix in notices.fixes_for(kind)), kind


def test_an_advisor_that_fails_leaves_the_advisors_after_it_heard():
    notices = Notices()

    def broken(kind):
        raise RuntimeError("advisor bug")

    notices.advisors.append(broken)
    notices.advisors.append(lambda kind: [f"fix {kind} here"])
    assert notices.fixes_for("gc-bound")[0] == "fix gc-bound here"


def test_a_kind_warned_before_does_not_silence_the_kinds_after_it():
    notices = Notices()
    notices.bottleneck(Verdict("gc-bound", 30.0, "gc"))
    said(notices)
    notices.bottleneck(Verdict("gc-bound", 30.0, "gc again"))
    notices.bottleneck(Verdict("input-bound", 40.0, "data"))
    out = said(notices)
    assert len(out) == 1 and out[0][1].startswith("trainperf: training is input-bound (data)")


@pytest.mark.parametrize("kind", ["input-bound", "gc-bound", "loop-bound", "host-bound", "cpu-contention"])
def test_every_bad_kind_has_fixes(kind):
    assert Notices().fixes_for(kind)
