"""An out-of-memory error leaves its evidence under every adapter (a fake CUDA allocator on the CPU, and
real ``MemoryError``s), the error itself goes on unchanged, a disk that refuses is said, and the
allocator's history is recorded from the start, once memory runs short, or never."""

from __future__ import annotations

import functools
import gc
import json
import linecache
import logging
import os
import pickle
import re
import sys
import warnings

import pytest
import torch

from _fake_cuda_oom import FakeAllocator
from trainperf import PerformanceListener
from trainperf.torch import ListenerModule, _oom, _oom_sites, attach, timed

BIG = (4096, 1024)  # a float32 tensor of 16 MiB, larger than anything else a test keeps alive


@pytest.fixture(autouse=True)
def _collected():
    """The tensors an earlier test's tracebacks kept in reference cycles are gone: the largest live tensor
    is the one each test keeps."""
    gc.collect()


def folders(root):
    return sorted(p for p in root.iterdir() if p.name.startswith("oom-")) if root.exists() else []


def evidence_of(folder):
    return json.loads((folder / "evidence.json").read_text())


class Net(torch.nn.Module):
    """Fails in its forward pass at iteration ``fail_at`` with ``fail()``."""

    def __init__(self, fail, fail_at=3):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.fail, self.fail_at, self.calls = fail, fail_at, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == self.fail_at:
            self.fail()
        return self.layer(x)


def batches(n=6):
    return [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(n)]


def run_attach(listener, fail, fail_at=3):
    model = Net(fail, fail_at)
    attach(model, listener)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def run_timed(listener, fail, fail_at=3):
    model = Net(fail, fail_at)
    attach(model, listener)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in timed(batches(), model):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


class FitNet(ListenerModule, Net):
    pass


def run_fit(listener, fail, fail_at=3):
    model = FitNet(fail, fail_at)
    model.set_listeners(listener)
    model.fit(batches(), torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.functional.mse_loss)


def raising(error):
    def fail():
        raise error
    return fail


def check_cuda_folder(folder, raised, iteration=2):
    snapshot = pickle.loads((folder / "snapshot.pickle").read_bytes())
    assert {"segments", "device_traces"} <= set(snapshot)
    evidence = evidence_of(folder)
    assert evidence["kind"] == "cuda" and evidence["iteration"] == iteration
    assert evidence["exception"]["type"] == "torch.OutOfMemoryError" and evidence["exception"]["raised"]
    assert evidence["exception"]["message"] == str(raised)
    assert "raise torch.OutOfMemoryError" in evidence["exception"]["traceback"]
    assert evidence["at_oom"] == {"device": 0, "requested_bytes": 2 * 2**30, "device_allocated_bytes": 1400 * 2**20,
                                  "device_free_bytes": 10 * 2**20}
    assert evidence["last_record"]["iteration"] == iteration
    assert evidence["history"]["recorded"] and evidence["history"]["since"]["iteration"] == 0
    assert evidence["snapshot"] == "snapshot.pickle"
    top = evidence["largest_sites"][0]
    assert top["site"].endswith("_fake_cuda_oom.py:20") and top["bytes"] == 1200 * 2**20 and top["blocks"] == 2
    assert top["share"] == pytest.approx(1200 / 1400) and top["function"] == "forward"
    assert top["code"] == linecache.getline(top["site"].rsplit(":", 1)[0], 20).strip()


@pytest.mark.parametrize("adapter", [run_attach, run_timed, run_fit])
def test_a_cuda_oom_leaves_a_complete_folder_ten_times_in_ten_and_the_same_error_reaches_the_loop(
        adapter, monkeypatch, tmp_path):
    allocator = FakeAllocator(monkeypatch)
    for n in range(10):
        run_dir = tmp_path / f"run{n}"
        listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=run_dir, memory_history="start")
        with pytest.raises(torch.OutOfMemoryError) as caught:
            adapter(listener, allocator.oom)
        listener.close()
        found = folders(run_dir / "rank-0")
        assert len(found) == 1
        check_cuda_folder(found[0], caught.value)
        assert caught.value.__traceback__ is not None
    assert allocator.snapshots == 10 and len(allocator.observers) == 1  # attached once per process


def test_the_error_reaching_the_loop_is_the_object_raised_with_its_traceback(monkeypatch, tmp_path):
    FakeAllocator(monkeypatch)
    error = MemoryError("no more")
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    with pytest.raises(MemoryError) as caught:
        run_attach(listener, raising(error))
    assert caught.value is error
    names = [frame.name for frame in __import__("traceback").extract_tb(caught.value.__traceback__)]
    assert names[-1] == "fail" and "forward" in names
    listener.close()


def test_without_a_run_directory_the_evidence_goes_to_trainperf_oom_in_the_working_directory(
        monkeypatch, tmp_path, caplog):
    allocator = FakeAllocator(monkeypatch)
    monkeypatch.chdir(tmp_path)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, memory_history="start")
    with caplog.at_level(logging.WARNING, logger="trainperf"), pytest.raises(torch.OutOfMemoryError):
        run_attach(listener, allocator.oom)
    listener.close()
    [folder] = folders(tmp_path / "trainperf-oom")
    lines = [r.getMessage() for r in caplog.records if "out of memory" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith(f"trainperf: out of memory at iteration 2; evidence in {folder}/: 86% of live memory")
    assert "allocated at _fake_cuda_oom.py:20" in lines[0] and "2 blocks" in lines[0]


def test_lightning_callback_leaves_the_evidence_of_a_cuda_oom_ten_times_in_ten(monkeypatch, tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from trainperf.lightning import PerformanceCallback

    allocator = FakeAllocator(monkeypatch)

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                allocator.oom()
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for n in range(10):
        callback = PerformanceCallback(1, sinks=[], run_dir=tmp_path / f"run{n}", memory_history="start")
        trainer = L.Trainer(callbacks=[callback], enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=False, logger=False, default_root_dir=tmp_path, accelerator="cpu",
                            devices=1, max_steps=6)
        with warnings.catch_warnings(), pytest.raises(torch.OutOfMemoryError) as caught:
            warnings.simplefilter("ignore")
            trainer.fit(Model(), torch.utils.data.DataLoader(batches(), batch_size=None))
        [folder] = folders(tmp_path / f"run{n}" / "rank-0")
        check_cuda_folder(folder, caught.value)


def _tiny_trainer(tmp_path, callback, fail):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 24

        def __getitem__(self, i):
            ids = torch.randint(1, 64, (8,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1,
                                                                 n_head=2))
    forward, calls = model.forward, []

    @functools.wraps(forward)  # the Trainer keeps the columns the forward's signature names
    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            fail()
        return forward(*args, **kwargs)

    model.forward = failing
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                                          max_steps=6, report_to=[], save_strategy="no", use_cpu=True,
                                          dataloader_num_workers=0, disable_tqdm=True)
    return transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=[callback])


def test_the_trainer_callback_leaves_the_evidence_of_a_cuda_oom(monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    from trainperf.transformers import PerformanceCallback

    allocator = FakeAllocator(monkeypatch)
    for n in range(10):
        callback = PerformanceCallback(1, sinks=[], run_dir=tmp_path / f"run{n}", memory_history="start")
        trainer = _tiny_trainer(tmp_path, callback, allocator.oom)
        with warnings.catch_warnings(), pytest.raises(torch.OutOfMemoryError) as caught:
            warnings.simplefilter("ignore")
            trainer.train()
        callback.close()
        [folder] = folders(tmp_path / f"run{n}" / "rank-0")
        check_cuda_folder(folder, caught.value)


# -- MemoryError on the CPU -----------------------------------------------------------------------

def check_cpu_folder(root, error, kept):
    [folder] = folders(root)
    assert not (folder / "snapshot.pickle").exists()
    evidence = evidence_of(folder)
    assert evidence["kind"] == "cpu" and evidence["iteration"] == 2
    assert evidence["exception"]["type"] == "builtins.MemoryError"
    assert evidence["exception"]["message"] == str(error) and evidence["exception"]["raised"]
    assert evidence["last_record"]["iteration"] == 2
    assert set(evidence["at_oom"]) == {"rss_bytes", "peak_rss_bytes"} and evidence["at_oom"]["peak_rss_bytes"] > 0
    top = evidence["largest_sites"][0]
    assert (top["shape"], top["dtype"], top["bytes"]) == (list(kept.shape), "float32", kept.nbytes)
    assert evidence["history"]["recorded"] is False
    return evidence


@pytest.mark.parametrize("adapter", [run_attach, run_timed, run_fit])
def test_a_memory_error_in_a_step_leaves_the_last_record_and_the_largest_live_tensor_first(adapter, tmp_path):
    kept = torch.ones(*BIG)
    error = MemoryError("cannot allocate 8 GB")
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    with pytest.raises(MemoryError) as caught:
        adapter(listener, raising(error))
    listener.close()
    assert caught.value is error
    check_cpu_folder(tmp_path / "rank-0", error, kept)


def test_a_memory_error_in_the_loaders_fetch_under_timed_leaves_its_evidence(tmp_path):
    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            if i == 2:
                raise MemoryError("cannot collate")
            return torch.randn(2, 4), torch.randn(2, 1)

    kept = torch.ones(*BIG)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    model = torch.nn.Linear(4, 1)
    attach(model, listener)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(MemoryError, match="cannot collate") as caught:
        for x, y in timed(torch.utils.data.DataLoader(Data(), batch_size=None), model):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    listener.close()
    check_cpu_folder(tmp_path / "rank-0", caught.value, kept)


def test_lightning_callback_leaves_the_evidence_of_a_memory_error(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from trainperf.lightning import PerformanceCallback

    kept = torch.ones(*BIG)
    error = MemoryError("cannot allocate")

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise error
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    callback = PerformanceCallback(1, sinks=[], run_dir=tmp_path)
    trainer = L.Trainer(callbacks=[callback], enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, logger=False, default_root_dir=tmp_path, accelerator="cpu",
                        devices=1, max_steps=6)
    with warnings.catch_warnings(), pytest.raises(MemoryError) as caught:
        warnings.simplefilter("ignore")
        trainer.fit(Model(), torch.utils.data.DataLoader(batches(), batch_size=None))
    assert caught.value is error
    check_cpu_folder(tmp_path / "rank-0", error, kept)


def test_the_trainer_callback_leaves_the_evidence_of_a_memory_error(tmp_path):
    pytest.importorskip("transformers")
    from trainperf.transformers import PerformanceCallback

    kept = torch.ones(*BIG)
    error = MemoryError("cannot allocate")
    callback = PerformanceCallback(1, sinks=[], run_dir=tmp_path)
    trainer = _tiny_trainer(tmp_path, callback, raising(error))
    with warnings.catch_warnings(), pytest.raises(MemoryError) as caught:
        warnings.simplefilter("ignore")
        trainer.train()
    callback.close()
    assert caught.value is error
    check_cpu_folder(tmp_path / "rank-0", error, kept)


def test_a_memory_error_nobody_caught_reaches_the_chained_excepthook(tmp_path, monkeypatch):
    """Outside every adapter's frames (here, after the step): the excepthook writes it, then calls the
    hook that was there before."""
    before = []
    monkeypatch.setattr(_oom, "_watches", [])  # no training left watched by an earlier test
    monkeypatch.setattr(_oom, "_hooked", None)
    monkeypatch.setattr(sys, "excepthook", lambda *a: before.append(a))
    kept = torch.ones(*BIG)
    older = _oom.OomWatch(PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path / "older"), None)
    older.start()  # an older training still watched: the newest one writes
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    with pytest.raises(MemoryError) as caught:
        run_attach(listener, lambda: None)
        raise MemoryError("after the loop")
    sys.excepthook(MemoryError, caught.value, caught.value.__traceback__)
    assert before == [(MemoryError, caught.value, caught.value.__traceback__)]
    [folder] = folders(tmp_path / "rank-0")
    assert evidence_of(folder)["largest_sites"][0]["bytes"] == kept.nbytes
    assert folders(tmp_path / "older" / "rank-0") == []
    listener.close()
    assert sys.excepthook is _oom._excepthook  # a watch is left
    older.stop()  # the last watch gone: the hook before is back
    assert sys.excepthook is not _oom._excepthook
    older.listener.close()


# -- a disk that refuses ----------------------------------------------------------------------------

def test_a_disk_that_refuses_is_said_and_the_error_goes_on_unchanged(tmp_path, monkeypatch, caplog):
    from trainperf.base import _atomic

    def full(*args):
        raise OSError(28, "No space left on device")

    error = MemoryError("cannot allocate")
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    monkeypatch.setattr(_atomic, "_create_beside", full)
    with caplog.at_level(logging.WARNING, logger="trainperf"), pytest.raises(MemoryError) as caught:
        run_attach(listener, raising(error))
    assert caught.value is error
    said = [r.getMessage() for r in caplog.records if "could not be written" in r.getMessage()]
    assert len(said) == 1 and "No space left on device" in said[0] and "iteration 2" in said[0]
    [folder] = folders(tmp_path / "rank-0")
    assert list(folder.iterdir()) == []
    listener.close()


@pytest.mark.parametrize("crash_on", ["snapshot.pickle", "evidence.json"])
def test_a_crash_mid_write_leaves_no_half_file(tmp_path, monkeypatch, crash_on):
    """The process dies between writing a file and renaming it: what is there is whole, or absent."""
    from trainperf.base import _atomic

    allocator = FakeAllocator(monkeypatch)
    real_replace = _atomic.os.replace

    def crash(src, dst):
        if str(dst).endswith(crash_on):
            raise OSError("killed")  # what the folder holds after a kill at this point
        real_replace(src, dst)

    monkeypatch.setattr(_atomic.os, "replace", crash)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path, memory_history="start")
    with pytest.raises(torch.OutOfMemoryError):
        run_attach(listener, allocator.oom)
    listener.close()
    [folder] = folders(tmp_path / "rank-0")
    names = sorted(p.name for p in folder.iterdir())
    assert names == ([] if crash_on == "snapshot.pickle" else ["snapshot.pickle"])
    for name in names:
        pickle.loads((folder / name).read_bytes())


def test_a_snapshot_that_fails_leaves_the_rest_of_the_evidence_and_says_why(monkeypatch, tmp_path):
    allocator = FakeAllocator(monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("snapshot refused")

    monkeypatch.setattr(torch.cuda.memory, "_snapshot", broken)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    with pytest.raises(torch.OutOfMemoryError) as caught:
        run_attach(listener, allocator.oom)
    listener.close()
    [folder] = folders(tmp_path / "rank-0")
    assert [p.name for p in folder.iterdir()] == ["evidence.json"]
    evidence = evidence_of(folder)
    assert evidence["snapshot"] is None and evidence["largest_sites"] == []
    assert "snapshot refused" in evidence["snapshot_error"] and evidence["exception"]["message"] == str(caught.value)


def test_an_observer_that_cannot_gather_is_said_and_lets_the_allocator_raise(monkeypatch, tmp_path, caplog):
    allocator = FakeAllocator(monkeypatch)
    monkeypatch.setattr(_oom.traceback, "format_stack", lambda: 1 / 0)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainperf"), pytest.raises(torch.OutOfMemoryError):
        run_attach(listener, allocator.oom)
    listener.close()
    said = [r.getMessage() for r in caplog.records if "could not be gathered" in r.getMessage()]
    assert said == ["trainperf: out of memory on device 0; its evidence could not be gathered: "
                    "ZeroDivisionError('division by zero')"]


def test_a_cuda_error_the_observer_never_saw_gets_a_snapshot_taken_when_it_is_seen(monkeypatch, tmp_path):
    """A torch whose allocator has no observer: the adapter's sight of the error writes the folder."""
    allocator = FakeAllocator(monkeypatch)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path, memory_history="never")

    def oom_unobserved():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(torch.OutOfMemoryError):
        run_attach(listener, oom_unobserved)
    listener.close()
    [folder] = folders(tmp_path / "rank-0")
    evidence = evidence_of(folder)
    assert evidence["at_oom"] == {"device": 0, "requested_bytes": None, "device_allocated_bytes": None,
                                  "device_free_bytes": None}
    assert evidence["history"] == {"mode": "never", "recorded": False, "since": None, "theirs": False,
                                   "max_entries": 100_000}
    assert evidence["largest_sites"][0]["site"] is None and allocator.snapshots == 1
    assert pickle.loads((folder / "snapshot.pickle").read_bytes())["segments"]


def test_the_error_that_cannot_be_added_to_the_observers_folder_is_said(monkeypatch, tmp_path, caplog):
    allocator = FakeAllocator(monkeypatch)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path, memory_history="start")
    real = _oom._write_json
    calls = []

    def second_fails(path, evidence):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(30, "Read-only file system")
        real(path, evidence)

    monkeypatch.setattr(_oom, "_write_json", second_fails)
    with caplog.at_level(logging.WARNING, logger="trainperf"), pytest.raises(torch.OutOfMemoryError):
        run_attach(listener, allocator.oom)
    listener.close()
    [folder] = folders(tmp_path / "rank-0")
    observed = evidence_of(folder)["exception"]
    assert observed["raised"] is False  # the observer's, whole
    # the stack of the failing allocation, down to the allocator's call of the observer: none of trainperf's frames
    assert observed["traceback"].rstrip().endswith("observer(0, requested, 1400 * 2**20, 10 * 2**20)")
    assert "trainperf/torch/_oom.py" not in observed["traceback"] and "run_attach" in observed["traceback"]
    said = [r.getMessage() for r in caplog.records if "could not be completed" in r.getMessage()]
    assert said == [f"trainperf: the evidence in {folder}/ could not be completed with the error: "
                    "OSError(30, 'Read-only file system')"]


def test_the_observer_goes_to_the_newest_cuda_watch_and_not_to_a_cpu_one(monkeypatch, tmp_path):
    allocator = FakeAllocator(monkeypatch)
    monkeypatch.setattr(_oom, "_watches", [])
    cuda_listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path / "cuda")
    cpu_listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path / "cpu")
    cuda = _oom.OomWatch(cuda_listener, torch.device("cuda", 0))
    cpu = _oom.OomWatch(cpu_listener, torch.device("cpu"))
    cuda.start()
    cpu.start()
    [observer] = allocator.observers
    observer(0, 10, 20, 30)
    cpu.stop()
    cuda.stop()
    observer(0, 10, 20, 30)  # no watch left: nothing
    assert len(folders(tmp_path / "cuda" / "rank-0")) == 1 and folders(tmp_path / "cpu" / "rank-0") == []
    cuda_listener.close()
    cpu_listener.close()


def test_the_observer_is_attached_once_in_a_process_that_never_attached_it(monkeypatch, tmp_path):
    attached = []
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", attached.append, raising=False)
    monkeypatch.setattr(_oom, "_observing", _oom._observing)  # restored after: this test starts from the import's
    assert _oom._observing is False
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    for _ in range(2):
        watch = _oom.OomWatch(listener, torch.device("cuda", 0))
        watch.start()
        watch.stop()
    assert attached == [_oom._observer]
    listener.close()


def test_the_history_in_the_evidence_says_since_when_on_the_listeners_wall_clock(monkeypatch, tmp_path):
    allocator = FakeAllocator(monkeypatch)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path, memory_history="start",
                                   wall_clock=lambda: 1234.5)
    with pytest.raises(torch.OutOfMemoryError):
        run_attach(listener, allocator.oom)
    listener.close()
    [folder] = folders(tmp_path / "rank-0")
    evidence = evidence_of(folder)
    assert evidence["history"] == {"mode": "start", "recorded": True, "since": {"time": 1234.5, "iteration": 0},
                                   "theirs": False, "max_entries": 100_000}
    assert evidence["time"] == 1234.5


def test_an_error_whose_text_cannot_be_made_is_written_by_its_type(tmp_path):
    class Unreadable(MemoryError):
        def __str__(self):
            raise RuntimeError("no text")

    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    watch = _oom.OomWatch(listener, torch.device("cpu"))
    watch.start()
    watch.saw(Unreadable())
    watch.stop()
    listener.close()
    [folder] = folders(tmp_path / "rank-0")
    assert evidence_of(folder)["exception"] == {"type": Unreadable.__qualname__, "raised": True, "message": None,
                                                "traceback": None, "unreadable": "RuntimeError('no text')"}


def test_evidence_is_strict_json_with_nan_and_infinities_as_null():
    assert _oom._finite({"a": float("nan"), "b": [1.5, float("inf"), (float("-inf"), 2)], 3: "x"}) == {
        "a": None, "b": [1.5, None, [None, 2]], "3": "x"}


def test_two_errors_in_the_same_iteration_and_second_get_two_folders(tmp_path):
    listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
    watch = _oom.OomWatch(listener, torch.device("cpu"))
    watch.start()
    try:
        watch.saw(MemoryError("a"))
        watch.saw(MemoryError("b"))
        again = MemoryError("c")
        watch.saw(again)
        watch.saw(again)  # the same error seen twice (a frame, then the excepthook): one folder
    finally:
        watch.stop()
        listener.close()
    found = folders(tmp_path / "rank-0")
    assert len(found) == 3 and len({p.name for p in found}) == 3
    # the first folder of a second takes the plain name, the next ones a number after it
    assert all(re.fullmatch(rf"oom-0-{os.getpid()}-\d{{8}}T\d{{6}}(-[12])?", p.name) for p in found)
    assert any(re.fullmatch(r"oom-0-\d+-\d{8}T\d{6}", p.name) for p in found)
    assert sorted(evidence_of(p)["exception"]["message"] for p in found) == ["a", "b", "c"]


# -- the allocator's history ------------------------------------------------------------------------

def run_cuda(allocator, mode, reserved=(), frequency=1, **options):
    """Train 6 steps under attach on the fake CUDA device; ``reserved[i]`` the reserved peak of report i."""
    listener = PerformanceListener(frequency, sinks=[], sink_thread=False, memory_history=mode, **options)
    model = torch.nn.Linear(4, 1)
    attach(model, listener)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for i, (x, y) in enumerate(batches()):
        if i < len(reserved):
            allocator.reserved_mb = reserved[i]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        seen.append(len(allocator.calls))
    listener.close()
    return seen


def test_history_from_the_start_records_python_stacks_at_set_up_and_stops_at_close(monkeypatch):
    allocator = FakeAllocator(monkeypatch)
    seen = run_cuda(allocator, "start")
    assert seen[0] == 1 and allocator.calls == [
        {"enabled": "all", "stacks": "python", "max_entries": 100_000}, {"enabled": None, "stacks": "all",
                                                                         "max_entries": None}]
    assert allocator.history is False


def test_history_when_short_starts_at_the_first_report_at_90_percent_and_not_before(monkeypatch):
    allocator = FakeAllocator(monkeypatch, total=10 * 1024 * 2**20)  # 10240 MB: the line is 9216 MB
    # the reserved peak of each step's report: the one at 9216 MB is the fourth report
    seen = run_cuda(allocator, "when_short", reserved=(1000, 9000, 9215.9, 9216, 100, 9500))
    starts = [i for i, n in enumerate(seen) if n]
    assert starts[0] == 3 and seen[:4] == [0, 0, 0, 1] and seen[-1] == 1
    assert allocator.calls[0]["stacks"] == "python" and allocator.calls[-1]["enabled"] is None
    assert len(allocator.calls) == 2


def test_history_since_is_the_wall_time_and_the_iteration_it_started_at(monkeypatch):
    from trainperf.torch._memory_history import MemoryHistory, history_enabled

    allocator = FakeAllocator(monkeypatch)
    listener = PerformanceListener(1, sinks=[], sink_thread=False, wall_clock=lambda: 1234.5)
    for _ in range(3):
        listener.record_iteration()
    history = MemoryHistory(listener, torch.device("cuda", 0), "start")
    assert (history.since, history.recorded) == (None, False)
    history.start()
    assert (history.since, history.recorded, history.theirs) == ((1234.5, 3), True, False)
    history.stop()
    history.stop()  # once
    assert allocator.calls[-1]["enabled"] is None and len(allocator.calls) == 2 and not history.recorded
    monkeypatch.delattr(torch._C, "_cuda_isHistoryEnabled")
    assert history_enabled() is False  # a torch that cannot say
    listener.close()


def test_history_never_is_never_switched_and_one_already_on_is_left_alone(monkeypatch):
    allocator = FakeAllocator(monkeypatch)
    assert run_cuda(allocator, "never", reserved=(10_000,) * 6) == [0] * 6 and allocator.calls == []
    allocator.history = True  # the user's own
    run_cuda(allocator, "start")
    run_cuda(allocator, "when_short", reserved=(10_000,) * 6)
    assert allocator.calls == [] and allocator.history is True


def test_the_history_and_the_watch_add_no_device_synchronisation(monkeypatch):
    allocator = FakeAllocator(monkeypatch)
    waits = {}
    for mode in ("never", "start", "when_short"):
        allocator.timeline.calls.clear()
        run_cuda(allocator, mode, reserved=(10_000,) * 6, frequency=2)
        waits[mode] = allocator.timeline.calls["wait"]
    assert allocator.device.user_syncs == 0
    assert waits["start"] == waits["when_short"] == waits["never"] <= 1  # the one at close, if any


def test_memory_history_is_checked_at_construction_naming_the_argument():
    with pytest.raises(ValueError, match=r"memory_history must be one of 'when_short', 'start', 'never', got 'on'"):
        PerformanceListener(memory_history="on")


# -- the sites ------------------------------------------------------------------------------------

def test_cuda_sites_group_live_blocks_by_the_first_frame_outside_torch_and_trainperf():
    own = ("/site/torch/", "/site/trainperf/")

    def block(size, frames, state="active_allocated"):
        return {"size": size, "state": state, "frames": frames}

    user = {"filename": "/me/model.py", "line": 88, "name": "attn"}
    other = {"filename": "/me/train.py", "line": 40, "name": "step"}
    inner = {"filename": "/site/torch/nn/functional.py", "line": 1, "name": "linear"}
    ours = {"filename": "/site/trainperf/torch/_tap.py", "line": 2, "name": "__call__"}
    snapshot = {"segments": [{"blocks": [block(300, [inner, ours, user]), block(300, [inner, user]),
                                         block(100, [other]), block(50, []), block(999, [user], "inactive")]}]}
    sites = _oom_sites.cuda_sites(snapshot, own)
    assert [(s["site"], s["bytes"], s["blocks"]) for s in sites] == [
        ("/me/model.py:88", 600, 2), ("/me/train.py:40", 100, 1), (None, 50, 1)]
    assert [round(s["share"], 4) for s in sites] == [round(600 / 750, 4), round(100 / 750, 4), round(50 / 750, 4)]
    text = _oom_sites.said_sites(sites, cuda=True)
    assert text.startswith("80% of live memory (600 B) allocated at model.py:88 (2 blocks), 13% (100 B) at train.py:40")
    assert text.endswith("7% (50 B) in 1 blocks allocated with no stack recorded")


def test_frames_of_frozen_modules_and_without_a_file_are_not_sites_and_code_is_the_lines_text(tmp_path):
    source = tmp_path / "model.py"
    source.write_text("a = 1\n    scores = q @ k.transpose(-2, -1) * scale_of_the_attention_heads\n")
    frames = [{"filename": "<frozen importlib>", "line": 5, "name": "x"}, {"filename": "", "line": 1, "name": "y"},
              {"filename": str(source), "line": 2, "name": "attn"}]
    [site] = _oom_sites.cuda_sites({"segments": [{"blocks": [{"size": 3 * 2**30, "state": "active_allocated",
                                                               "frames": frames}]}]}, ())
    assert site == {"site": f"{source}:2", "function": "attn", "bytes": 3 * 2**30, "blocks": 1, "share": 1.0,
                    "code": "scores = q @ k.transpose(-2, -1) * scale_of_the_attention_heads"}
    assert _oom_sites.said_sites([site], cuda=True) == (
        "100% of live memory (3.0 GB) allocated at model.py:2 (scores = q @ k.transpose(-2, -1) * scale, 1 blocks)")
    assert _oom_sites.cuda_sites({"segments": []}) == [] and _oom_sites.said_sites([], cuda=True) == (
        "no live allocation found")


def test_groups_of_no_bytes_at_all_have_no_share():
    assert _oom_sites.cpu_tensor_groups([torch.zeros(0)]) == [
        {"shape": [0], "dtype": "float32", "grad_fn": None, "bytes": 0, "tensors": 1, "share": 0.0}]
    [site] = _oom_sites.cuda_sites({"segments": [{"blocks": [{"size": 0, "state": "active_allocated"}]}]})
    assert site["share"] == 0.0 and site["site"] is None


def test_a_frame_without_a_line_or_a_name_is_a_site_at_line_0():
    [site] = _oom_sites.cuda_sites({"segments": [{"blocks": [{"size": 8, "state": "active_allocated",
                                                               "frames": [{"filename": "/u/gen.py"}]}]}]}, ())
    assert (site["site"], site["function"]) == ("/u/gen.py:0", "")


def test_at_most_ten_sites_and_groups_are_kept_largest_first():
    blocks = [{"size": 100 + n, "state": "active_allocated", "frames": [{"filename": f"/u/f{n}.py", "line": n}]}
              for n in range(12)]
    sites = _oom_sites.cuda_sites({"segments": [{"blocks": blocks}]}, ())
    assert [s["bytes"] for s in sites] == [111 - n for n in range(10)]
    assert sites[0]["share"] == pytest.approx(111 / sum(100 + n for n in range(12)))
    groups = _oom_sites.cpu_tensor_groups([torch.zeros(n + 1) for n in range(12)])
    assert [g["bytes"] for g in groups] == [4 * (12 - n) for n in range(10)]
    assert _oom_sites.said_sites(groups, cuda=False).count(" in 1 float32") == 3


@pytest.mark.parametrize("nbytes, said", [(1023, "1023 B"), (1024, "1.0 KB"), (2**20, "1.0 MB"),
                                          (2**30 - 1, "1024.0 MB"), (2**30, "1.0 GB")])
def test_sizes_are_said_in_the_largest_unit_they_reach(nbytes, said):
    assert _oom_sites._size(nbytes) == said


def test_the_process_memory_is_psutils_rss_and_the_kernels_peak():
    import resource

    import psutil

    figures = _oom_sites.process_memory()
    rss = psutil.Process().memory_info().rss
    assert abs(figures["rss_bytes"] - rss) < 64 * 2**20
    assert figures["peak_rss_bytes"] == resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert figures["peak_rss_bytes"] >= figures["rss_bytes"] - 64 * 2**20


def test_cpu_tensors_leave_out_other_devices_and_tensors_without_a_plain_storage():
    sparse = torch.zeros(3, 3).to_sparse()
    meta = torch.zeros(1000, device="meta")
    groups = _oom_sites.cpu_tensor_groups([sparse, meta, torch.zeros(2)])
    assert [(g["shape"], g["bytes"]) for g in groups] == [([2], 8)]


def test_cpu_tensors_count_each_storage_once_and_group_by_shape_dtype_and_grad_fn():
    base = torch.zeros(100, 10)
    view = base[:50]  # the same storage: counted with the first tensor found on it
    w = torch.ones(10, requires_grad=True)
    grads = [torch.ones(5, 10) * w for _ in range(3)]
    groups = _oom_sites.cpu_tensor_groups([base, view, *grads, "not a tensor"])
    assert groups[0] == {"shape": [100, 10], "dtype": "float32", "grad_fn": None, "bytes": 4000, "tensors": 1,
                         "share": pytest.approx(4000 / 4600)}
    assert groups[1]["grad_fn"] == "MulBackward0" and (groups[1]["bytes"], groups[1]["tensors"]) == (600, 3)
    assert groups[2] == {"shape": [50, 10], "dtype": "float32", "grad_fn": None, "bytes": 0, "tensors": 1,
                         "share": 0.0}
    text = _oom_sites.said_sites(groups, cuda=False)
    assert text.startswith("87% of live CPU tensors (3.9 KB) in 1 float32[100, 10] tensor(s), 13% (600 B) in 3 ")


def test_tracemalloc_top_lines_are_kept_when_it_is_tracing(tmp_path):
    import tracemalloc

    tracemalloc.start()
    try:
        listener = PerformanceListener(1, sinks=[], sink_thread=False, run_dir=tmp_path)
        with pytest.raises(MemoryError):
            run_attach(listener, raising(MemoryError("x")))
        listener.close()
    finally:
        tracemalloc.stop()
    [folder] = folders(tmp_path / "rank-0")
    top = evidence_of(folder)["tracemalloc"]
    assert top and all(set(t) == {"site", "bytes", "count"} and t["bytes"] > 0 for t in top)
