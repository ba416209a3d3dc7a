"""Every adapter takes ``profile_dir``: a loop under ``attach``, Lightning's callback and the Hugging
Face Trainer's callback, each turning 6x slower at iteration 81, get a trace of the baseline (after
iteration 40) and one of the iterations after the two windows that showed the slowdown, with the
model's own operators in them (the real ``torch.profiler``)."""

from __future__ import annotations

import gzip
import json
import re
import warnings

import pytest

from _needs import integration

torch = pytest.importorskip("torch")

from trainperf import CaptureRule, MemorySink, PerformanceListener  # noqa: E402
from trainperf.torch import attach  # noqa: E402


def traces(folder) -> list[tuple[list[int], set[str]]]:
    """Each trace's ProfilerStep numbers and operator names."""
    out = []
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        steps = sorted(int(m.group(1)) for e in events
                       if (m := re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))))
        out.append((steps, {str(e.get("name")) for e in events}))
    return sorted(out, key=lambda trace: trace[0])


def step_s(iteration: int) -> float:
    return 0.006 if iteration >= 81 else 0.001


def test_attach(tmp_path, clock):
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    memory = MemorySink()
    listener = PerformanceListener(10, clock=clock, sinks=[memory], sink_thread=False, profile_dir=tmp_path)
    attach(model, listener)
    x = torch.randn(8, 16)
    for i in range(1, 141):
        optimizer.zero_grad()
        model(x).sum().backward()
        clock.advance(step_s(i))
        optimizer.step()
    listener.close()
    ((base, _), (steps, names)) = traces(tmp_path)
    assert (base, steps) == ([42, 43, 44], [102, 103, 104])
    assert "aten::addmm" in names or "aten::linear" in names
    assert [r.iteration for r in memory.records if r.capture] == [50, 110]


@pytest.mark.parametrize("package_name", ["pytorch_lightning", "lightning.pytorch"])
def test_lightning(tmp_path, clock, package_name):
    package = pytest.importorskip(package_name)
    from trainperf.lightning import PerformanceCallback

    class Model(package.LightningModule):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)

        def training_step(self, batch, batch_idx):
            clock.advance(step_s(self.global_step + 1))
            return self.fc(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    memory = MemorySink()
    callback = PerformanceCallback(10, clock=clock, sinks=[memory], sink_thread=False, profile_dir=tmp_path,
                                   report_hardware=False)
    data = torch.utils.data.DataLoader(torch.randn(140, 16), batch_size=1)
    trainer = package.Trainer(callbacks=[callback], enable_progress_bar=False, enable_model_summary=False,
                              enable_checkpointing=False, logger=False, default_root_dir=tmp_path, accelerator="cpu",
                              devices=1, max_epochs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Model(), data)
    ((base, _), (steps, names)) = traces(tmp_path)
    assert (base, steps) == ([42, 43, 44], [102, 103, 104])
    assert "aten::addmm" in names or "aten::linear" in names
    assert [r.iteration for r in memory.records if r.capture] == [50, 110]


@pytest.mark.integration
def test_trainer(tmp_path, clock):
    integration("transformers")
    integration("accelerate")
    from transformers import Trainer

    from test_transformers import Padded, arguments, tiny_model
    from trainperf.transformers import PerformanceCallback

    model = tiny_model()
    calls = [0]

    def slow(module, args):  # the model's forward, once per optimizer step here
        calls[0] += 1
        clock.advance(step_s(calls[0]))

    model.register_forward_pre_hook(slow)
    memory = MemorySink()
    # this dataset pads 40-55% of its tokens, near the padding verdict's line: a verdict turning on would be
    # a change of its own, traced; here only the slowdown's trace is looked for
    callback = PerformanceCallback(10, clock=clock, sinks=[memory], sink_thread=False, profile_dir=tmp_path / "t",
                                   report_hardware=False, profile_rule=CaptureRule(on_verdict=False))
    trainer = Trainer(model=model, args=arguments(tmp_path, max_steps=140, per_device_train_batch_size=2,
                                                  logging_steps=1000),
                      train_dataset=Padded(280), callbacks=[callback])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    ((base, _), (steps, names)) = traces(tmp_path / "t")
    assert (base, steps) == ([42, 43, 44], [102, 103, 104])
    assert any(n.startswith("aten::") for n in names)
    assert [r.iteration for r in memory.records if r.capture] == [50, 110]
