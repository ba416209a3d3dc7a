"""FLOPs that follow the batch's shape in every adapter that counts them: a small GPT-like model with
attention written as plain products, steps alternating sequence lengths 64 and 512, dynamic padding
from 16 to 1024 and gradient accumulation over micro-batches of different lengths. Each window's
FLOPs per step are within 3% of ``FlopCounterMode``'s count (taken here, by hand) for the shapes that
window trained on, and MFU with them; a fixed-shape run counts one step and gives its count exactly;
operators the counter has no formula for are said, not silently counted as zero."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import trainperf.torch._flops as flops_module
from trainperf import MemorySink, PerformanceListener
from trainperf.torch import ListenerModule, attach

VOCAB, WIDTH, LONGEST = 64, 32, 1024
PEAK = 1e11  # a peak given, so that the CPU has an MFU


class TinyGPT(torch.nn.Module):
    """One decoder block, attention as plain products (what FlopCounterMode counts on every device)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.position = torch.nn.Embedding(LONGEST, WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        x = self.embed(input_ids) + self.position(torch.arange(length))
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(WIDTH)
        causal = torch.ones(length, length, dtype=torch.bool).triu(1)
        x = x + self.proj(scores.masked_fill(causal, -1e9).softmax(-1) @ v)
        return self.head(x + self.mlp(x))


def loss_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())


def batch(b: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (b, length), generator=torch.Generator().manual_seed(seed))


_REFERENCE: dict[tuple[tuple[int, int], ...], float] = {}


def reference(step: list[torch.Tensor]) -> float:
    """FlopCounterMode over one whole optimizer step on these micro-batch shapes, done by hand."""
    key = tuple(tuple(ids.shape) for ids in step)
    if key not in _REFERENCE:
        model = TinyGPT()
        opt = torch.optim.AdamW(model.parameters())
        with FlopCounterMode(display=False) as counter:
            for ids in step:
                (loss_of(model, ids) / len(step)).backward()
            opt.step()
        _REFERENCE[key] = float(counter.get_total_flops())
    return _REFERENCE[key]


def check_windows(records: list, steps: list[list[torch.Tensor]], *, peak: float = PEAK) -> list[float]:
    """Each window's FLOPs per step within 3% of the reference's mean over the steps it trained on,
    and its MFU with them; gives each window's relative error."""
    assert records and records[-1].iteration == len(steps)
    errors = []
    for r in records:
        trained = steps[r.first_iteration - 1:r.iteration]
        expected = sum(reference(step) for step in trained) / len(trained)
        assert r.optimizer_steps == len(trained)
        assert r.flops_per_step == pytest.approx(expected, rel=0.03), (r.first_iteration, r.iteration)
        assert r.mfu == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / peak)
        errors.append(r.flops_per_step / expected - 1.0)
    return errors


def train_attached(steps: list[list[torch.Tensor]], *, frequency: int = 4, loader: bool = False,
                   **options) -> list:
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters())
    memory = MemorySink()
    listener = PerformanceListener(frequency, sinks=[memory], report_hardware=False, peak_flops=PEAK, **options)
    attach(model, listener)
    if loader:  # one micro-batch per step, fetched by a DataLoader the adapter sees
        source = torch.utils.data.DataLoader([step[0] for step in steps], batch_size=None)
        for ids in source:
            opt.zero_grad()
            loss_of(model, ids).backward()
            opt.step()
    else:
        for step in steps:
            opt.zero_grad()
            for ids in step:
                (loss_of(model, ids) / len(step)).backward()
            opt.step()
    listener.close()
    return memory.records


def alternating(n: int = 16, b: int = 2) -> list[list[torch.Tensor]]:
    return [[batch(b, 64 if i % 2 == 0 else 512, seed=i)] for i in range(n)]


def padded(n: int = 32, b: int = 2, seed: int = 1) -> list[list[torch.Tensor]]:
    """Dynamic padding: each step padded to its own longest sequence, 16 to 1024."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(16, LONGEST + 1, (n,), generator=g).tolist()
    return [[batch(b, length, seed=i)] for i, length in enumerate(lengths)]


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    """How many steps the adapters count (one entry per counted step)."""
    calls: list[int] = []
    real = flops_module._step_counter

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(flops_module, "_step_counter", counting)
    return calls


@pytest.mark.parametrize("loader", [False, True])
def test_attach_follows_steps_alternating_lengths_64_and_512(loader, counted):
    steps = alternating()
    errors = check_windows(train_attached(steps, loader=loader), steps)
    assert max(abs(e) for e in errors) < 1e-9  # both shapes counted: exact
    assert len(counted) == 2  # one count per shape


def test_attach_follows_dynamic_padding_from_16_to_1024_counting_a_few_steps(counted):
    steps = padded()
    check_windows(train_attached(steps), steps)
    assert 4 <= len(counted) <= flops_module.ShapeFlops().max_counts


def test_attach_follows_gradient_accumulation_over_micro_batches_of_different_lengths():
    lengths = [(64, 512), (128, 32), (512, 512), (16, 256, 1000), (64, 512), (300, 40)] * 2
    steps = [[batch(2, length, seed=10 * i + j) for j, length in enumerate(step)] for i, step in enumerate(lengths)]
    check_windows(train_attached(steps, frequency=3), steps)


def test_attach_follows_accumulation_whose_first_micro_batch_never_changes(counted):
    """Only the later micro-batches vary: the steps are counted by their whole shape, not the first's."""
    lengths = [(256, a, b) for a, b in [(32, 768), (128, 32), (768, 128), (32, 32), (768, 768), (128, 768)] * 3]
    steps = [[batch(2, length, seed=10 * i + j) for j, length in enumerate(step)] for i, step in enumerate(lengths)]
    check_windows(train_attached(steps, frequency=6), steps)
    assert 4 <= len(counted) <= flops_module.ShapeFlops().max_counts


def test_a_fixed_shape_run_counts_one_step_and_gives_its_count_exactly(counted):
    steps = [[batch(2, 128, seed=i)] for i in range(12)]
    records = train_attached(steps)
    assert len(counted) == 1
    assert [r.flops_per_step for r in records] == [reference(steps[0])] * 3


def test_given_flops_per_step_win_over_the_shape(counted):
    records = train_attached(alternating(8), flops_per_step=2e9)
    assert not counted and all(r.flops_per_step == 2e9 for r in records)


def test_listener_module_fit_follows_the_shape(counted):
    class Model(ListenerModule, TinyGPT):
        pass

    steps = alternating(12)
    model = Model()
    memory = MemorySink()
    model.set_listeners(PerformanceListener(4, sinks=[memory], report_hardware=False, peak_flops=PEAK))
    loader = [(step[0], step[0]) for step in steps]
    model.fit(loader, torch.optim.AdamW(model.parameters()),
              lambda logits, ids: torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten()))
    model.listeners[0].close()
    check_windows(memory.records, steps)
    assert len(counted) == 2


def test_lightning_follows_the_shape_with_and_without_accumulation(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    from trainperf.lightning import PerformanceCallback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.gpt = TinyGPT()

        def training_step(self, ids, batch_idx):  # type: ignore[no-untyped-def]
            return loss_of(self.gpt, ids)

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.AdamW(self.parameters())

    data = [batch(2, length, seed=i) for i, length in enumerate([64, 512, 128, 64, 512, 256] * 2)]
    for accumulate in (1, 2):
        memory = MemorySink()
        callback = PerformanceCallback(3, sinks=[memory], report_hardware=False, peak_flops=PEAK)
        trainer = pl.Trainer(max_epochs=1, callbacks=[callback], logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False, accelerator="cpu",
                             accumulate_grad_batches=accumulate, default_root_dir=tmp_path)
        trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=None))
        steps = [data[k:k + accumulate] for k in range(0, len(data), accumulate)]
        check_windows(memory.records, steps)


def operator_notes(model: torch.nn.Module, make) -> list[str]:  # type: ignore[no-untyped-def]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    listener = PerformanceListener(2, sinks=[], report_hardware=False)
    attach(model, listener)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(4):
            opt.zero_grad()
            model(make(i)).sum().backward()
            opt.step()
        listener.close()
    return [str(w.message) for w in caught if "FLOP count" in str(w.message)]


def test_an_attention_kernel_the_counter_has_no_formula_for_is_said_once():
    class Sdpa(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(16, 48)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    probe: list[str] = []

    class Names(FlopCounterMode):
        def _count_flops(self, packet, out, args, kwargs):  # type: ignore[no-untyped-def]
            probe.append(str(packet))
            return super()._count_flops(packet, out, args, kwargs)

    with Names(display=False):
        Sdpa()(torch.randn(2, 8, 16)).sum().backward()
    kernels = [name for name in probe if "attention" in name]
    if not kernels or any(name in {str(p) for p in FlopCounterMode().flop_registry} for name in kernels):
        pytest.skip("this device's attention kernel has a FLOP formula")
    notes = operator_notes(Sdpa(), lambda i: torch.randn(2, 8 * (1 + i % 2), 16))
    assert len(notes) == 1
    assert notes[0].startswith("trainperf: the FLOP count misses ")
    assert f"1 call of {kernels[0]}," in notes[0]
    assert notes[0].endswith("MFU undercounts; pass flops_per_step= to give the step's FLOPs")


def test_a_custom_operator_is_said_and_products_outside_torch_give_a_zero_count_that_is_said():
    @torch.library.custom_op("trainperf_test::scaled", mutates_args=())
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0

    @scaled.register_fake
    def _(x):  # type: ignore[no-untyped-def]
        return torch.empty_like(x)

    scaled.register_autograd(lambda ctx, grad: grad * 2.0)

    class Custom(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return scaled(self.linear(x))

    notes = operator_notes(Custom(), lambda i: torch.randn(3, 4))
    assert notes == ["trainperf: the FLOP count misses 1 call of trainperf_test.scaled (operators torch has "
                     "no FLOP formula for): MFU undercounts; pass flops_per_step= to give the step's FLOPs"]

    class Outside(torch.autograd.Function):  # a product computed where torch cannot see it
        @staticmethod
        def forward(ctx, x, w):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(x, w)
            return torch.from_numpy(x.detach().numpy() @ w.detach().numpy())

        @staticmethod
        def backward(ctx, grad):  # type: ignore[no-untyped-def]
            x, w = ctx.saved_tensors
            return None, torch.from_numpy(x.numpy().T @ grad.numpy())

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Outside.apply(x, self.w)

    notes = operator_notes(Hidden(), lambda i: torch.randn(3, 4))
    assert notes == ["trainperf: the FLOP count of a step is 0: its products run in kernels torch cannot count "
                     "(a custom kernel called outside torch's operators): MFU undercounts; pass flops_per_step= "
                     "to give the step's FLOPs"]


def test_a_batchs_shape_is_read_from_its_input_ids_else_its_first_tensor():
    from collections import UserDict

    from trainperf.torch._flops import batch_shape

    ids = torch.zeros(4, 100, dtype=torch.long)
    assert batch_shape(ids) == (4, 400)
    assert batch_shape({"attention_mask": torch.ones(4, 7), "input_ids": ids}) == (4, 400)
    assert batch_shape(UserDict({"labels": torch.ones(2, 3), "pixel_values": torch.ones(2, 3, 8, 8)})) == (2, 6)
    assert batch_shape((torch.ones(8, 3, 32, 32), torch.zeros(8))) == (8, 8 * 3 * 32 * 32)
    assert batch_shape({"input_ids": [1, 2, 3]}) is None
    assert batch_shape(torch.zeros(0, 5)) is None and batch_shape(torch.tensor(3.0)) is None
    assert batch_shape(["a", "b"]) is None and batch_shape(None) is None
