"""The three token counts from the adapters, exact for a collate whose padding is known: sequences of
lengths drawn per sample, padded to the batch's longest, labels -100 on the pads and on a prompt
prefix. Every adapter (attach, set_listeners and fit, Lightning) gives each window the padded, real
and loss tokens of the batches it trained on, with gradient accumulation 1 and 4; MFU on the real
tokens is the MFU times real over padded; a run padded to about 40% is judged ``padding`` and a packed
one is not."""

from __future__ import annotations

import warnings

import pytest
import torch

from trainperf import MemorySink, PerformanceListener
from trainperf.torch import ListenerModule, attach
from trainperf.torch._batch import IGNORE_INDEX, NOT_COUNTED, TokenCounts, batch_token_counts

VOCAB, PROMPT = 50, 3


@pytest.fixture(autouse=True)
def one_thread():
    """One compute thread: on a shared machine two threads of a small step spin against each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def collate(lengths: list[int], generator: torch.Generator, pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """One batch of sequences of ``lengths`` tokens, padded to the longest (or ``pad_to``), labels
    -100 on the pads and on the first PROMPT tokens of each sequence."""
    width = pad_to or max(lengths)
    lengths_t = torch.tensor(lengths)
    mask = (torch.arange(width)[None, :] < lengths_t[:, None]).long()
    ids = torch.randint(1, VOCAB, (len(lengths), width), generator=generator) * mask
    labels = torch.where(mask.bool(), ids, IGNORE_INDEX)
    labels[:, :PROMPT] = IGNORE_INDEX
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def known_batches(n: int, *, batch: int = 4, low: int = PROMPT + 1, high: int = 24, seed: int = 0,
                  packed: bool = False, pad_to: int | None = None) -> tuple[list[dict], list[TokenCounts]]:
    """``n`` batches and, from the lengths drawn (not from the tensors), each one's exact counts."""
    g = torch.Generator().manual_seed(seed)
    batches, truth = [], []
    for _ in range(n):
        if packed:
            lengths = [high] * batch
        else:
            lengths = torch.randint(low, high + 1, (batch,), generator=g).tolist()
        width = pad_to or max(lengths)
        batches.append(collate(lengths, g, pad_to))
        truth.append(TokenCounts(padded=batch * width, real=sum(lengths), loss=sum(k - PROMPT for k in lengths)))
    return batches, truth


def summed(truth: list[TokenCounts], start: int, stop: int) -> tuple[int, int, int]:
    part = truth[start:stop]
    return (sum(t.padded for t in part), sum(t.real for t in part), sum(t.loss for t in part))


def counts_of(records) -> list[tuple[int | None, int | None, int | None]]:  # type: ignore[no-untyped-def]
    return [(r.tokens_padded, r.tokens, r.tokens_loss) for r in records]


class TinyLM(torch.nn.Module):
    def __init__(self, width: int = 8, hidden: int = 8) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.body = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, width))
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.body(self.embed(input_ids)))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


def test_batch_token_counts_are_exact_for_a_known_collate_and_none_for_what_waits_for_a_device():
    batches, truth = known_batches(6, seed=1)
    assert [batch_token_counts(b) for b in batches] == truth
    assert any(t.padded != t.real for t in truth) and all(t.loss < t.real for t in truth)
    b = batches[0]
    assert batch_token_counts((dict(input_ids=b["input_ids"], attention_mask=b["attention_mask"]),
                               b["labels"])) == truth[0]  # (inputs, targets): the targets are the labels
    assert batch_token_counts({"input_ids": b["input_ids"]}) == (b["input_ids"].numel(),) * 2 + (None,)
    meta = {key: value.to("meta") for key, value in b.items()}  # not on the host: shape only
    assert batch_token_counts(meta) == TokenCounts(truth[0].padded, None, None)
    assert batch_token_counts((torch.ones(2, 3), torch.ones(2))) is NOT_COUNTED
    assert batch_token_counts({"pixels": torch.ones(2, 3), "labels": torch.ones(2)}) is NOT_COUNTED


def train_attached(batches, accumulate: int, frequency: int, **options):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    memory = MemorySink()
    listener = PerformanceListener(frequency, sinks=[memory], report_hardware=False, **options)
    attach(model, listener)
    for k, batch in enumerate(torch.utils.data.DataLoader(batches, batch_size=None)):
        (model(**batch) / accumulate).backward()
        if (k + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad()
    listener.close()
    return memory.records


@pytest.mark.parametrize("accumulate", [1, 4])
def test_attach_gives_each_window_the_exact_counts_with_accumulation(accumulate):
    batches, truth = known_batches(24, seed=2)
    per_window = 8  # batches per window
    records = train_attached(batches, accumulate, frequency=per_window // accumulate)
    assert counts_of(records) == [summed(truth, k, k + per_window) for k in range(0, 24, per_window)]
    for r in records:
        assert r.padding_share == pytest.approx(1 - r.tokens / r.tokens_padded)


def test_mfu_on_real_tokens_is_computed_alike_with_accumulation_1_and_4():
    batches, truth = known_batches(24, seed=3, pad_to=24)  # one shape: the FLOPs of every batch alike
    share = 1 - sum(t.real for t in truth) / sum(t.padded for t in truth)
    flops = {}
    for accumulate in (1, 4):
        records = train_attached(batches, accumulate, frequency=8 // accumulate, peak_flops=1e9)
        flops[accumulate] = records[0].flops_per_step
        assert sum(r.tokens for r in records) == sum(t.real for t in truth)
        for r in records:
            assert r.mfu == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / 1e9)
            assert r.mfu_real == pytest.approx(r.mfu * r.tokens / r.tokens_padded)
        assert sum(r.tokens_padded for r in records) * (1 - share) == pytest.approx(sum(r.tokens for r in records))
    assert flops[4] == pytest.approx(4 * flops[1], rel=1e-6)  # per step: four micro-batches' worth


class Net(ListenerModule, TinyLM):
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        return self.head(self.body(self.embed(inputs["input_ids"])))


def test_set_listeners_and_fit_count_the_inputs_and_the_targets_labels():
    batches, truth = known_batches(12, seed=4)
    pairs = [({"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}, b["labels"]) for b in batches]
    model = Net()
    memory = MemorySink()
    model.set_listeners(PerformanceListener(4, sinks=[memory], report_hardware=False))

    def loss_fn(logits, labels):  # type: ignore[no-untyped-def]
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)

    model.fit(pairs, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn)
    assert counts_of(memory.records) == [summed(truth, k, k + 4) for k in (0, 4, 8)]


def test_a_user_tokens_function_wins_for_the_real_count_and_the_others_are_still_counted():
    batches, truth = known_batches(8, seed=5)
    records = train_attached(batches, 1, frequency=4, tokens=lambda batch: 7)
    assert counts_of(records) == [(summed(truth, k, k + 4)[0], 28, summed(truth, k, k + 4)[2]) for k in (0, 4)]


def test_a_mask_on_a_device_is_said_once_and_its_real_and_loss_tokens_are_not_counted():
    from trainperf.torch.shared import token_counter

    batches, truth = known_batches(3, seed=6)
    count = token_counter(PerformanceListener(report_hardware=False, sinks=[]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [count({key: value.to("meta") for key, value in b.items()}) for b in batches]
    assert got == [TokenCounts(t.padded, None, None) for t in truth]
    said = [str(w.message) for w in caught if "attention mask is on a device" in str(w.message)]
    assert len(said) == 1


def test_a_40_percent_padded_run_is_judged_padding_and_a_packed_run_is_not():
    """A step of a few milliseconds (material), 40% of its tokens pads: most windows after the warm-up
    are ``padding``; the same model on packed batches of the same size never is."""
    def verdicts(batches):  # type: ignore[no-untyped-def]
        torch.manual_seed(0)
        model = TinyLM(width=64, hidden=512)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        memory = MemorySink()
        listener = PerformanceListener(5, sinks=[memory], report_hardware=False)
        attach(model, listener)
        for batch in torch.utils.data.DataLoader(batches, batch_size=None):
            opt.zero_grad()
            model(**batch).backward()
            opt.step()
        listener.close()
        return [r for r in memory.records if not r.warmup]

    lengths = [40, 32, 16, 24, 8, 40, 16, 16]  # 192 real of 8 x 40: 40% padding
    g = torch.Generator().manual_seed(7)
    padded = [collate(lengths, g, pad_to=40) for _ in range(40)]
    records = verdicts(padded)
    assert all(r.padding_share == pytest.approx(0.4) for r in records)
    kinds = [r.verdict.kind for r in records]
    assert kinds.count("padding") > len(kinds) / 2, [r.verdict for r in records]
    packed = [collate([40] * 8, g) for _ in range(40)]
    records = verdicts(packed)
    assert all(r.padding_share == 0.0 for r in records)
    assert "padding" not in [r.verdict.kind for r in records]


@pytest.mark.parametrize("accumulate", [1, 4])
def test_lightning_gives_each_window_the_exact_counts_with_accumulation(tmp_path, accumulate):
    pl = pytest.importorskip("pytorch_lightning")
    from test_tokens_adapters import lightning_lm
    from trainperf.lightning import PerformanceCallback

    Module = lightning_lm(pl, TinyLM)
    batches, truth = known_batches(24, seed=8)
    memory = MemorySink()
    callback = PerformanceCallback(8 // accumulate, sinks=[memory], report_hardware=False, peak_flops=1e9)
    trainer = pl.Trainer(max_epochs=1, callbacks=[callback], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, accelerator="cpu",
                         accumulate_grad_batches=accumulate, default_root_dir=tmp_path)
    trainer.fit(Module(), torch.utils.data.DataLoader(batches, batch_size=None))
    assert counts_of(memory.records) == [summed(truth, k, k + 8) for k in (0, 8, 16)]
    for r in memory.records:
        assert r.mfu_real == pytest.approx(r.mfu * r.tokens / r.tokens_padded)
