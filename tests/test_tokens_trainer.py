"""The Hugging Face Trainer's three token counts, exact for a collator whose padding is known: each
window's padded, real and loss tokens are those of the micro-batches the model trained on (read in a
forward hook), with gradient accumulation 1 and 4, and MFU on the real tokens is MFU times real over
padded."""

from __future__ import annotations

import warnings

import pytest
import torch

from _needs import integration

integration("transformers")
integration("accelerate")

pytestmark = pytest.mark.integration

from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

from trainperf import MemorySink  # noqa: E402
from trainperf.transformers import PerformanceCallback  # noqa: E402

VOCAB, LENGTH, PROMPT = 64, 24, 3


class Sequences(torch.utils.data.Dataset):
    """Sequences of PROMPT + 1 to LENGTH tokens, each its own length."""

    def __len__(self) -> int:
        return 400

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        k = PROMPT + 1 + (i * 7) % (LENGTH - PROMPT)
        return {"input_ids": torch.randint(1, VOCAB, (k,), generator=torch.Generator().manual_seed(i))}


def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Padded to the batch's longest; labels -100 on the pads and on a prompt of PROMPT tokens."""
    width = max(len(item["input_ids"]) for item in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, :len(item["input_ids"])] = item["input_ids"]
        mask[row, :len(item["input_ids"])] = 1
    labels = torch.where(mask.bool(), ids, -100)
    labels[:, :PROMPT] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


@pytest.mark.parametrize("accumulation", [1, 4])
def test_each_window_has_the_padded_real_and_loss_tokens_the_model_trained_on(tmp_path, accumulation):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=16, n_layer=1, n_head=2))
    seen: list[tuple[int, int, int]] = []

    def hook(module, args, kwargs):  # type: ignore[no-untyped-def]
        if torch.is_grad_enabled():
            ids, mask, labels = kwargs["input_ids"], kwargs["attention_mask"], kwargs["labels"]
            seen.append((ids.numel(), int(mask.sum()), int((labels != -100).sum())))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    memory = MemorySink()
    callback = PerformanceCallback(4, sinks=[memory], report_hardware=False, peak_flops=1e9)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=8, logging_steps=4,
                             report_to=[], save_strategy="no", use_cpu=True, dataloader_num_workers=0,
                             disable_tqdm=True, seed=7, gradient_accumulation_steps=accumulation)
    trainer = Trainer(model=model, args=args, train_dataset=Sequences(), data_collator=collate, callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    per_window = 4 * accumulation
    expected = [tuple(sum(s[i] for s in seen[k:k + per_window]) for i in range(3)) for k in (0, per_window)]
    assert [(r.tokens_padded, r.tokens, r.tokens_loss) for r in memory.records] == expected
    assert all(padded > real > loss for padded, real, loss in expected)
    for r in memory.records:
        assert r.padding_share == pytest.approx(1 - r.tokens / r.tokens_padded)
        assert r.mfu_real == pytest.approx(r.mfu * r.tokens / r.tokens_padded)
