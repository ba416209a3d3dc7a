"""The memory-growth verdict through the adapters: a loop under ``attach`` and a LightningModule that keep
each step's loss tensor with its graph are judged so, at the rate they keep memory; the same loops that
keep ``loss.item()`` are not."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.realtime  # real memory, as the process holds it

from trainperf import PerformanceListener  # noqa: E402

MB = 2**20
#: Each step keeps its batch and the hidden layer the graph saved: two 128 x 2048 float32 tensors.
KEPT_PER_100 = 100 * 2 * 128 * 2048 * 4 / MB


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))


def _growth(records):
    judged = [r for r in records[:10] if r.verdict is not None and r.verdict.kind == "memory-growth"]
    return judged, records[-1]


@pytest.mark.parametrize("leak", [True, False])
def test_under_attach_a_loop_that_keeps_its_losses_tensors_is_judged_growing(leak):
    from trainperf.torch import attach

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    listener = PerformanceListener(8, sinks=[], sink_thread=False)
    handle = attach(model, listener)
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(96):
            x = torch.randn(128, 2048)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward(retain_graph=leak)
            opt.step()
            losses.append(loss if leak else loss.item())
    handle.detach()
    judged, last = _growth(list(listener.history))
    if leak:
        assert judged and last.verdict.kind == "memory-growth"
        assert last.memory_growth_mb == pytest.approx(KEPT_PER_100, rel=0.1)
    else:
        assert not judged and last.memory_growth_mb is None


def test_under_lightning_a_module_that_keeps_its_losses_tensors_is_judged_growing(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    from trainperf.lightning import PerformanceCallback

    class Leaky(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _model()
            self.kept = []
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self.net(batch).pow(2).mean()
            opt.zero_grad()
            self.manual_backward(loss, retain_graph=True)
            opt.step()
            self.kept.append(loss)  # kept with its graph
            return None

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-4)

    data = torch.utils.data.DataLoader(torch.randn(96 * 128, 2048), batch_size=128)
    callback = PerformanceCallback(8, sinks=[])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pl.Trainer(callbacks=[callback], max_epochs=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
                   accelerator="cpu", devices=1).fit(Leaky(), data)
    judged, last = _growth(list(callback.history))
    assert judged and last.verdict.kind == "memory-growth"
    assert last.memory_growth_mb == pytest.approx(KEPT_PER_100, rel=0.1)
