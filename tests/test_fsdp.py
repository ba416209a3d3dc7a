"""FSDP: found at set-up (FSDP2's ``fully_shard``, FSDP1's wrapper, Lightning's ``FSDPStrategy``), its
collectives and forward pass left untimed and said once (a warning, the run directory's meta data);
then, on real forked gloo ranks, a slow rank named from what precedes the collectives and a slow
forward pass naming no innocent rank. See ``tests/_faults_fsdp.py``."""

from __future__ import annotations

import json
import sys
import types
import warnings

import pytest

from _needs import integration

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from trainperf import PerformanceListener  # noqa: E402
from trainperf.torch._fsdp import FSDP1, FSDP2, find_fsdp  # noqa: E402
from trainperf.torch._setup import time_collectives  # noqa: E402


class FakeFSDPModule:
    """Stands for FSDP2's ``FSDPModule``, the class ``fully_shard`` mixes into a module's."""


class FakeFSDP(torch.nn.Module):
    """Stands for FSDP1's ``FullyShardedDataParallel``: a wrapper whose ``module`` is the model."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self._fsdp_wrapped_module = module

    @property
    def module(self) -> torch.nn.Module:
        return self._fsdp_wrapped_module

    def forward(self, x):
        return self._fsdp_wrapped_module(x)


class Sharded(FakeFSDPModule, torch.nn.Linear):
    pass


class Asks(torch.nn.Module):
    """A model that asks, from inside its forward, whether FSDP wraps it (as the attachment does at the
    first training forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.found: list[str | None] = []

    def forward(self, x):
        self.found.append(find_fsdp(self))
        return self.layer(x)


@pytest.fixture
def fake_fsdp(monkeypatch):
    module = types.ModuleType("torch.distributed.fsdp")
    module.FSDPModule = FakeFSDPModule
    module.FullyShardedDataParallel = FakeFSDP
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp", module)
    return module


def test_fsdp2_and_fsdp1_are_found_on_the_model_a_submodule_or_a_wrapper_running_it(fake_fsdp):
    plain = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    assert find_fsdp(plain) is None
    assert find_fsdp(Sharded(4, 1)) == FSDP2
    assert find_fsdp(torch.nn.Sequential(torch.nn.ReLU(), Sharded(4, 1))) == FSDP2
    assert find_fsdp(FakeFSDP(plain)) == FSDP1
    assert find_fsdp(torch.nn.Sequential(FakeFSDP(plain))) == FSDP1
    assert find_fsdp(None, FakeFSDP(plain)) == FSDP1  # a framework's wrapper given beside the model
    inner = Asks()
    FakeFSDP(inner)(torch.randn(2, 4))  # the model's forward, running inside the wrapper's
    inner(torch.randn(2, 4))  # the same model on its own
    assert inner.found == [FSDP1, None]


def test_nothing_is_sharded_when_fsdp_was_never_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch.distributed.fsdp", raising=False)
    assert find_fsdp(Sharded(4, 1), FakeFSDP(torch.nn.Linear(4, 1))) is None


def test_under_fsdp_nothing_is_timed_and_it_is_said_once_in_a_warning_and_the_meta_data(fake_fsdp, tmp_path, clock):
    listener = PerformanceListener(2, sinks=[], verdict=False, clock=clock, rank=0, run_dir=tmp_path / "run",
                                   report_hardware=False)
    model = torch.nn.Sequential(Sharded(4, 4), torch.nn.Linear(4, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        timer = time_collectives(listener, model)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "sharded with FSDP2: fully_shard" in said[0]
    assert "stragglers are named only from what precedes the collectives" in said[0]
    assert timer.untimed == FSDP2 and timer.ddp is None
    meta = json.loads((tmp_path / "run" / "rank-0" / "meta.json").read_text())
    assert meta["collectives_untimed"] == FSDP2
    for _ in range(4):  # training forwards, with autograd on: none is timed
        clock.advance(0.01)
        model(torch.randn(2, 4)).sum().backward()
        listener.record_iteration(samples=2)
    listener.close()
    assert [r.extra.get("forward_ms") for r in listener.history] == [None, None]
    meta = json.loads((tmp_path / "run" / "rank-0" / "meta.json").read_text())
    assert meta["collectives_untimed"] == FSDP2 and meta["ended"] is not None  # kept at close


def test_a_given_fsdp_needs_no_search_and_a_plain_model_keeps_its_forward_timed(tmp_path, clock, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch.distributed.fsdp", raising=False)
    listener = PerformanceListener(2, sinks=[], verdict=False, clock=clock, report_hardware=False)
    with pytest.warns(RuntimeWarning, match="Lightning's FSDPStrategy"):
        timer = time_collectives(listener, torch.nn.Linear(4, 1), None, "FSDP: Lightning's FSDPStrategy")
    assert timer.untimed == "FSDP: Lightning's FSDPStrategy"
    model = torch.nn.Linear(4, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = time_collectives(listener, model)
    assert plain.untimed is None
    for _ in range(2):
        clock.advance(0.01)
        model(torch.randn(2, 4)).sum().backward()
        listener.record_iteration(samples=2)
    listener.close()
    assert [r.extra.get("forward_ms") for r in listener.history] == [0.0]  # timed (on a clock that stood still)


def test_lightnings_fsdp_strategy_is_found_from_the_strategy_object_of_either_package():
    """Lightning 2.6.6 runs FSDPStrategy on CUDA only (its accelerator check refuses the CPU, and past
    it FSDP1 gets no device on a CPU-only machine), so the strategy object stands for a run."""
    from trainperf.lightning._trainer import ddp_of, fsdp_of

    for package in ("pytorch_lightning", "lightning.pytorch"):
        strategies = pytest.importorskip(f"{package}.strategies")

        class Mine(strategies.FSDPStrategy):
            pass

        for strategy in (strategies.FSDPStrategy(), Mine()):
            trainer = types.SimpleNamespace(strategy=strategy)
            assert fsdp_of(trainer, torch.nn.Linear(4, 1)) == "FSDP: Lightning's FSDPStrategy"
            assert ddp_of(trainer) is None
        assert fsdp_of(types.SimpleNamespace(strategy=strategies.DDPStrategy()), torch.nn.Linear(4, 1)) is None


def test_a_lightning_module_sharded_in_configure_model_is_found(fake_fsdp):
    from trainperf.lightning._trainer import fsdp_of

    trainer = types.SimpleNamespace(strategy=types.SimpleNamespace(model=None))
    assert fsdp_of(trainer, torch.nn.Sequential(Sharded(4, 1))) == FSDP2
    assert fsdp_of(trainer, torch.nn.Linear(4, 1)) is None


@pytest.mark.integration
def test_the_trainers_fsdp_model_is_untimed_and_named(fake_fsdp):
    integration("transformers")
    from trainperf.transformers._trainer import collective_model

    model = torch.nn.Linear(4, 1)
    assert collective_model(types.SimpleNamespace(model_wrapped=FakeFSDP(model)), model) == (model, None, FSDP1)
    assert collective_model(types.SimpleNamespace(model_wrapped=model), model) == (None, None, None)
    sharded = Sharded(4, 1)
    assert collective_model(types.SimpleNamespace(model_wrapped=sharded), sharded) == (sharded, None, FSDP2)


# -- real ranks ----------------------------------------------------------------------------------

def _check_real_ranks(wrap: str, tmp_path) -> None:
    from _faults import Plan, judge, run, share
    from _faults_fsdp import WHY, innocent, scenarios
    from trainperf import build_report
    from trainperf.ranks._report._notes import read_notes

    plan = Plan(3, scenarios(wrap), windows=8)
    assert run(plan, tmp_path) == [0] * plan.world
    named = [s for s in plan.scenarios if s.fault in ("data", "host", "gc", "none")]
    outcomes = [judge(tmp_path / s.name, s, plan) for s in named]
    for o in outcomes:
        s = o.scenario
        if s.fault == "none":
            assert o.report == [], s.name
            continue
        assert o.acting == plan.windows, s.name
        # every window on a machine that may be busy: allow one in ten to go astray, never a wrong report
        assert o.right >= 0.9 * o.acting, (s.name, o.wrong)
        assert o.report[:1] == [(s.slow_rank, s.expected)], (s.name, o.report)
    right, false_alarms, healthy = share(outcomes)
    assert right >= 0.95
    assert healthy == plan.windows and false_alarms == 0
    forward = next(s for s in plan.scenarios if s.fault == "forward")
    acting, wrong, words = innocent(tmp_path / forward.name, forward, plan)
    assert acting == plan.windows and wrong == 0, words
    assert all(rank == forward.slow_rank for rank, _ in judge(tmp_path / forward.name, forward, plan).report)
    for s in plan.scenarios:  # said in every rank's meta data, nothing of the step timed
        for rank in range(plan.world):
            folder = tmp_path / s.name / f"rank-{rank}"
            assert json.loads((folder / "meta.json").read_text())["collectives_untimed"] == WHY[wrap]
            for line in (folder / "windows.jsonl").read_text().splitlines():
                extra = json.loads(line)["extra"]
                assert "forward_ms" not in extra and "wait_ms" not in extra, (s.name, rank, extra)
    report = build_report(tmp_path / named[0].name)
    assert report["collectives_untimed"] == [{"why": WHY[wrap], "ranks": [0, 1, 2]}]
    assert read_notes(report)[0].startswith(f"collectives not timed ({WHY[wrap]}) on ranks 0-2: stragglers are "
                                            "named only from what precedes the collectives")


@pytest.mark.parametrize("wrap", ["fsdp2", "fsdp1"])
@pytest.mark.realtime
@pytest.mark.integration
@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_three_fsdp_ranks_name_a_slow_data_host_or_gc_rank_and_no_innocent_one(wrap, tmp_path):
    """FSDP2 (``fully_shard`` per layer, then the model) and FSDP1 (``FullyShardedDataParallel``) run on
    the CPU with gloo in torch 2.13 (FSDP1 given the CPU as its device)."""
    _check_real_ranks(wrap, tmp_path)
