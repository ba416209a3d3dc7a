"""What the sinks cost: each sink's work per record against a hand-written equivalent, and what the
training thread of an ``attach`` loop at frequency 1 pays with sinks against without, in one run.

* ``per record``: each sink (``LoggingSink`` to a file handler, ``JsonLinesSink``, ``CsvSink``,
  ``RunDirSink``'s window lines, ``TensorBoardSink`` where tensorboard is installed) against the code
  a user would write for the same output (one f-string and ``logger.info``; ``json.dumps`` of the
  record's fields; ``csv.writer``; ``add_scalar`` for each figure, flushed at the end), fed the same
  records, each written and flushed one at a time; the hand-written output is checked to be the
  sink's, byte for byte (TensorBoard's event files aside). The sinks are also timed as the writer
  thread drives them (a batch of the records queued at once), which is their cost in a run.
* ``attach loop``: a small MLP trained under :func:`trainperf.torch.attach` at frequency 1, bare,
  with a listener and no sink, and with a logging and a JSON-lines sink (on the writer thread, and
  inline for reference). The timed stretch ends when every record is written (``flush``), so work
  the writer left for later is counted. Two loaders: one in memory (the training thread runs Python
  but for torch's kernels), and one that waits 1 ms for each batch (as for worker processes), in
  which the writer can work while the training thread does not hold the interpreter; on a machine
  with CUDA, also a GPU loop that reads its loss each step (the training thread waits for the device).
* ``slow sink``: 1 ms steps reporting every 10 iterations to a sink that takes 20 ms, against the
  same loop with no listener.
* ``trackers`` (where ``wandb`` and ``mlflow`` are installed): the attach loop (loader in memory, at
  frequency 10 and 1) with a ``WandbSink`` (an offline run), with an ``MlflowSink`` (a local file
  store) and with a tracker whose every call hangs for 50 ms, each alone, against it with a listener
  and no sink: what the training thread pays (the timed stretch ends with the loop; what the writer
  still holds is written after it). Then each tracker's time per record as the writer drives it.

Targets: each sink at most 1.2x its hand-written equivalent; the attach loop's cost with the two
sinks at most 1.5x its cost with none; the slow sink not slowing the loop; with a tracker's sink, the
training thread's cost that of no sink, within noise, hanging tracker included.
Rounds alternate between the variants; the median round counts.

Run: ``python benchmarks/sink_thread.py [--quick]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import platform
import random
import statistics
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from trainperf import GCStat, PerformanceListener, PerformanceRecord, Verdict
from trainperf.sinks import CsvSink, JsonLinesSink, LoggingSink, RunDirSink
from trainperf.torch import attach, timed

torch.set_num_threads(1)


def records(n: int, seed: int = 0) -> list[PerformanceRecord]:
    """``n`` records as a listener writes them at frequency 1 on the CPU (the fields it fills)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        it = rng.uniform(0.2, 3.0)
        etl = rng.uniform(0.0, 0.5)
        out.append(PerformanceRecord(
            iteration=i + 1, window_iterations=1, window_s=it / 1e3, warmup=False, timestamp=1.8e9 + i * it / 1e3,
            etl_ms=etl, etl_max_ms=etl, iteration_ms=it, iteration_p50_ms=it, iteration_p95_ms=it,
            iteration_max_ms=it, samples_per_sec=32e3 / it, batches_per_sec=1e3 / it, score=rng.uniform(0.1, 1.0),
            gc=(GCStat("gen0", rng.randint(0, 1), rng.random() / 10),) if rng.random() < 0.1 else (),
            host="node-1", pid=4242, epoch=i // 500, samples=32, batches=1, etl_total_ms=etl,
            compute_ms=it - etl, other_ms=0.0, optimizer_steps=1, etl_source="loader",
            overhead_ms=rng.uniform(0.02, 0.08), first_iteration=i + 1, speedup_if_data_free=it / (it - etl),
            speedup_if_gc_free=1.0, cpu_pct=rng.uniform(90, 110), rss_mb=rng.uniform(400, 410),
            verdict=Verdict("fine", etl / it * 100, f"data wait {etl / it * 100:.0f}%, GC 0% of step"),
        ))
    return out


# --- per record ------------------------------------------------------------------------------------

def hand_line(r: PerformanceRecord) -> str:
    """The line a user would write with one f-string, for the records above (their fields, their order)."""
    gc = "".join(f"GC: [{s.name}: {s.count} ({s.ms:.2f}ms)]; " for s in r.gc)
    v = r.verdict
    assert v is not None
    return (f"ETL: {r.etl_ms:.2f} ms; iteration {r.iteration}; iteration time: {r.iteration_ms:.2f} ms; "
            f"samples/sec: {r.samples_per_sec:.1f}; batches/sec: {r.batches_per_sec:.1f}; score: {r.score:.3g}; "
            f"{gc}iteration p50: {r.iteration_p50_ms:.2f} ms; p95: {r.iteration_p95_ms:.2f} ms; "
            f"max: {r.iteration_max_ms:.2f} ms; ETL max: {r.etl_max_ms:.2f} ms; "
            f"free data: {r.speedup_if_data_free:.2f}x faster; epoch: {r.epoch}; "
            f"verdict: {v.kind} ({v.share:.0f}% at most: {v.reason});")


_SCALARS = [name for name in PerformanceRecord.__dataclass_fields__ if name not in ("gc", "verdict", "extra")]


def hand_json(r: PerformanceRecord) -> str:
    """``json.dumps`` of the record's fields, as a user would write it."""
    data = {name: getattr(r, name) for name in _SCALARS}
    data["gc"] = {s.name: {"count": s.count, "ms": s.ms} for s in r.gc}
    v = r.verdict
    data["verdict"] = {"kind": v.kind, "share": v.share, "reason": v.reason} if v is not None else None
    data["extra"] = dict(r.extra)
    ordered = {name: data[name] for name in PerformanceRecord.__dataclass_fields__}
    return json.dumps(ordered, separators=(",", ":"), allow_nan=False) + "\n"


def _csv_cell(value: Any) -> Any:
    return "" if value is None else value


def file_logger(path: Path, name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    for handler in logger.handlers:
        handler.close()
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s - %(message)s"))
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


class Case:
    """One sink and its hand-written equivalent, each writing ``records`` to a file of its own."""

    def __init__(self, name: str, sink: Callable[[Path], Any], hand: Callable[[Path], tuple[Callable[..., None], Any]],
                 read: Callable[[Path], str]) -> None:
        self.name, self.sink, self.hand, self.read = name, sink, hand, read

    def time_sink(self, folder: Path, recs: Sequence[PerformanceRecord], batch: bool) -> float:
        sink = self.sink(folder / f"{self.name}-sink")
        write_many = getattr(sink, "write_many", None) if batch else None
        began = time.perf_counter()
        if write_many is not None:
            for start in range(0, len(recs), 16):
                write_many(recs[start:start + 16])
        else:
            for r in recs:
                sink(r)
        took = time.perf_counter() - began
        close = getattr(sink, "close", None)
        if close is not None:
            close()
        return took / len(recs)

    def time_hand(self, folder: Path, recs: Sequence[PerformanceRecord]) -> float:
        write, done = self.hand(folder / f"{self.name}-hand")
        began = time.perf_counter()
        for r in recs:
            write(r)
        took = time.perf_counter() - began
        done()
        return took / len(recs)

    def same_output(self, folder: Path) -> bool:
        return self.read(folder / f"{self.name}-sink") == self.read(folder / f"{self.name}-hand")


def _hand_logging(path: Path) -> tuple[Callable[..., None], Any]:
    logger = file_logger(path, "bench.hand")
    info = logger.info
    return (lambda r: info(hand_line(r))), (lambda: logger.handlers[0].close())


def _hand_jsonl(path: Path) -> tuple[Callable[..., None], Any]:
    file = open(path, "w", encoding="utf-8")  # noqa: SIM115

    def write(r: PerformanceRecord) -> None:
        file.write(hand_json(r))
        file.flush()
    return write, file.close


def _hand_csv(path: Path) -> tuple[Callable[..., None], Any]:
    from trainperf.sinks import CSV_COLUMNS

    file = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115
    writer = csv.writer(file)
    columns = [*CSV_COLUMNS, "gc.gen0.count", "gc.gen0.ms"]
    writer.writerow(columns)
    scalars = [c for c in CSV_COLUMNS if c not in ("verdict", "verdict_pct")]

    def write(r: PerformanceRecord) -> None:
        row = {name: getattr(r, name) for name in scalars}
        v = r.verdict
        row["verdict"], row["verdict_pct"] = (v.kind, v.share) if v is not None else (None, None)
        for s in r.gc:
            row[f"gc.{s.name}.count"], row[f"gc.{s.name}.ms"] = s.count, s.ms
        writer.writerow([_csv_cell(row.get(c)) for c in columns])
        file.flush()
    return write, file.close


def _logged_lines(path: Path) -> str:
    return "\n".join(line.split(" - ", 1)[1] for line in path.read_text().splitlines())


def _csv_body(path: Path) -> str:
    return path.read_text().split("\n", 1)[1]


def _run_dir_windows(path: Path) -> str:
    return (path / "rank-0" / "windows.jsonl").read_text()


def _tensorboard(path: Path) -> Any:
    from trainperf.sinks import TensorBoardSink

    return TensorBoardSink(path)


def _hand_tensorboard(path: Path) -> tuple[Callable[..., None], Any]:
    from torch.utils.tensorboard import SummaryWriter

    from trainperf.sinks import scalar_metrics

    writer = SummaryWriter(log_dir=path)

    def write(r: PerformanceRecord) -> None:
        for tag, value in scalar_metrics(r).items():
            writer.add_scalar(tag, value, global_step=r.iteration, walltime=r.timestamp)
    return write, writer.close  # flushed at the end only: what a hand-written loop does


def _has_tensorboard() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def cases() -> list[Case]:
    return [
        Case("logging", lambda p: LoggingSink(file_logger(p, "bench.sink")), _hand_logging, _logged_lines),
        Case("jsonl", lambda p: JsonLinesSink(p, append=False), _hand_jsonl, lambda p: p.read_text()),
        Case("csv", lambda p: CsvSink(p, append=False), _hand_csv, _csv_body),
        Case("rundir", lambda p: RunDirSink(p, rank=0), _hand_jsonl, _run_dir_windows),
        *([Case("tensorboard", _tensorboard, _hand_tensorboard, lambda p: "")] if _has_tensorboard() else []),
    ]


def per_record(folder: Path, rounds: int, n: int) -> None:
    recs = records(n)
    # every record has the one collector column the hand-written CSV has, so both tables match
    recs = [r if r.gc else PerformanceRecord.from_dict({**r.to_dict(), "gc": {"gen0": {"count": 0, "ms": 0.0}}})
            for r in recs]
    for case in cases():
        took: dict[str, list[float]] = {"sink": [], "batched": [], "hand": []}
        fed = recs[: len(recs) // 10] if case.name == "tensorboard" else recs  # 2 ms a record
        for k in range(rounds):
            sub = folder / f"{case.name}-{k}"
            sub.mkdir()
            took["hand"].append(case.time_hand(sub, fed))
            took["sink"].append(case.time_sink(sub, fed, batch=False))
            if case.name not in ("rundir", "tensorboard") and not case.same_output(sub):
                raise SystemExit(f"{case.name}: the hand-written output differs from the sink's")
            took["batched"].append(case.time_sink(sub, fed, batch=True))
        hand, sink, batched = (statistics.median(took[k]) * 1e6 for k in ("hand", "sink", "batched"))
        print(f"per record  {case.name:11s} sink {sink:6.1f} us, as the writer drives it {batched:6.1f} us, "
              f"hand-written {hand:6.1f} us: {sink / hand:.2f}x / {batched / hand:.2f}x (target <= 1.2x)")


# --- the attach loop -------------------------------------------------------------------------------

class WaitingLoader:
    """Batches from memory, each after ``wait_s`` in which the training thread does not hold the
    interpreter (as when it waits on a DataLoader's worker processes)."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], wait_s: float) -> None:
        self.batches, self.wait_s = batches, wait_s

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for batch in self.batches:
            if self.wait_s:
                time.sleep(self.wait_s)
            yield batch


def attach_loop(variant: str, folder: Path, n: int, wait_s: float, device: str = "cpu",
                tracker: Callable[[], Any] | None = None, flush: bool = True, frequency: int = 1) -> float:
    torch.manual_seed(0)
    width = 2048 if device == "cuda" else 64  # on the GPU, a step the device takes a while over
    model = torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = 512 if device == "cuda" else 16
    data = [(torch.randn(batch, 32), torch.randint(0, 4, (batch,))) for _ in range(n)]
    loader = WaitingLoader(data, wait_s)
    listener = None
    if variant != "bare":
        sinks: list[Any] = []
        if variant in ("sinks", "inline"):
            sinks = [LoggingSink(file_logger(folder / f"{variant}.log", f"bench.loop.{variant}")),
                     JsonLinesSink(folder / f"{variant}.jsonl", append=False)]
        if tracker is not None:
            sinks = [tracker()]
        listener = PerformanceListener(frequency, sinks=sinks, sink_thread=variant != "inline")
        attach(model, listener)
        loader = timed(loader, model)  # type: ignore[assignment]
    loss_fn = torch.nn.CrossEntropyLoss()
    began = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if device == "cuda":
            loss.item()  # the loss read each step: the training thread waits for the device
    if listener is not None and flush:
        listener.flush()
    took = time.perf_counter() - began
    if listener is not None:
        HangingRun.released.set()  # a hanging tracker answers again: closing does not wait for it
        listener.close()
        HangingRun.released.clear()
    return took


def loop_costs(folder: Path, rounds: int, n: int) -> None:
    loops = [(0.0, "cpu", "loader in memory"), (0.001, "cpu", "loader waits 1 ms")]
    if torch.cuda.is_available():
        loops.append((0.0, "cuda", f"on {torch.cuda.get_device_name()}, the loss read each step"))
    for wait_s, device, how in loops:
        took: dict[str, list[float]] = {v: [] for v in ("bare", "none", "sinks", "inline")}
        for _ in range(rounds):
            for variant in took:
                took[variant].append(attach_loop(variant, folder, n, wait_s, device))
        bare = statistics.median(took["bare"])
        cost = {v: (statistics.median(took[v]) - bare) / n * 1e6 for v in ("none", "sinks", "inline")}
        print(f"attach loop, frequency 1, {how}: bare {bare / n * 1e6:.0f} us an iteration; the training thread "
              f"pays {cost['none']:.0f} us with no sink, {cost['sinks']:.0f} us with logging + JSON lines "
              f"({cost['sinks'] / cost['none']:.2f}x, target <= 1.5x), {cost['inline']:.0f} us with them inline")


# --- a slow sink -----------------------------------------------------------------------------------

def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def slow_sink_loop(listener: PerformanceListener | None, steps: int) -> float:
    began = time.perf_counter()
    for _ in range(steps):
        spin(0.001)
        if listener is not None:
            listener.record_iteration(samples=8)
    return time.perf_counter() - began


def slow(record: object) -> None:
    time.sleep(0.020)


def slow_sink(rounds: int, steps: int) -> None:
    loops: dict[str, list[float]] = {"bare": [], "inline": [], "thread": []}
    for _ in range(rounds):
        loops["bare"].append(slow_sink_loop(None, steps))
        for name, threaded in (("inline", False), ("thread", True)):
            listener = PerformanceListener(10, sinks=[slow], sink_thread=threaded, report_hardware=False)
            loops[name].append(slow_sink_loop(listener, steps))
            listener.close()
    bare = statistics.median(loops["bare"])
    for name in ("inline", "thread"):
        took = statistics.median(loops[name])
        print(f"1 ms steps, a 20 ms sink every 10: {name:6s} {took:.3f} s against {bare:.3f} s bare "
              f"({took / bare:.2f}x)")


# --- trackers --------------------------------------------------------------------------------------

class HangingRun:
    """A W&B run whose every call takes 50 ms (a tracker's server that has stopped answering), until
    ``released``."""

    summary: dict[str, Any] = {}
    step = 0
    released = threading.Event()

    def log(self, data: dict[str, float], commit: bool | None = None) -> None:
        if not self.released.is_set():
            time.sleep(0.05)

    def define_metric(self, *args: Any, **kwargs: Any) -> None:
        pass


def tracker_costs(folder: Path, rounds: int, n: int) -> None:
    try:
        import mlflow
        import wandb
    except ImportError:
        print("trackers: wandb and mlflow are not installed (pip install 'trainperf[wandb,mlflow]')")
        return
    import os

    from trainperf.sinks import MlflowSink, WandbSink

    os.environ.update(WANDB_SILENT="true", MLFLOW_ALLOW_FILE_STORE="true")
    run = wandb.init(project="bench", dir=str(folder), mode="offline")
    mlflow.set_tracking_uri((folder / "mlruns").as_uri())
    mlflow.start_run()
    trackers: dict[str, Callable[[], Any] | None] = {
        "none": None, "wandb": WandbSink, "mlflow": MlflowSink, "hanging": lambda: WandbSink(HangingRun())}
    for frequency, wait_s in ((10, 0.0), (10, 0.001), (1, 0.0)):
        took: dict[str, list[float]] = {v: [] for v in ("bare", *trackers)}
        for _ in range(rounds):
            took["bare"].append(attach_loop("bare", folder, n, wait_s))
            for name, make in trackers.items():
                # what the training thread pays: the timed stretch ends with the loop, and the records the
                # writer still holds are written after it (a tracker's writes are the writer's time)
                took[name].append(attach_loop("tracker" if make else "none", folder, n, wait_s, tracker=make,
                                              flush=False, frequency=frequency))
        bare = statistics.median(took["bare"])
        cost = {v: (statistics.median(took[v]) - bare) / n * 1e6 for v in trackers}
        spread = {v: (max(took[v]) - min(took[v])) / n * 1e6 for v in trackers}
        how = "loader waits 1 ms" if wait_s else "loader in memory"
        print(f"attach loop, frequency {frequency}, {how}, trackers: bare {bare / n * 1e6:.0f} us an iteration; the "
              "training thread pays " + ", ".join(f"{cost[v]:.0f} us (rounds spread {spread[v]:.0f} us) with {v}"
                                                  for v in trackers))
    from trainperf.sinks import scalar_metrics

    recs = records(300)
    hand = {"wandb": lambda r: run.log(scalar_metrics(r)),
            "mlflow": lambda r: mlflow.log_metrics(scalar_metrics(r), step=r.iteration)}
    for name, make in (("wandb", WandbSink), ("mlflow", MlflowSink)):
        sink = make()
        began, cpu = time.perf_counter(), time.thread_time()
        for start in range(0, len(recs), 4):
            sink.write_many(recs[start:start + 4])
        wall, cpu = (time.perf_counter() - began) / len(recs) * 1e6, (time.thread_time() - cpu) / len(recs) * 1e6
        sink.close()
        began, hand_cpu = time.perf_counter(), time.thread_time()
        for r in recs:
            hand[name](r)
        hand_wall = (time.perf_counter() - began) / len(recs) * 1e6
        hand_cpu = (time.thread_time() - hand_cpu) / len(recs) * 1e6
        print(f"per record  {name:11s} as the writer drives it (4 at once) {wall:.0f} us ({cpu:.0f} us of CPU), "
              f"hand-written {hand_wall:.0f} us ({hand_cpu:.0f} us of CPU): {cpu / hand_cpu:.2f}x of CPU")
    mlflow.end_run()
    run.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the loops' verdicts are not what is measured
    logging.getLogger("trainperf").setLevel(logging.ERROR)
    rounds, n, iterations, steps = (3, 1000, 300, 100) if args.quick else (7, 4000, 1000, 300)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        per_record(Path(tmp), rounds, n)
        loop_costs(Path(tmp), rounds, iterations)
        tracker_costs(Path(tmp), rounds, iterations)
    slow_sink(rounds, steps)


if __name__ == "__main__":
    main()
