"""``trainperf bench``: the same training as given, with prefetching, and from pre-saved data."""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..base import Progress

__all__ = ["BenchResult", "run_bench", "format_bench"]


@dataclass(frozen=True)
class BenchResult:
    """One way of feeding the same training: where its time went, in its median run.

    Attributes:
        mode: ``as given``, ``prefetch`` or ``pre-saved``.
        batches: batches trained on per run.
        etl_s, compute_s, total_s, samples_per_sec: the median run's (by ``total_s``).
        prepare_s: the one-off cost of writing the shards (``pre-saved``), outside the figures.
        runs: how many times the mode was run.
        total_min_s, total_max_s: the fastest and the slowest run's total: the spread.
    """

    mode: str
    batches: int
    etl_s: float
    compute_s: float
    total_s: float
    samples_per_sec: float | None
    prepare_s: float = 0.0
    runs: int = 1
    total_min_s: float = 0.0
    total_max_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: The loss of one batch, for batches that are not ``(inputs, targets)`` pairs: ``batch_loss(model,
#: batch)`` returns the scalar loss tensor to call ``backward()`` on.
BatchLoss = Callable[[Any, Any], Any]


def _pair_loss(loss_fn: Any) -> BatchLoss:
    def loss_of(model: Any, batch: Any) -> Any:
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise ValueError(
                f"the loader's batches are {type(batch).__name__}s, not (inputs, targets) pairs: give a batch "
                "loss (--loss module:function, called as function(model, batch) and returning the loss)"
            )
        x, y = batch
        return loss_fn(model(x), y)

    return loss_of


def _train(model: Any, batches: Iterable[Any], batch_loss: BatchLoss, epochs: int,
           advance: Callable[[], None]) -> tuple[float, float, int, int]:
    """Train and return (data wait s, total s, batches, samples) measured by a listener; ``advance``
    is called after each batch (the progress: one addition)."""
    import torch

    from ..core import PerformanceListener
    from ..torch import attach, timed

    listener = PerformanceListener(10**9, sinks=[], verdict=False, history=None)
    attach(model, listener)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    started = time.perf_counter()
    count = samples = 0
    try:
        for _ in range(epochs):
            for batch in timed(batches, listener):
                optimizer.zero_grad(set_to_none=True)
                batch_loss(model, batch).backward()
                optimizer.step()
                advance()
        total = time.perf_counter() - started
        record = listener.flush()
    finally:
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
    batch_loss: BatchLoss | None = None,
    epochs: int = 1,
    depth: int = 4,
    repeats: int = 3,
    progress: Progress | None = None,
) -> list[BenchResult]:
    """Train a fresh model three ways on the same data and measure each, ``repeats`` times.

    ``as given`` iterates the loader directly; ``prefetch`` wraps it in
    :func:`trainperf.data.prefetch`; ``pre-saved`` first writes the loader's batches with
    :func:`~trainperf.data.presave` (once; the time this takes is reported as ``prepare_s``, outside
    the training figures) and trains from :func:`~trainperf.data.load_presaved`, prefetched. The
    modes take turns, round after round, so that a machine that gets busier slows all of them; each
    result is the mode's median run, with the fastest and slowest totals as its spread.

    Args:
        make_model: builds a fresh model (each run trains a new one from the same seed).
        make_loader: builds the loader (each run iterates a new one).
        loss_fn: ``loss_fn(model(inputs), targets)`` for ``(inputs, targets)`` batches (default
            cross entropy).
        batch_loss: ``batch_loss(model, batch)`` returning the loss, for any other batch (a dict, a
            detection batch); it replaces ``loss_fn``.
        epochs: passes over the data per run.
        depth: batches the prefetching modes keep ready.
        repeats: runs per mode.
        progress: told each step as it begins (the pre-save, then each run: ``1 + 3 * repeats``
            steps) and each batch trained on or pre-saved; ``trainperf bench`` says it on standard
            error.

    Raises:
        ValueError: a batch is not an ``(inputs, targets)`` pair and no ``batch_loss`` was given.
    """
    import torch

    from ._prefetch import prefetch
    from ._presave import load_presaved, presave

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if batch_loss is not None and not callable(batch_loss):
        raise TypeError(f"batch_loss must be callable as batch_loss(model, batch), got {batch_loss!r}")
    step_loss = batch_loss or _pair_loss(loss_fn or torch.nn.functional.cross_entropy)
    runs: dict[str, list[tuple[float, float, int, int]]] = {"as given": [], "prefetch": [], "pre-saved": []}
    advance: Callable[[], None] = progress.advance if progress is not None else _nothing
    batches: int | None = None  # per pass, once the pre-save has counted them

    def run(mode: str, source: Iterable[Any], number: int) -> None:
        if progress is not None:
            progress.step(f"{mode}, run {number} of {repeats}", expected=batches * epochs if batches else None)
        torch.manual_seed(0)
        runs[mode].append(_train(make_model(), source, step_loss, epochs, advance))

    with warnings.catch_warnings(), tempfile.TemporaryDirectory(prefix="trainperf-bench-") as folder:
        warnings.simplefilter("ignore")
        if progress is not None:
            progress.step("pre-saving the batches once")
        started = time.perf_counter()
        presave(_counted(make_loader(), advance), folder)
        prepare = time.perf_counter() - started
        batches = progress.count if progress is not None else None
        for number in range(1, repeats + 1):
            run("as given", make_loader(), number)
            run("prefetch", prefetch(make_loader(), depth), number)
            run("pre-saved", prefetch(load_presaved(folder), depth), number)
    return [_result(mode, found, prepare if mode == "pre-saved" else 0.0) for mode, found in runs.items()]


def _nothing() -> None:
    return None


def _counted(batches: Iterable[Any], advance: Callable[[], None]) -> Iterator[Any]:
    """``batches``, with ``advance`` called after each one has been handed over."""
    for batch in batches:
        yield batch
        advance()


def _result(mode: str, found: list[tuple[float, float, int, int]], prepare_s: float) -> BenchResult:
    ordered = sorted(found, key=lambda run: run[1])
    wait, total, count, samples = ordered[(len(ordered) - 1) // 2]  # the median run (the lower of two)
    return BenchResult(mode, count, wait, max(0.0, total - wait), total,
                       samples / total if total > 0 and samples else None, prepare_s, len(found),
                       ordered[0][1], ordered[-1][1])


def compare(base: BenchResult, other: BenchResult) -> str:
    """How ``other`` compares with ``base`` per pass: ``1.60x faster than as given per pass``, ``1.64x
    slower ...``; said to be within the spread when their runs' ranges overlap."""
    if other.total_s <= 0 or base.total_s <= 0:
        return "not measured"
    ratio = base.total_s / other.total_s
    words = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
    words += f" than {base.mode} per pass"
    if other.runs > 1 and other.total_min_s <= base.total_max_s and base.total_min_s <= other.total_max_s:
        words += ", within the spread of the runs"
    return words


def format_bench(results: list[BenchResult]) -> str:
    runs = max((r.runs for r in results), default=1)
    head = (f"{'mode':<10} {'batches':>7} {'ETL wait s':>10} {'compute s':>10} {'total s':>8} "
            f"{'spread s':>15} {'samples/s':>10} {'prepare s':>9}")
    lines = [f"median of {runs} run{'s' if runs != 1 else ''} per mode (spread: the fastest and slowest total)",
             head, "-" * len(head)]
    for r in results:
        rate = f"{r.samples_per_sec:10.1f}" if r.samples_per_sec else f"{'-':>10}"
        spread = f"{r.total_min_s:.3f}-{r.total_max_s:.3f}"
        lines.append(f"{r.mode:<10} {r.batches:>7} {r.etl_s:>10.3f} {r.compute_s:>10.3f} {r.total_s:>8.3f} "
                     f"{spread:>15} {rate} {r.prepare_s:>9.3f}")
    for r in results[1:]:
        lines.append(f"{r.mode}: {compare(results[0], r)}")
    return "\n".join(lines)
