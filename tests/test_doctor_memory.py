"""The doctor's memory split of one training step, and the fixes it offers with their savings."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

import trainperf
from trainperf.cli import _main as _cli
from trainperf.diagnosis import Block, DoctorReport, Environment, MemorySplit, StepMemory, memory_fixes
from trainperf.diagnosis._memory_fixes import MIN_SAVING_SHARE, factored_state_bytes, split_from_snapshots

MB = 1e6


def mlp(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10)).to(dtype)


def batches(size, dtype=torch.float32, count=3):
    return [(torch.randn(size, 256, dtype=dtype), torch.randint(0, 10, (size,))) for _ in range(count)]


def parameter_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def split(**kw):
    figures = dict(device="cpu", parameters=100, buffers=0, gradients=100, optimizer_state=200, inputs=10,
                   activations=400, temporaries=0, peak=1000, batch_size=8, optimizer="Adam")
    figures.update(kw)
    return MemorySplit(**figures)


def by_id(fixes):
    return {f.id: f for f in fixes}


def quick_doctor(**kw):
    return trainperf.doctor(environment=Environment(), watch_seconds=0.01, steps=1, **kw)


# the arithmetic, with plain numbers

def test_split_takes_the_parts_from_the_snapshots_and_the_rest_of_the_peak_as_temporaries():
    before = {"PARAM": 100, "OPT": 200, "OTH": 10, "ACT": 5}
    after_forward = {**before, "ACT": 128}
    after = {"PARAM": 100, "GRAD": 100, "OPT": 200, "OTH": 10, "ACT": 5}
    # the peak during the optimizer's step: 50 bytes of its scratch on top of its state
    peak = {"PARAM": 100, "GRAD": 100, "OPT": 250, "OTH": 10, "ACT": 3, "TEMP": 7, "Total": 470}
    got = split_from_snapshots(before=before, after_forward=after_forward, after=after, peak=peak, device="cpu",
                               optimizer="Adam", batch_size=4)
    assert (got.parameters, got.gradients, got.optimizer_state, got.inputs) == (100, 100, 200, 10)
    assert got.activations == 123  # what the forward added, not what was there before it
    assert got.temporaries == 57 and got.peak == 470
    assert got.optimizer == "Adam" and got.batch_size == 4


def test_split_counts_activations_and_gradients_held_at_the_peak_once():
    # a peak in the backward: a part of the activations is freed, a part of the gradients is made
    peak = {"PARAM": 100, "GRAD": 40, "ACT": 300, "TEMP": 20, "BUFFER": 5, "OTH": 10, "Total": 475}
    got = split_from_snapshots(before={"OTH": 10}, after_forward={"ACT": 400}, after={"GRAD": 100, "BUFFER": 5},
                               peak=peak, device="cuda:0")
    assert got.temporaries == 20 and got.buffers == 5 and got.device == "cuda:0"
    # more of a part at the peak than the step keeps is scratch too
    more = {"PARAM": 100, "GRAD": 130, "ACT": 0, "OTH": 10, "Total": 240}
    assert split_from_snapshots(before={}, after_forward={}, after={"GRAD": 100}, peak=more,
                                device="cpu").temporaries == 30


def test_split_parts_are_never_negative():
    # a forward that frees more than it keeps; a peak snapshot whose total is below its parts
    got = split_from_snapshots(before={"ACT": 50}, after_forward={"ACT": 20}, after={},
                               peak={"PARAM": 10, "Total": 5}, device="cpu")
    assert got.activations == 0 and got.temporaries == 0


def test_without_an_optimizer_its_state_is_not_counted():
    got = split_from_snapshots(before={}, after_forward={}, after={"OPT": 64}, peak={}, device="cpu")
    assert got.optimizer_state is None and got.optimizer is None
    assert not [f for f in memory_fixes(got) if f.id.startswith("optimizer")]


def test_factored_state_keeps_a_row_and_a_column_per_matrix():
    assert factored_state_bytes([(512, 256)], 4) == (512 + 256) * 4
    assert factored_state_bytes([(512,)], 2) == 512 * 2
    assert factored_state_bytes([(2, 3, 4)], 1) == 6 + 8  # a stack of 2 matrices of 3 x 4
    assert factored_state_bytes([(), (0, 5)], 4) == 4 + 0
    assert factored_state_bytes([(10, 20), (20,)], 4) == (30 + 20) * 4
    assert isinstance(factored_state_bytes([(4, 6)], 4), int)
    assert factored_state_bytes([(3, 5)], 1) == 5 + 3
    assert factored_state_bytes([(2, 3, 0), (3, 0), (2, 0, 4)], 4) == 0  # no element, no division by a size of 0


def test_checkpointing_saves_what_blocks_keep_inside_less_the_largest_recomputed():
    blocks = (Block("0", 300, 100), Block("1", 250, 50), Block("2", 120, 100))
    fix = by_id(memory_fixes(split(activations=700, blocks=blocks)))["checkpointing"]
    assert fix.saving == (200 + 200 + 20) - 300
    assert "3 top-level blocks (0, 1, 2)" in fix.change
    many = tuple(Block(str(i), 400, 10) for i in range(6))
    fix = by_id(memory_fixes(split(activations=700, blocks=many)))["checkpointing"]
    assert fix.saving == 700  # never more than the activations there are
    assert "(0, 1, 2, 3, ...)" in fix.change
    five = tuple(Block(str(i), 100, 10) for i in range(5))
    assert "5 top-level blocks (0, 1, 2, 3, ...)" in by_id(memory_fixes(split(blocks=five)))["checkpointing"].change
    four = tuple(Block(str(i), 100, 10) for i in range(4))
    assert by_id(memory_fixes(split(blocks=four)))["checkpointing"].change.endswith("4 top-level blocks (0, 1, 2, 3)")
    two = (Block("a", 300, 50), Block("b", 200, 20))
    assert by_id(memory_fixes(split(blocks=two)))["checkpointing"].saving == 250 + 180 - 300
    # a block whose output is larger than what it added (its input freed in it) keeps nothing inside
    shrunk = (Block("a", 300, 50), Block("b", 10, 60), Block("c", 200, 100))
    assert by_id(memory_fixes(split(blocks=shrunk)))["checkpointing"].saving == 250 + 0 + 100 - 300


def test_no_checkpointing_for_one_block_or_blocks_that_keep_only_their_outputs():
    assert "checkpointing" not in by_id(memory_fixes(split(blocks=(Block("0", 400, 10),))))
    layers = tuple(Block(str(i), 100, 100) for i in range(4))  # Linear, ReLU, ...: each keeps its output
    assert "checkpointing" not in by_id(memory_fixes(split(blocks=layers)))


def test_half_the_batch_saves_half_the_activations_and_the_batch():
    fix = by_id(memory_fixes(split(activations=400, inputs=17, batch_size=8)))["smaller_batch"]
    assert fix.saving == (400 + 17) // 2 and "batch size 4 instead of 8" in fix.change
    assert "smaller_batch" in by_id(memory_fixes(split(batch_size=2)))
    assert "smaller_batch" not in by_id(memory_fixes(split(batch_size=1)))
    assert "smaller_batch" not in by_id(memory_fixes(split(batch_size=None)))


def test_mixed_precision_halves_activations_less_the_bf16_weight_copy():
    fix = by_id(memory_fixes(split(activations=400, parameters=101, device="cuda:0")))["mixed_precision"]
    assert fix.saving == 200 - 50 and type(fix.saving) is int and "torch.autocast('cuda'" in fix.change
    assert "torch.autocast('cpu'" in by_id(memory_fixes(split()))["mixed_precision"].change
    read = "".join(["torch.", "float32"])  # as str(dtype) gives it: an equal string, not the same object
    assert "mixed_precision" in by_id(memory_fixes(split(parameter_dtype=read)))
    for dtype in ("torch.bfloat16", "torch.float16", "torch.float64"):
        assert "mixed_precision" not in by_id(memory_fixes(split(parameter_dtype=dtype)))
    # weights larger than the activations: autocast's copy costs more than it saves
    assert "mixed_precision" not in by_id(memory_fixes(split(activations=100, parameters=300, peak=1000)))


def test_an_optimizer_with_less_state_saves_the_state_there_is_less_its_own():
    fixes = by_id(memory_fixes(split(parameters=100, optimizer_state=200, factored_state=8, peak=1000)))
    assert fixes["optimizer_sgd"].saving == 200
    assert fixes["optimizer_adafactor"].saving == 192
    assert fixes["optimizer_sgd_momentum"].saving == 100
    assert "instead of 2.0 values per parameter (Adam)" in fixes["optimizer_sgd"].change
    momentum = by_id(memory_fixes(split(parameters=100, optimizer_state=100, optimizer="SGD", peak=1000)))
    assert "optimizer_sgd" in momentum and "optimizer_sgd_momentum" not in momentum
    assert "optimizer_adafactor" not in momentum  # not offered without the shapes it needs
    plain = by_id(memory_fixes(split(parameters=100, optimizer_state=0, optimizer="SGD", factored_state=8)))
    assert not [f for f in plain if f.startswith("optimizer")]
    assert not [f for f in by_id(memory_fixes(split(parameters=0, optimizer_state=50))) if f.startswith("optim")]
    assert by_id(memory_fixes(split(parameters=1, optimizer_state=2000)))["optimizer_sgd"].saving == 2000
    assert "instead of 1.5 values per parameter" in by_id(memory_fixes(split(optimizer_state=150)))[
        "optimizer_sgd"].change
    tiny = split(parameters=1, optimizer_state=1, optimizer="SGD", activations=0, inputs=0, peak=10, batch_size=None)
    assert [f.saving for f in memory_fixes(tiny)] == [1]  # one byte is still a saving


def test_a_fix_must_save_its_share_of_the_peak_and_the_largest_comes_first():
    # smaller batch saves (400 + 10) // 2 = 205; at a peak of 205 / share it is just offered
    at = int(205 / MIN_SAVING_SHARE)
    assert "smaller_batch" in by_id(memory_fixes(split(optimizer_state=None, peak=at)))
    assert "smaller_batch" not in by_id(memory_fixes(split(optimizer_state=None, peak=at + 20)))
    assert "smaller_batch" in by_id(memory_fixes(split(optimizer_state=None, peak=4100)))  # 205 is 5% of 4100
    assert "smaller_batch" not in by_id(memory_fixes(split(optimizer_state=None, peak=4101)))
    nothing = split(parameters=0, gradients=0, optimizer_state=0, inputs=0, activations=0, peak=0, blocks=(
        Block("a", 0, 0), Block("b", 0, 0)))
    assert memory_fixes(nothing) == ()  # a saving of nothing is no fix, even at a peak of nothing
    fixes = memory_fixes(split(parameters=100, optimizer_state=200, peak=1000))
    assert [f.saving for f in fixes] == sorted((f.saving for f in fixes), reverse=True)
    assert [f.id for f in fixes] == ["smaller_batch", "optimizer_sgd", "mixed_precision", "optimizer_sgd_momentum"]


def test_report_prints_and_serialises_the_split_and_its_fixes():
    memory = StepMemory(split(peak=1_000_000), memory_fixes(split(peak=1000)), notes=("a note",))
    report = DoctorReport((), memory)
    text = str(report)
    assert "memory of one training step on cpu (batch 8, Adam):" in text
    assert "optimizer state       0.00 MB" in text and "a note" in text
    assert "saves about 0.00 MB: batch size 4 instead of 8" in text
    data = json.loads(report.to_json())["memory"]
    assert data["activations_mb"] == 0.0004 and data["peak_mb"] == 1.0 and data["device"] == "cpu"
    assert data["fixes"][0] == {"id": "smaller_batch", "change": memory.fixes[0].change, "saving_mb": 0.000205,
                                "estimate": memory.fixes[0].estimate}
    assert json.loads(DoctorReport((), StepMemory(split(optimizer_state=None))).to_json())["memory"][
        "optimizer_state_mb"] is None
    assert "optimizer state   not counted" in str(DoctorReport((), StepMemory(split(optimizer_state=None))))
    assert "no fix would save 5% of the peak or more" in str(DoctorReport((), StepMemory(split())))
    assert "memory" not in DoctorReport(()).to_dict() and "memory of" not in str(DoctorReport(()))
    for value in (memory, memory.split, memory.fixes[0], Block("a", 1, 1)):  # a report's sections are values
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.id = "changed"


# measured, on the CPU

def test_measured_split_of_a_known_mlp_with_adam_matches_the_hand_count():
    model, size = mlp(), 64
    report = quick_doctor(model=model, loader=batches(size), optimizer=torch.optim.Adam(model.parameters()),
                          loss_fn=torch.nn.functional.cross_entropy)
    got = report.memory.split
    params = (256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10) * 4
    assert got.parameters == pytest.approx(params, rel=0.05)
    assert got.gradients == pytest.approx(params, rel=0.05)
    assert got.optimizer_state == pytest.approx(2 * params + 6 * 4, rel=0.05)  # exp_avg, exp_avg_sq, 6 steps
    # autograd keeps each ReLU's output (for the ReLU's and the next Linear's backward) and
    # log_softmax's output; the first Linear's input is the batch, counted apart
    assert got.activations == pytest.approx((2 * size * 512 + size * 10) * 4, rel=0.10)
    assert got.inputs == size * 256 * 4 + size * 8
    assert got.peak >= got.parameters + got.gradients + got.optimizer_state
    assert got.device == "cpu" and got.batch_size == size and got.optimizer == "Adam"
    assert {f.id for f in report.memory.fixes} >= {"optimizer_sgd_momentum", "optimizer_sgd"}


def test_measured_with_plain_sgd_no_optimizer_state_and_no_optimizer_fix():
    model = mlp()
    memory = quick_doctor(model=model, loader=batches(64), optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                          loss_fn=torch.nn.functional.cross_entropy).memory
    assert memory.split.optimizer_state < 1000
    assert not [f for f in memory.fixes if f.id.startswith("optimizer")]


def test_measured_bf16_model_gets_no_mixed_precision_fix_a_float32_one_does():
    for dtype, offered in ((torch.float32, True), (torch.bfloat16, False)):
        memory = quick_doctor(model=mlp(dtype), loader=batches(4096, dtype, count=1),
                              loss_fn=torch.nn.functional.cross_entropy).memory
        assert memory.split.parameter_dtype == str(dtype)
        assert ("mixed_precision" in {f.id for f in memory.fixes}) is offered
        assert "smaller_batch" in {f.id for f in memory.fixes}


def test_measured_checkpointing_is_offered_for_blocks_that_keep_memory_inside_and_saves_about_what_it_says():
    from torch.utils.checkpoint import checkpoint

    from trainperf.diagnosis import step_memory

    def block():
        return torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 64))

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[block() for _ in range(6)])
    data = [torch.randn(512, 64)]
    fix = by_id(step_memory(model, data).fixes)["checkpointing"]

    class Checkpointed(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            for b in self.inner:
                x = checkpoint(b, x, use_reentrant=False)
            return x

    plain = step_memory(model, data).split
    checkpointed = step_memory(Checkpointed(model), data).split
    # the forward keeps less by more than the estimate; the peak falls by less (a block is recomputed)
    assert plain.peak - checkpointed.peak < fix.saving < plain.activations - checkpointed.activations


def test_measured_step_leaves_the_users_model_and_optimizer_byte_for_byte_unchanged():
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    x, y = batches(32)[0]
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    params = {k: v.clone() for k, v in model.state_dict().items()}
    state = {i: {k: v.clone() for k, v in s.items()} for i, s in optimizer.state_dict()["state"].items()}
    groups = optimizer.state_dict()["param_groups"]
    report = quick_doctor(model=model, loader=batches(32), optimizer=optimizer,
                          loss_fn=torch.nn.functional.cross_entropy)
    assert report.memory.split.optimizer_state > 0
    assert all(torch.equal(params[k], v) for k, v in model.state_dict().items())
    after = optimizer.state_dict()
    assert after["param_groups"] == groups
    assert all(torch.equal(state[i][k], v) for i, s in after["state"].items() for k, v in s.items())


def test_the_copied_optimizer_keeps_the_param_groups_settings():
    from trainperf.diagnosis._memory_step import fresh_optimizer

    model = mlp()
    optimizer = torch.optim.SGD([{"params": model[0].parameters(), "lr": 0.5, "momentum": 0.9},
                                 {"params": model[2].parameters()}], lr=0.1)
    twin = __import__("copy").deepcopy(model)
    fresh = fresh_optimizer(optimizer, model, twin)
    assert type(fresh) is torch.optim.SGD and not fresh.state
    assert [g["lr"] for g in fresh.param_groups] == [0.5, 0.1] and fresh.param_groups[0]["momentum"] == 0.9
    assert fresh.param_groups[0]["params"][0] is twin[0].weight
    stranger = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    with pytest.raises(ValueError, match="not the model's"):
        fresh_optimizer(stranger, model, twin)


def test_without_a_model_or_loader_the_memory_section_says_why_it_was_skipped():
    assert quick_doctor().memory.skipped == "needs a model and a loader: no model given"
    assert quick_doctor(model=mlp()).memory.skipped == "needs a model and a loader: no loader given"
    assert "memory of one training step: skipped (needs a model and a loader: no loader given)" in str(
        quick_doctor(model=mlp()))


# the command line

FACTORIES = """
import torch

def make_model():
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))

def make_loader():
    return [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(3)]

def not_an_optimizer(params):
    return list(params)

def broken(params):
    raise RuntimeError("no luck")
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "memfactories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "memfactories"
    sys.modules.pop("memfactories", None)


def test_cli_prints_the_split_and_json_carries_it(factories, capsys):
    args = ["doctor", "--model", f"{factories}:make_model", "--loader", f"{factories}:make_loader", "--steps", "1"]
    _cli.main([*args, "--optimizer", "torch.optim:AdamW"])
    out = capsys.readouterr().out
    assert "memory of one training step on cpu (batch 64, AdamW):" in out
    assert "optimizer state" in out and "activations" in out
    _cli.main([*args, "--optimizer", "torch.optim:AdamW", "--json"])
    memory = json.loads(capsys.readouterr().out)["memory"]
    params = (256 * 512 + 512 + 512 * 10 + 10) * 4 / 1e6
    assert memory["parameters_mb"] == pytest.approx(params, rel=0.05)
    assert memory["optimizer_state_mb"] == pytest.approx(2 * params, rel=0.05)
    _cli.main([*args, "--json"])
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["optimizer_state_mb"] is None and "no optimizer given" in memory["notes"][0]


@pytest.mark.parametrize(("spec", "says"), [
    ("nope", "--optimizer must look like package.module:function, got 'nope'"),
    ("torch.optim:NoSuchThing", "--optimizer 'torch.optim:NoSuchThing':"),
    ("{m}:not_an_optimizer", "--optimizer '{m}:not_an_optimizer' must give a torch.optim.Optimizer, got list"),
    ("{m}:broken", "--optimizer '{m}:broken' raised RuntimeError: no luck"),
])
def test_cli_bad_optimizer_specs_say_what_is_wrong(factories, capsys, spec, says):
    spec, says = spec.format(m=factories), says.format(m=factories)
    assert _cli.main(["doctor", "--model", f"{factories}:make_model", "--optimizer", spec]) == 2
    assert says in capsys.readouterr().err


def test_cli_optimizer_needs_a_model(capsys):
    assert _cli.main(["doctor", "--optimizer", "torch.optim:SGD"]) == 2
    assert "--optimizer needs --model" in capsys.readouterr().err


# CUDA

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_measured_split_on_cuda_matches_the_hand_count():
    model = mlp().cuda()
    data = [(x.cuda(), y.cuda()) for x, y in batches(64)]
    memory = quick_doctor(model=model, loader=data, optimizer=torch.optim.Adam(model.parameters()),
                          loss_fn=torch.nn.functional.cross_entropy).memory
    got = memory.split
    params = parameter_bytes(model)
    assert got.device.startswith("cuda")
    assert got.parameters == pytest.approx(params, rel=0.05)
    assert got.optimizer_state == pytest.approx(2 * params, rel=0.05)
    assert got.activations == pytest.approx((2 * 64 * 512 + 64 * 10) * 4, rel=0.10)
