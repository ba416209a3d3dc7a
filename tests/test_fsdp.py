"""FSDP: found at set-up (FSDP2's ``fully_shard``, FSDP1's wrapper, Lightning's ``FSDPStrategy``), its
collectives and forward pass left untimed and said once (a warning, the run directory's meta data)."""

from __future__ import annotations

import json
import sys
import types
import warnings

import pytest

torch = pytest.importorskip("torch")

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


def test_the_trainers_fsdp_model_is_untimed_and_named(fake_fsdp):
    pytest.importorskip("transformers")
    from trainperf.transformers._trainer import collective_model

    model = torch.nn.Linear(4, 1)
    assert collective_model(types.SimpleNamespace(model_wrapped=FakeFSDP(model)), model) == (model, None, FSDP1)
    assert collective_model(types.SimpleNamespace(model_wrapped=model), model) == (None, None, None)
    sharded = Sharded(4, 1)
    assert collective_model(types.SimpleNamespace(model_wrapped=sharded), sharded) == (sharded, None, FSDP2)
