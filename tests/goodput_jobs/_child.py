"""What every job's child shares: the stopwatch of what was injected, the slow collate, the sleepy
pickles, and the kill. Imported by the child scripts (their folder is on ``sys.path`` when they run,
also when Lightning's DDP launcher runs a script again for rank 1); it imports no torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

STARTUP_S = 3.0  # slept before torch is imported
EVAL_S, SAVE_S, LOAD_S = 1.0, 2.0, 0.7
SLOW_S = 0.020
SLOW = range(121, 171)  # the iterations whose batch takes SLOW_S to load
EVAL_EVERY, SAVE_EVERY, KILL_AT, RESUME_AT, LAST = 50, 100, 250, 200, 300
FREQUENCY = 10


def attempt() -> int:
    return int(os.environ["GPJOB_ATTEMPT"])


def run_dir() -> str:
    return os.environ["GPJOB_RUN_DIR"]


def work_dir() -> str:
    return os.environ["GPJOB_WORK"]


class Stopwatch:
    """``time.time()`` around everything injected, written as JSON (atomically) at the end or the kill."""

    def __init__(self) -> None:
        popen = os.environ.get("GPJOB_POPEN_AT")
        self.data: dict[str, object] = {
            "popen": float(popen) if popen else None, "attempt": attempt(), "pid": os.getpid(),
            "eval": [], "save": [], "load": [], "fetch": [], "train_start": None, "killed": None, "end": None,
        }

    def add(self, kind: str, began: float, ended: float) -> None:
        self.data[kind].append(ended - began)  # type: ignore[union-attr]

    def mark(self, what: str) -> None:
        if self.data[what] is None:
            self.data[what] = time.time()

    def write(self, rank: int) -> None:
        path = os.path.join(work_dir(), f"stopwatch-{attempt()}-{rank}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(self.data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)


WATCH = Stopwatch()


def start_up() -> None:
    """The injected start-up, before torch is imported."""
    time.sleep(STARTUP_S)


def stamp_launches() -> None:
    """Processes this one starts (a launcher's ranks) are told when they were started, in ``GPJOB_POPEN_AT``."""
    original = subprocess.Popen

    class Stamped(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            env = dict(kwargs.get("env") or os.environ)
            env["GPJOB_POPEN_AT"] = repr(time.time())
            kwargs["env"] = env
            super().__init__(*args, **kwargs)

    subprocess.Popen = Stamped  # type: ignore[misc]


class SlowBatches:
    """A map-style dataset of whole batches (a loader with ``batch_size=None``): fetching the batch of an
    iteration in :data:`SLOW` takes :data:`SLOW_S` more. Fetches are counted from the iteration the
    attempt starts at."""

    def __init__(self, first_iteration: int, batches: int, rows: int = 8, width: int = 32) -> None:
        import torch

        self.fetched = first_iteration
        self.x, self.y = torch.randn(batches, rows, width), torch.randn(batches, rows, 1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        self.fetched += 1
        if self.fetched in SLOW:
            time.sleep(SLOW_S)
        return self.x[index], self.y[index]


def loader(dataset):
    """A ``DataLoader`` of whole batches that marks the stopwatch's training start where the training
    loop makes its first iterator (where the adapters start the listener), and times each batch fetch."""
    import torch

    class FirstIter(torch.utils.data.DataLoader):
        def __iter__(self):
            WATCH.mark("train_start")
            return _timed(super().__iter__())

    return FirstIter(dataset, batch_size=None, num_workers=0)


def _timed(iterator):
    while True:
        began = time.time()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        WATCH.add("fetch", began, time.time())
        yield batch


def _slept_load() -> str:
    time.sleep(LOAD_S)
    return "loaded"


class SleepyPickle:
    """Pickling it takes :data:`SAVE_S`, unpickling it :data:`LOAD_S`: a checkpoint that is slow to write and read."""

    def __reduce__(self):
        time.sleep(SAVE_S)
        return (_slept_load, ())


def kill_self(rank: int) -> None:
    """Write the stopwatch and die as a killed process does (no clean-up)."""
    WATCH.mark("killed")
    WATCH.write(rank)
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
