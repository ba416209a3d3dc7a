"""A fake CUDA allocator for the out-of-memory tests on the CPU: its counters, its history switch,
its snapshot and its out-of-memory observer, and adapters that believe the model is on ``cuda:0``."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from fake_device import FakeDevice, FakeTimeline, RealClock

GIB = 2**30


class FakeAllocator:
    """What trainperf reads of the CUDA allocator, in memory. ``reserved_mb`` is the reserved peak the
    next read gives; ``history`` whether it records; ``calls`` each switch of the history."""

    def __init__(self, monkeypatch, total: int = 10 * GIB) -> None:
        from trainperf.torch import _cuda, _oom, _setup

        self.total = total
        self.reserved_mb = 1.0
        self.history = False
        self.calls: list[dict] = []
        self.observers: list = []
        self.snapshots = 0
        self.device = FakeDevice(RealClock(), max_ahead_s=1.0)
        self.timeline = FakeTimeline(self.device)
        c, cuda, memory = torch._C, torch.cuda, torch.cuda.memory
        monkeypatch.setattr(c, "_cuda_attach_out_of_memory_observer", self.observers.append, raising=False)
        monkeypatch.setattr(c, "_cuda_isHistoryEnabled", lambda: self.history, raising=False)
        monkeypatch.setattr(c, "_cuda_memorySnapshot", lambda *a: self.snapshot(), raising=False)
        monkeypatch.setattr(memory, "_record_memory_history", self.record)
        monkeypatch.setattr(memory, "_snapshot", lambda *a, **k: self.snapshot())
        properties = SimpleNamespace(total_memory=total, name="Fake GPU")
        monkeypatch.setattr(cuda, "get_device_properties", lambda device: properties)
        monkeypatch.setattr(cuda, "current_device", lambda: 0)
        monkeypatch.setattr(cuda, "memory_stats_as_nested_dict", self.stats)
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda device: None)
        monkeypatch.setattr(_setup, "AllocatorCounters", functools.partial(_cuda.AllocatorCounters, min_interval_s=0.0))
        monkeypatch.setattr(_setup, "nvml_probe", lambda device: None)
        monkeypatch.setattr(_oom, "_observing", False)
        real_use = _setup.TrainingSetup.use_device

        def on_cuda(setup, device, timeline_factory=None, *args, **kwargs):
            return real_use(setup, torch.device("cuda", 0), lambda d: self.timeline, *args, **kwargs)

        monkeypatch.setattr(_setup.TrainingSetup, "use_device", on_cuda)

    def record(self, enabled="all", context="all", stacks="all", max_entries=None, **kw) -> None:
        self.calls.append({"enabled": enabled, "stacks": stacks, "max_entries": max_entries})
        self.history = enabled is not None

    def stats(self, device) -> dict:
        mb = 2**20
        return {"allocated_bytes": {"all": {"peak": int(self.reserved_mb * mb / 2)}},
                "reserved_bytes": {"all": {"peak": int(self.reserved_mb * mb)}}, "num_alloc_retries": 0}

    def snapshot(self) -> dict:
        """Two sites of the user's (this file), one of torch's own frames above each, and a freed block."""
        self.snapshots += 1
        torch_file = torch.__file__
        here = __file__

        def block(size, line, state="active_allocated"):
            return {"size": size, "requested_size": size, "address": 0, "state": state,
                    "frames": [{"filename": torch_file, "line": 1, "name": "inner"},
                               {"filename": here, "line": line, "name": "forward"}] if self.history else []}

        blocks = [block(600 * 2**20, 20), block(600 * 2**20, 20), block(200 * 2**20, 30), block(900 * 2**20, 40,
                                                                                                 "inactive")]
        return {"segments": [{"address": 0, "total_size": 3 * GIB, "blocks": blocks}], "device_traces": [[]]}

    def oom(self, requested: int = 2 * GIB) -> None:
        """What the allocator does when an allocation fails: call its observers, then raise."""
        for observer in self.observers:
            observer(0, requested, 1400 * 2**20, 10 * 2**20)
        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {requested} bytes")
