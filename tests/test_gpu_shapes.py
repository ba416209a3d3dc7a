"""On a real CUDA device: FLOPs that follow the batch's shape, and the padded, real and loss tokens of
batches moved to the device in the loop, without a synchronisation of ours.

Every test here is marked ``gpu`` and skips where no CUDA device is present.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from trainperf import MemorySink, PerformanceListener
from trainperf.torch import attach

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

VOCAB, WIDTH = 512, 256
PEAK = 1e14  # given, so that MFU is checked against the window's own figures


class TinyGPT(torch.nn.Module):
    """One decoder block with attention as plain products (counted the same on every device)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(WIDTH)
        x = x + self.proj(scores.softmax(-1) @ v)
        return self.head(x + self.mlp(x))


def loss_of(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
    logits = model(ids)
    target = ids if labels is None else labels
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=-100)


def reference(shape: tuple[int, int]) -> float:
    """FlopCounterMode over one optimizer step of this shape, on the device, done by hand."""
    model = TinyGPT().cuda()
    opt = torch.optim.AdamW(model.parameters())
    ids = torch.randint(0, VOCAB, shape, device="cuda")
    with FlopCounterMode(display=False) as counter:
        loss_of(model, ids).backward()
        opt.step()
    return float(counter.get_total_flops())


def test_flops_follow_alternating_lengths_on_cuda_and_mfu_with_them():
    lengths = [64 if i % 2 == 0 else 512 for i in range(24)]
    batches = [torch.randint(0, VOCAB, (8, n)) for n in lengths]
    expected = {n: reference((8, n)) for n in (64, 512)}
    model = TinyGPT().cuda()
    opt = torch.optim.AdamW(model.parameters())
    memory = MemorySink()
    listener = PerformanceListener(4, sinks=[memory], verdict=False, peak_flops=PEAK)
    attach(model, listener)
    for ids in torch.utils.data.DataLoader(batches, batch_size=None):
        ids = ids.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss_of(model, ids).backward()
        opt.step()
    listener.close()
    records = memory.records
    assert records and records[-1].iteration == len(lengths)
    for r in records:
        trained = lengths[r.first_iteration - 1:r.iteration]
        want = sum(expected[n] for n in trained) / len(trained)
        assert r.flops_per_step == pytest.approx(want, rel=0.03), (r.first_iteration, r.iteration)
        assert r.mfu == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / PEAK, rel=1e-6)


def padded_batches(n: int, b: int = 8, longest: int = 256, prompt: int = 3) -> tuple[list[dict], tuple[int, int, int]]:
    """Dict batches padded to each batch's longest, labels -100 on pads and on a prompt; their counts."""
    g = torch.Generator().manual_seed(0)
    batches, padded, real, loss = [], 0, 0, 0
    for _ in range(n):
        lengths = torch.randint(prompt + 1, longest + 1, (b,), generator=g).tolist()
        top = max(lengths)
        ids = torch.randint(0, VOCAB, (b, top), generator=g)
        mask = torch.zeros(b, top, dtype=torch.long)
        labels = torch.full((b, top), -100)
        for row, length in enumerate(lengths):
            mask[row, :length] = 1
            labels[row, prompt:length] = ids[row, prompt:length]
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
        padded, real, loss = padded + b * top, real + sum(lengths), loss + sum(n - prompt for n in lengths)
    return batches, (padded, real, loss)


def test_padded_real_and_loss_tokens_are_exact_on_cuda():
    batches, (padded, real, loss) = padded_batches(20)
    model = TinyGPT().cuda()
    opt = torch.optim.AdamW(model.parameters())
    memory = MemorySink()
    listener = PerformanceListener(5, sinks=[memory], verdict=False)
    attach(model, listener)
    for batch in torch.utils.data.DataLoader(batches, batch_size=None):
        batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}
        opt.zero_grad(set_to_none=True)
        loss_of(model, batch["input_ids"], batch["labels"]).backward()
        opt.step()
    listener.close()
    records = memory.records
    assert sum(r.tokens_padded for r in records) == padded
    assert sum(r.tokens for r in records) == real
    assert sum(r.tokens_loss for r in records) == loss
    share = 1 - real / padded
    whole = sum(r.padding_share * r.tokens_padded for r in records) / padded
    assert whole == pytest.approx(share, rel=1e-9)
