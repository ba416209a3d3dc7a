"""``trainperf demo``: a small model on synthetic data, first with a slow input pipeline, then fixed."""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any, TextIO

__all__ = ["run_demo", "demo_factories"]


def demo_factories(
    *, iterations: int = 60, decode_ms: float = 12.0, batch: int = 64
) -> tuple[Any, Any]:
    """``(make_model, make_loader)`` for the demo's model and its slow pipeline (used by ``trainperf bench``)."""
    import torch

    features, classes = 256, 10

    class DecodingDataset(torch.utils.data.Dataset[tuple[Any, Any]]):
        """Stands in for reading and decoding files: each batch costs ``decode_ms`` of I/O wait."""

        def __len__(self) -> int:
            return iterations

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            time.sleep(decode_ms / 1000.0)
            g = torch.Generator().manual_seed(index)
            return torch.randn(batch, features, generator=g), torch.randint(0, classes, (batch,), generator=g)

    def make_model() -> Any:
        return torch.nn.Sequential(torch.nn.Linear(features, 512), torch.nn.ReLU(), torch.nn.Linear(512, classes))

    def make_loader() -> Any:
        return torch.utils.data.DataLoader(DecodingDataset(), batch_size=None, num_workers=0)

    return make_model, make_loader


def run_demo(
    *,
    iterations: int = 120,
    frequency: int = 20,
    decode_ms: float = 12.0,
    batch: int = 64,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Train twice and print the listener's lines: a pipeline that decodes every batch on the
    training thread, then the same batches decoded once up front.

    Returns:
        ``{"slow": RunSummary, "fixed": RunSummary, "records": {...}}`` for scripting and tests.

    Raises:
        ValueError: fewer than two windows per run (``iterations < 2 * frequency``): the first window
            is the warm-up, which the summary leaves out, so there would be no figure to compare.
    """
    if iterations < 2 * frequency:
        raise ValueError(f"--iterations ({iterations}) must be at least twice --frequency ({frequency}): the "
                         "first window is the warm-up, which the summary leaves out")
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("the demo needs PyTorch: pip install 'trainperf[torch]'") from exc
    from ..core import PerformanceListener
    from ..torch import ListenerModule

    out = out or sys.stdout
    torch.manual_seed(0)
    make_body, make_loader = demo_factories(iterations=iterations, decode_ms=decode_ms, batch=batch)

    class Net(ListenerModule, torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = make_body()

        def forward(self, x: Any) -> Any:
            return self.body(x)

    def train(title: str, loader: Any) -> Any:
        print(f"\n== {title}", file=out, flush=True)
        model = Net()
        listener = PerformanceListener(frequency, report_score=True, report_gc=True)
        model.set_listeners(listener)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the verdict is printed on every line already
            model.fit(loader, optimizer, torch.nn.functional.cross_entropy)
        listener.close()
        summary = listener.summary()
        print(summary, file=out, flush=True)
        return listener, summary

    # One intra-op thread: this model is far too small to gain from more, and on a machine whose
    # cores are busy with other work, torch's spinning thread pool would make every step many times
    # slower than the data it waits for.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _both(train, make_loader, decode_ms, out)
    finally:
        torch.set_num_threads(threads)


def _both(train: Any, make_loader: Any, decode_ms: float, out: TextIO) -> dict[str, Any]:
    """The demo's two runs: the slow pipeline, then the same batches decoded once up front."""
    slow_loader = make_loader()
    slow_listener, slow = train(
        f"1/2 slow input: every batch decoded on the training thread ({decode_ms:g} ms each, num_workers=0)",
        slow_loader,
    )
    decoded = list(make_loader())  # decode once, as pre-saving does
    fixed_listener, fixed = train("2/2 fixed: batches decoded once up front (pre-saved) and kept in memory", decoded)
    print(
        f"\ndata wait: {slow.etl_pct:.0f}% of the run -> {fixed.etl_pct:.0f}%; "
        f"samples/sec: {slow.samples_per_sec or 0:.0f} -> {fixed.samples_per_sec or 0:.0f}",
        file=out,
        flush=True,
    )
    return {
        "slow": slow,
        "fixed": fixed,
        "records": {"slow": list(slow_listener.history), "fixed": list(fixed_listener.history)},
    }
