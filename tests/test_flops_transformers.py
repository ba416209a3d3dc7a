"""FLOPs that follow the batch's shape on a tiny GPT-2 built from a config (nothing downloaded, eager
attention: products FlopCounterMode counts), under ``attach`` and the Hugging Face Trainer: steps
alternating sequence lengths 64 and 512, and dynamic padding from 16 to 1024, each window's FLOPs per
step within 3% of FlopCounterMode's count for the shapes that window trained on, MFU with them."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from _needs import integration

integration("transformers")
integration("accelerate")

pytestmark = pytest.mark.integration

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from trainperf import MemorySink, PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402
from trainperf.transformers import PerformanceCallback  # noqa: E402

VOCAB, LONGEST, PEAK = 64, 1024, 1e11


def gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LONGEST, n_embd=32, n_layer=1, n_head=2,
                        attn_implementation="eager")
    return GPT2LMHeadModel(config)


_REFERENCE: dict[tuple[tuple[int, ...], ...], float] = {}


def reference(shapes: tuple[tuple[int, ...], ...]) -> float:
    """FlopCounterMode over one optimizer step (AdamW) on micro-batches of these shapes, by hand."""
    if shapes not in _REFERENCE:
        model = gpt2()
        opt = torch.optim.AdamW(model.parameters())
        with FlopCounterMode(display=False) as counter:
            for shape in shapes:
                ids = torch.randint(1, VOCAB, shape)
                (model(input_ids=ids, labels=ids).loss / len(shapes)).backward()
            opt.step()
        _REFERENCE[shapes] = float(counter.get_total_flops())
    return _REFERENCE[shapes]


def check_windows(records: list, steps: list[tuple[tuple[int, ...], ...]]) -> None:
    assert records and records[-1].iteration == len(steps)
    for r in records:
        trained = steps[r.first_iteration - 1:r.iteration]
        expected = sum(reference(step) for step in trained) / len(trained)
        assert r.flops_per_step == pytest.approx(expected, rel=0.03), (r.first_iteration, r.iteration)
        assert r.mfu == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / PEAK)


def lengths(kind: str, n: int) -> list[int]:
    if kind == "alternating":
        return [64 if i % 2 == 0 else 512 for i in range(n)]
    return torch.randint(16, LONGEST + 1, (n,), generator=torch.Generator().manual_seed(3)).tolist()


@pytest.mark.parametrize("kind", ["alternating", "padded"])
def test_attach_follows_the_sequence_length_of_a_gpt2(kind):
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters())
    memory = MemorySink()
    listener = PerformanceListener(4, sinks=[memory], report_hardware=False, peak_flops=PEAK)
    attach(model, listener)
    steps = []
    for i, length in enumerate(lengths(kind, 16 if kind == "alternating" else 24)):
        ids = torch.randint(1, VOCAB, (2, length), generator=torch.Generator().manual_seed(i))
        mask = torch.ones_like(ids)
        opt.zero_grad()
        model(input_ids=ids, attention_mask=mask, labels=ids).loss.backward()
        opt.step()
        steps.append(((2, length),))
    listener.close()
    check_windows(memory.records, steps)


class Varied(torch.utils.data.Dataset):
    """Sequences whose lengths alternate 64 and 512, or vary from 16 to 1024."""

    def __init__(self, kind: str, n: int) -> None:
        self.lengths = lengths(kind, n)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.randint(1, VOCAB, (self.lengths[i],), generator=torch.Generator().manual_seed(i))}


def pad(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Dynamic padding: each batch padded to its own longest sequence."""
    longest = max(len(item["input_ids"]) for item in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, item in enumerate(items):
        n = len(item["input_ids"])
        ids[row, :n], mask[row, :n] = item["input_ids"], 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.where(mask.bool(), ids, -100)}


@pytest.mark.parametrize(("kind", "accumulation"), [("alternating", 1), ("alternating", 2), ("padded", 1)])
def test_the_trainer_follows_the_shape_of_each_step(tmp_path, kind, accumulation):
    model = gpt2()
    shapes: list[tuple[int, ...]] = []

    def seen(module, args, kwargs):  # type: ignore[no-untyped-def]
        if torch.is_grad_enabled():
            shapes.append(tuple(kwargs["input_ids"].shape))

    model.register_forward_pre_hook(seen, with_kwargs=True)
    memory = MemorySink()
    callback = PerformanceCallback(3, sinks=[memory], report_hardware=False, peak_flops=PEAK)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=12,
                             gradient_accumulation_steps=accumulation, report_to=[], save_strategy="no",
                             use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, seed=7, logging_steps=100)
    trainer = Trainer(model=model, args=args, train_dataset=Varied(kind, 12 * accumulation * 2 * 2), data_collator=pad,
                      callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    steps = [tuple(shapes[k:k + accumulation]) for k in range(0, len(shapes), accumulation)]
    check_windows(memory.records, steps)
