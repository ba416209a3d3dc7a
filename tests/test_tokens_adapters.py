"""Tokens counted by the adapters: each batch's real tokens (its attention mask's sum) read on the
host as the loader gives it, in the window of the iteration that trained on it; a user's function
for other batches; a function that fails is said once and training goes on."""

from __future__ import annotations

import warnings

import pytest
import torch

from trainperf import MemorySink, PerformanceListener
from trainperf.torch import attach
from trainperf.torch._batch import batch_tokens

VOCAB, LENGTH = 50, 12


def padded_batches(n: int, batch: int = 4, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Token batches padded to LENGTH, each row with a known number of real tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(1, LENGTH + 1, (batch,), generator=g)
        mask = (torch.arange(LENGTH)[None, :] < lengths[:, None]).long()
        ids = torch.randint(1, VOCAB, (batch, LENGTH), generator=g) * mask
        out.append({"input_ids": ids, "attention_mask": mask, "labels": ids.clone()})
    return out


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.embed(input_ids))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
        return (loss * attention_mask.flatten()).sum() / attention_mask.sum()


def lightning_lm(pl, lm: type[torch.nn.Module] = TinyLM, **attributes):  # type: ignore[no-untyped-def]
    """A LightningModule training ``lm`` (a model taking a dict batch's keys, giving its loss) on dict
    batches, with class ``attributes`` set on it."""

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm()

        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            return self.lm(**batch)

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for name, value in attributes.items():
        setattr(Module, name, value)
    return Module


def test_batch_tokens_counts_the_mask_else_the_ids_and_nothing_it_cannot_read_on_the_host():
    batch = padded_batches(1)[0]
    assert batch_tokens(batch) == int(batch["attention_mask"].sum())
    assert batch_tokens({"input_ids": batch["input_ids"]}) == 4 * LENGTH
    assert batch_tokens({"attention_mask": batch["attention_mask"].bool()}) == int(batch["attention_mask"].sum())
    assert batch_tokens((batch["input_ids"], batch["labels"])) is None
    assert batch_tokens({"pixels": torch.ones(2, 3)}) is None
    meta = {"attention_mask": torch.ones(2, 3, device="meta")}  # not on the host: never read there
    assert batch_tokens(meta) is None


def test_attach_counts_each_iterations_tokens_from_the_loaders_batches():
    data = padded_batches(12)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    memory = MemorySink()
    listener = PerformanceListener(4, sinks=[memory], report_hardware=False)
    attach(model, listener)
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    for batch in loader:
        opt.zero_grad()
        model(**batch).backward()
        opt.step()
    listener.close()
    real = [int(b["attention_mask"].sum()) for b in data]
    assert [r.tokens for r in memory.records] == [sum(real[0:4]), sum(real[4:8]), sum(real[8:12])]
    for r in memory.records:
        assert r.tokens_per_sec == pytest.approx(r.tokens / r.window_s)
    assert listener.summary().tokens == sum(real[4:])  # the warm-up window left out


def test_a_user_tokens_function_counts_other_batches_and_one_that_fails_is_said_once():
    data = [(torch.ones(3, 5), torch.zeros(3)) for _ in range(8)]
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def run(tokens) -> list:
        memory = MemorySink()
        listener = PerformanceListener(4, sinks=[memory], report_hardware=False, tokens=tokens)
        attach(model, listener)
        for x, y in torch.utils.data.DataLoader(data, batch_size=None):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
            opt.step()
        listener.close()
        return [r.tokens for r in memory.records]

    assert run(lambda batch: batch[0].numel()) == [60, 60]
    calls = []

    def broken(batch):
        calls.append(1)
        raise KeyError("input_ids")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(broken) == [None, None]
    said = [str(w.message) for w in caught if "tokens= function" in str(w.message)]
    assert said == ["trainperf: the tokens= function raised KeyError('input_ids'); tokens are not counted from now on"]
    assert len(calls) == 1  # not called again
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(lambda batch: 2.5) == [None, None]
    assert any("returned 2.5, not a non-negative int or None" in str(w.message) for w in caught)


def test_lightning_gives_each_iteration_the_tokens_of_the_batches_it_trained_on_with_accumulation(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    from trainperf.lightning import PerformanceCallback

    Module = lightning_lm(pl)

    data = padded_batches(24, seed=3)
    real = [int(b["attention_mask"].sum()) for b in data]

    class Stream(torch.utils.data.IterableDataset):  # no length: Lightning fetches one batch ahead
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(data)

    for accumulate, dataset in ((1, data), (2, data), (1, Stream()), (2, Stream())):
        memory = MemorySink()
        callback = PerformanceCallback(3, sinks=[memory], report_hardware=False)
        trainer = pl.Trainer(max_epochs=2, callbacks=[callback], logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False, accelerator="cpu",
                             accumulate_grad_batches=accumulate, default_root_dir=tmp_path)
        trainer.fit(Module(), torch.utils.data.DataLoader(dataset, batch_size=None))
        per_window = 3 * accumulate  # batches per window
        expected = [sum(real[k:k + per_window]) for k in range(0, 24, per_window)] * 2  # two epochs
        assert [r.tokens for r in memory.records] == expected, (accumulate, dataset)


def test_lightning_counts_each_epoch_from_its_own_first_batch_when_a_limit_cuts_epochs_short(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    from trainperf.lightning import PerformanceCallback

    Module = lightning_lm(pl)

    data = padded_batches(24, seed=5)
    real = [int(b["attention_mask"].sum()) for b in data]

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(data)

    memory = MemorySink()
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=10, callbacks=[PerformanceCallback(5, sinks=[memory],
                         report_hardware=False)], logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, accelerator="cpu", default_root_dir=tmp_path)
    trainer.fit(Module(), torch.utils.data.DataLoader(Stream(), batch_size=None))
    assert [r.tokens for r in memory.records] == [sum(real[0:5]), sum(real[5:10])] * 2


def test_lightning_counts_flops_per_step_as_flop_counter_mode_does_and_gives_mfu_against_a_given_peak(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    from torch.utils.flop_counter import FlopCounterMode

    from trainperf.lightning import PerformanceCallback

    Module = lightning_lm(pl)

    data = padded_batches(12, seed=9)
    reference_model = TinyLM()
    with FlopCounterMode(display=False) as counter:  # one step by hand: the reference
        reference_model(**data[0]).backward()
        torch.optim.SGD(reference_model.parameters(), lr=0.1).step()
    for accumulate in (1, 2):
        memory = MemorySink()
        callback = PerformanceCallback(3, sinks=[memory], report_hardware=False, peak_flops=1e9)
        trainer = pl.Trainer(max_epochs=1, callbacks=[callback], logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False, accelerator="cpu",
                             accumulate_grad_batches=accumulate, default_root_dir=tmp_path)
        trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=None))
        for r in memory.records:
            assert r.flops_per_step == pytest.approx(accumulate * counter.get_total_flops(), rel=0.05)
            assert r.mfu == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / 1e9)
            assert r.peak == "1.0 GFLOP/s (given)"


def test_lightning_takes_a_modules_flops_per_batch_times_the_batches_per_step_and_counts_nothing(tmp_path, monkeypatch):
    pl = pytest.importorskip("pytorch_lightning")
    import torch.utils.flop_counter as flop_counter

    from trainperf.lightning import PerformanceCallback

    monkeypatch.setattr(flop_counter, "FlopCounterMode", lambda *a, **k: pytest.fail("counted"))

    Module = lightning_lm(pl, flops_per_batch=5e6)  # Lightning's convention (ThroughputMonitor reads it)

    memory = MemorySink()
    trainer = pl.Trainer(max_epochs=1, callbacks=[PerformanceCallback(3, sinks=[memory], report_hardware=False)],
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, accelerator="cpu", accumulate_grad_batches=2,
                         default_root_dir=tmp_path)
    trainer.fit(Module(), torch.utils.data.DataLoader(padded_batches(12), batch_size=None))
    assert memory.records and all(r.flops_per_step == 1e7 for r in memory.records)


def test_attach_counts_the_second_steps_flops_as_flop_counter_mode_does_and_mfu_against_a_given_peak():
    from torch.utils.flop_counter import FlopCounterMode

    data = padded_batches(12, seed=4)
    reference = TinyLM()
    with FlopCounterMode(display=False) as counter:
        reference(**data[0]).backward()
        torch.optim.SGD(reference.parameters(), lr=0.1).step()
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    memory = MemorySink()
    listener = PerformanceListener(4, sinks=[memory], report_hardware=False, peak_flops=2e9)
    attach(model, listener)
    for batch in torch.utils.data.DataLoader(data, batch_size=None):
        opt.zero_grad()
        model(**batch).backward()
        opt.step()
    listener.close()
    assert len(memory.records) == 3
    for r in memory.records:
        assert r.flops_per_step == pytest.approx(counter.get_total_flops(), rel=0.05)
        assert r.mfu == pytest.approx(r.flops_per_step * r.optimizer_steps / r.window_s / 2e9)


def test_the_format_in_use_follows_autocast():
    from trainperf.torch._flops import format_in_use

    param = torch.nn.Linear(2, 2).weight
    assert format_in_use(param) == "fp32"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert format_in_use(param) == "bf16"
    assert format_in_use(param.half()) == "fp16"


@pytest.mark.parametrize("workers", [0, 2])
def test_attach_windows_that_straddle_an_epochs_edge_count_each_batch_once(workers):
    data = padded_batches(12, seed=11)
    real = [int(b["attention_mask"].sum()) for b in data] * 2
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    memory = MemorySink()
    listener = PerformanceListener(5, sinks=[memory], report_hardware=False)
    attach(model, listener)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    for _ in range(2):
        for batch in loader:
            opt.zero_grad()
            model(**batch).backward()
            opt.step()
    listener.close()
    assert [r.tokens for r in memory.records] == [sum(real[k:k + 5]) for k in range(0, 24, 5)]
    assert [r.samples for r in memory.records] == [20, 20, 20, 20, 16]
