"""What the code blocks of README.md and docs/*.md take as already there, in one place.

`tests/test_docs_examples.py` runs every ```python block of the docs in a fresh process, in an empty
working directory, after :func:`fill` has put these names in its namespace:

* ``torch``, ``trainperf`` (the package alone: no part of it that a block uses is imported here, so a
  block that forgets ``import trainperf.torch`` fails) and ``PerformanceListener``;
* ``model``: a plain ``torch.nn.Module`` taking ``(batch, 784)`` inputs to 10 classes; given
  ``labels=`` it returns ``{"loss": ..., "logits": ...}``, as a Hugging Face model does;
* ``loader``: a ``DataLoader`` of 12 batches of 8 MNIST-shaped samples ``(x, y)``;
* ``optimizer``: SGD on ``model``'s parameters;
* ``listener``: a ``PerformanceListener(10)`` that has recorded 20 iterations (on an injected clock: 12 to
  20 ms each, a third of it data wait);
* ``batches``, ``train_step``, ``seconds_waited``, ``my_clock``: a framework-free loop's 30 batches (lists
  of 8 numbers), a step that takes 2 ms and returns its loss as a float, a data wait of 1 ms,
  ``time.perf_counter``;
* ``rank``: 0;
* for blocks that need ``transformers``: ``args`` (``TrainingArguments`` for 4 steps, saving and
  reporting nothing) and ``ds`` (a dataset of ``{"x", "labels"}`` samples for ``model``).

A block's HTML comment can ask for files in its working directory (``given train.log``: a trainperf log
of four windows; ``given a capture in traces/``: a profiler trace that trainperf's own ``profile_dir``
wrote on this machine); :func:`write_train_log` and :func:`write_capture` make them.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

FEATURES = 784
CLASSES = 10
BATCH = 8
BATCHES = 12


def _make_model() -> Any:
    import torch

    class TinyNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(FEATURES, CLASSES)

        def forward(self, x: Any, labels: Any = None) -> Any:
            logits = self.fc(x)
            if labels is None:
                return logits
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    torch.manual_seed(0)
    return TinyNet()


def _train_step(batch: list[float]) -> float:
    """A framework's step: 2 ms of work on the batch, its loss as a float."""
    time.sleep(0.002)
    return sum(v * v for v in batch) / len(batch)


def _hf_dataset() -> Any:
    import torch

    class Samples(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            self.x = torch.randn(BATCH * BATCHES, FEATURES)
            self.y = torch.randint(0, CLASSES, (BATCH * BATCHES,))

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": self.x[i], "labels": self.y[i]}

    return Samples()


def _hf_args(output_dir: str) -> Any:
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=output_dir, max_steps=4, per_device_train_batch_size=BATCH,
                             save_strategy="no", report_to="none", disable_tqdm=True, logging_strategy="no")


def fill(namespace: dict[str, Any], *, needs: tuple[str, ...] = ()) -> None:
    """Put the names the docs' blocks assume into ``namespace`` (see the module's docstring)."""
    import torch

    import trainperf

    model = _make_model()
    x = torch.randn(BATCH * BATCHES, FEATURES)
    y = torch.randint(0, CLASSES, (BATCH * BATCHES,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
    listener = _listener_that_ran(20, sinks=[])
    namespace.update(
        torch=torch, trainperf=trainperf, PerformanceListener=trainperf.PerformanceListener,
        model=model, loader=loader, optimizer=torch.optim.SGD(model.parameters(), lr=0.01), listener=listener,
        batches=[[float(i + k) for k in range(BATCH)] for i in range(30)], train_step=_train_step,
        seconds_waited=0.001, my_clock=time.perf_counter, rank=0,
    )
    if "transformers" in needs:
        namespace.update(args=_hf_args(str(Path("hf-output").resolve())), ds=_hf_dataset())


def _listener_that_ran(iterations: int, **options: Any) -> Any:
    """A ``PerformanceListener(10)`` after ``iterations`` iterations of 12 to 20 ms, 4 to 5 ms of each
    waiting for data, on an injected clock so that it takes no time."""
    import trainperf

    now = [100.0]
    listener = trainperf.PerformanceListener(10, report_score=True, clock=lambda: now[0], report_hardware=False,
                                             **options)
    listener.start()
    with warnings.catch_warnings():  # the run is input-bound on purpose: no BottleneckWarning in the block's output
        warnings.simplefilter("ignore", trainperf.BottleneckWarning)
        for i in range(iterations):
            now[0] += 0.012 + 0.004 * (i % 3)
            listener.record_iteration(samples=BATCH, etl=0.004 + 0.001 * (i % 2), score=2.3 - i * 0.01)
    return listener


def write_train_log(path: Path) -> None:
    """A trainperf log of four windows of 10 iterations (the first a warm-up), as the logging sink
    writes it."""
    import trainperf

    records: list[Any] = []
    _listener_that_ran(40, sinks=[records.append], sink_thread=False).close()
    path.write_text("".join(f"INFO trainperf - {trainperf.format_line(r)}\n" for r in records))


def write_capture(folder: Path) -> None:
    """One trace written by ``profile_dir`` into ``folder``: the filler's model trained with ``attach``, on
    CUDA when there is a GPU; the rule's baseline capture traces the iterations after the run's first
    settled windows, whatever the machine's speed. Imports ``trainperf.torch`` and may start CUDA: run it
    in a process of its own."""
    import torch

    import trainperf
    import trainperf.torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    rule = trainperf.CaptureRule(iterations=3, baseline=True)
    listener = trainperf.PerformanceListener(5, sinks=[], profile_dir=str(folder), profile_rule=rule)
    trainperf.torch.attach(model, listener)
    x, y = torch.randn(BATCH, FEATURES, device=device), torch.randint(0, CLASSES, (BATCH,), device=device)
    for _ in range(40):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    listener.close()
    if not list(folder.glob("*.pt.trace.json.gz")):
        raise RuntimeError(f"no capture was written into {folder}")
