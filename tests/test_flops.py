"""The step FLOP counter with a fake CUDA device name (no GPU needed): the second step counted, the
table's peak for a known device, one note and no MFU for an unknown one, given FLOPs never counted."""

from __future__ import annotations

import warnings

import pytest
import torch

from conftest import FakeClock
from trainperf import MemorySink, PerformanceListener
from trainperf.torch._flops import COUNTED_STEP, StepFlopCounter, device_format

CUDA = torch.device("cuda", 0)  # only named: nothing runs on it


def run(counter: StepFlopCounter, listener: PerformanceListener, clock: FakeClock, steps: int = 4) -> None:
    model = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16, requires_grad=True)
    for _ in range(steps):
        counter.begin()
        model(x).sum().backward()
        counter.end()
        clock.advance(0.010)
        listener.record_iteration(samples=4)


def listener(clock: FakeClock, **kw) -> tuple[PerformanceListener, MemorySink]:
    memory = MemorySink()
    return PerformanceListener(2, sinks=[memory], clock=clock, report_hardware=False, sink_thread=False,
                               **kw), memory


def test_a_known_device_gets_the_tables_peak_and_the_second_step_is_counted(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    clock = FakeClock()
    lst, memory = listener(clock)
    counter = StepFlopCounter(lst, CUDA, "bf16")
    run(counter, lst, clock)
    assert counter.done
    flops = 3 * 2 * 4 * 16 * 16  # forward, and the backward's two products
    assert [r.flops_per_step for r in memory.records] == [flops, flops]
    r = memory.records[-1]
    assert r.peak == "H100 SXM bf16 dense, 989.4 TFLOP/s (table)"
    assert r.mfu == pytest.approx(flops / 0.010 / 989.4e12)
    assert r.tflops_per_sec == pytest.approx(flops / 0.010 / 1e12)
    assert COUNTED_STEP == 2


def test_an_unknown_device_gives_no_mfu_and_one_note(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    clock = FakeClock()
    lst, memory = listener(clock)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(StepFlopCounter(lst, CUDA, "bf16"), lst, clock, steps=8)
    notes = [str(w.message) for w in caught if "peak" in str(w.message)]
    assert notes == ["trainperf: no dense peak is known for 'Some Future GPU' in bf16: MFU is left out "
                     "(pass peak_flops= to give one)"]
    assert all(r.mfu is None and r.peak is None and r.flops_per_step for r in memory.records)


def test_given_flops_are_not_counted_and_a_given_peak_wins_over_the_table(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    import torch.utils.flop_counter as flop_counter

    monkeypatch.setattr(flop_counter, "FlopCounterMode", lambda *a, **k: pytest.fail("counted"))
    clock = FakeClock()
    lst, memory = listener(clock, flops_per_step=1e12, peak_flops=2e14)
    counter = StepFlopCounter(lst, CUDA, "bf16")
    assert counter.done
    run(counter, lst, clock)
    assert all(r.flops_per_step == 1e12 and r.peak == "200.0 TFLOP/s (given)" for r in memory.records)
    assert memory.records[-1].mfu == pytest.approx(1e12 / 0.010 / 2e14)


def test_on_the_cpu_flops_are_counted_and_the_missing_peak_is_said_once_as_a_log_line(monkeypatch, caplog):
    """No warning: a CPU has no MFU, which no one acts on (and ``-W error`` would make it fail a run)."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: pytest.fail("looked up"))
    clock = FakeClock()
    lst, memory = listener(clock)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("INFO", logger="trainperf"):
        warnings.simplefilter("always")
        run(StepFlopCounter(lst, torch.device("cpu"), "fp32"), lst, clock, steps=8)
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in caplog.records if "MFU" in r.getMessage()] == [
        "trainperf: no dense peak is known for 'cpu' in fp32: MFU is left out (pass peak_flops= to give one)"]
    assert all(r.flops_per_step and r.mfu is None for r in memory.records)


def test_the_number_format_of_float32_on_cuda_follows_torchs_matmul_precision():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert device_format(torch.float32, CUDA) == "tf32"
        assert device_format(torch.float32, torch.device("cpu")) == "fp32"
        torch.set_float32_matmul_precision("highest")
        assert device_format(torch.float32, CUDA) == "fp32"
        assert device_format(torch.bfloat16, CUDA) == "bf16"
    finally:
        torch.set_float32_matmul_precision(before)


def test_a_step_being_counted_when_training_stops_leaves_the_counter():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    clock = FakeClock()
    lst, _ = listener(clock)
    counter = StepFlopCounter(lst, None, None)
    counter.begin()
    counter.begin()  # the counted step begins ...
    assert _get_current_dispatch_mode_stack() != []
    counter.abandon()  # ... and training stops inside it
    assert _get_current_dispatch_mode_stack() == []


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointings_re_run_is_left_out_of_the_models_flops_and_said_once(reentrant):
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self, checkpointed: bool) -> None:
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
            self.head = torch.nn.Linear(32, 1)
            self.checkpointed = checkpointed

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = checkpoint(self.inner, x, use_reentrant=reentrant) if self.checkpointed else self.inner(x)
            return self.head(h).sum()

    def counted(checkpointed: bool) -> tuple[list, list[str]]:
        torch.manual_seed(0)
        model = Block(checkpointed)
        clock = FakeClock()
        lst, memory = listener(clock)
        counter = StepFlopCounter(lst, torch.device("cpu"), "fp32")
        x = torch.randn(8, 32, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(4):
                counter.begin()
                model(x).backward()
                counter.end()
                clock.advance(0.01)
                lst.record_iteration(samples=8)
        said = [str(w.message) for w in caught if "checkpoint" in str(w.message)]
        return [r.flops_per_step for r in memory.records], said

    plain, plain_notes = counted(False)
    again, notes = counted(True)
    assert again == plain and plain_notes == []  # the model's FLOPs: the re-run left out
    # run again in the backward: the block's two products; without reentry, torch stops the re-run once
    # the tensors the backward needs are back, before the second product
    forward = 2 * 8 * 32 * 64 * (2 if reentrant else 1)
    assert len(notes) == 1 and f"re-runs {forward:.4g} FLOPs per step" in notes[0]
    assert f"hardware FLOPs {plain[0] + forward:.4g}" in notes[0]


def test_the_second_step_is_the_one_counted_and_the_counters_hooks_go_when_it_ends():
    from torch.nn.modules import module as nn_module

    clock = FakeClock()
    lst, memory = listener(clock)
    counter = StepFlopCounter(lst, torch.device("cpu"), "fp32")
    model = torch.nn.Linear(16, 16)
    hooks_before = (len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks))
    for rows in (2, 8, 4, 4):  # the first step differs from the second, the second from the rest
        counter.begin()
        model(torch.randn(rows, 16)).sum().backward()
        counter.end()
        clock.advance(0.01)
        lst.record_iteration(samples=rows)
    assert [r.flops_per_step for r in memory.records] == [2 * 2 * 8 * 16 * 16] * 2  # forward and weight grad
    assert (len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)) == hooks_before


def test_known_flops_say_nothing_of_checkpointing_and_devices_off_the_table_are_not_looked_up(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: pytest.fail("looked up"))
    clock = FakeClock()
    lst, memory = listener(clock)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the CPU's missing peak is a log line
        StepFlopCounter(lst, torch.device("cpu"), "fp32", known=4e9)
        for device, fmt in ((torch.device("xpu"), "bf16"), (None, "bf16"), (torch.device("meta"), None)):
            other, _ = listener(FakeClock())
            StepFlopCounter(other, device, fmt, known=1e9)
        for _ in range(2):
            clock.advance(0.01)
            lst.record_iteration(samples=1)
    assert memory.records[-1].flops_per_step == 4e9 and memory.records[-1].mfu is None


def test_only_float32_on_cuda_turns_into_tf32():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert device_format(torch.float64, CUDA) == "fp64"
        assert device_format(torch.float16, CUDA) == "fp16"
        assert device_format(torch.float32, torch.device("xpu")) == "fp32"
        torch.set_float32_matmul_precision("medium")
        assert device_format(torch.float32, CUDA) == "tf32"
    finally:
        torch.set_float32_matmul_precision(before)


def test_a_re_run_counts_the_products_a_module_makes_itself_after_its_children():
    from torch.utils.checkpoint import checkpoint

    class Mixed(torch.nn.Module):  # a child's product, then one of its own
        def __init__(self) -> None:
            super().__init__()
            self.child = torch.nn.Linear(16, 16)
            self.weight = torch.nn.Parameter(torch.randn(16, 16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.child(x)) @ self.weight

    def flops(checkpointed: bool) -> float:
        torch.manual_seed(0)
        mixed, head = Mixed(), torch.nn.Linear(16, 1)
        clock = FakeClock()
        lst, memory = listener(clock)
        counter = StepFlopCounter(lst, torch.device("cpu"), "fp32")
        x = torch.randn(4, 16, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):
                counter.begin()
                h = checkpoint(mixed, x, use_reentrant=True) if checkpointed else mixed(x)
                head(h).sum().backward()
                counter.end()
                clock.advance(0.01)
                lst.record_iteration(samples=4)
        return memory.records[-1].flops_per_step

    assert flops(True) == flops(False)


def test_a_frameworks_step_format_is_its_mixed_precision_else_its_parameters():
    from trainperf.torch._flops import step_format

    model = torch.nn.Linear(2, 2)
    assert step_format("bf16", model, CUDA) == "bf16"
    assert step_format(None, model, torch.device("cpu")) == "fp32"
    assert step_format(None, model.half(), CUDA) == "fp16"
    assert step_format("bf16", model, None) is None  # no device: nothing to price
    assert step_format(None, object(), CUDA) is None and step_format(None, torch.nn.ReLU(), CUDA) is None
