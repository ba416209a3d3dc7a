"""``trainperf bench``: the same training as given, with prefetching, and from pre-saved data."""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["BenchResult", "run_bench", "format_bench"]


@dataclass(frozen=True)
class BenchResult:
    """One way of feeding the same training: where its time went."""

    mode: str
    batches: int
    etl_s: float
    compute_s: float
    total_s: float
    samples_per_sec: float | None
    prepare_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _train(model: Any, batches: Iterable[Any], loss_fn: Any, epochs: int) -> tuple[float, float, int, int]:
    """Train and return (data wait s, total s, batches, samples) measured by a listener."""
    import torch

    from .._listener import PerformanceListener
    from ..torch import attach, timed

    listener = PerformanceListener(10**9, sinks=[], verdict=False, history=None)
    attach(model, listener)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    started = time.perf_counter()
    count = samples = 0
    for _ in range(epochs):
        for x, y in timed(batches, listener):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
    total = time.perf_counter() - started
    record = listener.flush()
    listener.close()
    if record is not None:
        count, samples = record.window_iterations, record.samples or 0
        wait = (record.etl_total_ms or 0.0) / 1000.0
    else:
        wait = 0.0
    return wait, total, count, samples


def run_bench(
    make_model: Callable[[], Any],
    make_loader: Callable[[], Iterable[Any]],
    *,
    loss_fn: Any = None,
    epochs: int = 1,
    depth: int = 4,
) -> list[BenchResult]:
    """Train a fresh model three ways on the same data and measure each.

    ``as given`` iterates the loader directly; ``prefetch`` wraps it in
    :func:`trainperf.data.prefetch`; ``pre-saved`` first writes the loader's batches with
    :func:`~trainperf.data.presave` (the time this takes is reported as ``prepare_s``, outside the
    training figures) and trains from :func:`~trainperf.data.load_presaved`, prefetched.
    """
    import torch

    from ._prefetch import prefetch
    from ._presave import load_presaved, presave

    loss = loss_fn or torch.nn.functional.cross_entropy
    results: list[BenchResult] = []

    def record(mode: str, source: Iterable[Any], prepare_s: float = 0.0) -> None:
        torch.manual_seed(0)
        wait, total, count, samples = _train(make_model(), source, loss, epochs)
        results.append(BenchResult(mode, count, wait, max(0.0, total - wait), total,
                                   samples / total if total > 0 and samples else None, prepare_s))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record("as given", make_loader())
        record("prefetch", prefetch(make_loader(), depth))
        with tempfile.TemporaryDirectory(prefix="trainperf-bench-") as folder:
            started = time.perf_counter()
            presave(make_loader(), folder)
            prepare = time.perf_counter() - started
            record("pre-saved", prefetch(load_presaved(folder), depth), prepare)
    return results


def format_bench(results: list[BenchResult]) -> str:
    head = (f"{'mode':<10} {'batches':>7} {'ETL wait s':>10} {'compute s':>10} {'total s':>8} "
            f"{'samples/s':>10} {'prepare s':>9}")
    lines = [head, "-" * len(head)]
    for r in results:
        rate = f"{r.samples_per_sec:10.1f}" if r.samples_per_sec else f"{'-':>10}"
        lines.append(f"{r.mode:<10} {r.batches:>7} {r.etl_s:>10.3f} {r.compute_s:>10.3f} {r.total_s:>8.3f} "
                     f"{rate} {r.prepare_s:>9.3f}")
    base = results[0].total_s if results else 0
    for r in results[1:]:
        if r.total_s > 0 and base > 0:
            lines.append(f"{r.mode}: {base / r.total_s:.2f}x faster than as given per pass")
    return "\n".join(lines)
