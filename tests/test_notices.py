"""What the listener says: each message once, a bottleneck once per kind with its fixes, the most
specific fixes first."""

from __future__ import annotations

import warnings

import pytest

from trainperf import BottleneckWarning, Verdict
from trainperf._advice import CUDA_FIXES, DEFAULT_FIXES
from trainperf._notices import Notices


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
    assert len(notices.fixes_for("input-bound")) >= len(host)


@pytest.mark.parametrize("kind", ["input-bound", "gc-bound", "loop-bound", "host-bound", "cpu-contention"])
def test_every_bad_kind_has_fixes(kind):
    assert Notices().fixes_for(kind)
