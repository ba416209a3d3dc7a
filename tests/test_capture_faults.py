"""Captures whose trace cannot be written: a disk that fills, a folder that cannot be written or is on a
read-only file system. Nothing temporary is left in the folder, the warning names the real cause and the
folder, and no record or log line names a trace file that does not exist."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
import warnings
from pathlib import Path

import pytest

from test_report_captures import FakeTracer
from trainperf import CaptureRule, MemorySink, PerformanceListener, format_line


class Disk:
    """The OS's writes under ``folder``, made to fail with ``error`` (an errno) once :meth:`fail` is
    called: ``os.open`` for writing (a read-only folder), or ``os.write`` and the writes of a file
    ``os.fdopen`` opened (a full disk)."""

    def __init__(self, monkeypatch, folder: Path, error: int, *, on: str) -> None:
        self.folder, self.error, self.on, self.failing = str(folder), error, on, False
        self.fds: set[int] = set()
        real_open, real_write, real_fdopen = os.open, os.write, os.fdopen

        def fake_open(path, flags, mode=0o777, *, dir_fd=None):
            inside = os.path.abspath(os.fsdecode(path)).startswith(self.folder)
            writing = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            if inside and writing and self.failing and self.on == "open":
                raise OSError(self.error, os.strerror(self.error), os.fsdecode(path))
            fd = real_open(path, flags, mode, dir_fd=dir_fd)
            if inside:
                self.fds.add(fd)
            return fd

        def fake_write(fd, data):
            if fd in self.fds and self.failing and self.on == "write":
                raise OSError(self.error, os.strerror(self.error))
            return real_write(fd, data)

        def fake_fdopen(fd, *args, **kwargs):
            f = real_fdopen(fd, *args, **kwargs)
            return Failing(f, self) if fd in self.fds else f

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "write", fake_write)
        monkeypatch.setattr(os, "fdopen", fake_fdopen)

    def fail(self) -> None:
        self.failing = True


class Failing:
    """A file whose writes fail while its disk does."""

    def __init__(self, f, disk: Disk) -> None:
        self._f, self._disk = f, disk

    def write(self, data):
        if self._disk.failing and self._disk.on == "write":
            raise OSError(self._disk.error, os.strerror(self._disk.error))
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


class KinetoLike(FakeTracer):
    """A profiler that saves as ``torch.profiler``'s Kineto does: into ``<path>.tmp``, renamed to
    ``path`` once whole; a write that fails is logged by it, not raised, and the ``.tmp`` stays.
    ``on_stop`` runs when it stops (the disk fills while it traces)."""

    def __init__(self, on_stop=None) -> None:
        super().__init__()
        self.on_stop = on_stop

    def stop(self) -> None:
        if self.on_stop is not None:
            self.on_stop()

    def save(self, path: str) -> None:
        events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{m}", "ts": float(m), "dur": 1.0,
                   "pid": 1, "tid": 1} for m in self.marks]
        data = json.dumps({"traceEvents": events * 50}).encode()
        try:
            fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError:
            return  # "Failed to open ...": nothing written
        try:
            for k in range(0, len(data), 1024):
                os.write(fd, data[k:k + 1024])
        except OSError:
            return  # "Failed to write to log file!": the .tmp stays, never renamed
        finally:
            os.close(fd)
        os.replace(path + ".tmp", path)


def run_slowing(folder: Path, clock, tracer, memory: MemorySink):
    """A loop turning 6x slower at iteration 81, reports every 5 iterations: captures 87-89."""
    lis = PerformanceListener(5, clock=clock, sinks=[memory], profile_dir=folder, sink_thread=False,
                              profile_rule=CaptureRule(min_interval_s=0.0, max_captures=1))
    lis._capture._new_tracer = lambda: tracer
    with lis:
        for i in range(1, 121):
            clock.advance(0.006 if i >= 81 else 0.001)
            lis.record_iteration(samples=8)
            assert lis._capture.wait(10.0)
    return lis


TRACE = re.compile(r"[^\s;'\"]+\.pt\.trace\.json\.gz")


def named_traces(memory: MemorySink, texts: list[str]) -> set[str]:
    """Every trace file a record, its line, a log line or a warning names."""
    named = {r.capture for r in memory.records if r.capture is not None}
    for text in [*texts, *(format_line(r) for r in memory.records)]:
        named.update(TRACE.findall(text))
    return named


def check_failed(folder: Path, memory: MemorySink, said: list[warnings.WarningMessage], caplog, *words: str):
    ours = [str(w.message) for w in said if "trainperf" in str(w.message)]
    assert len(ours) == 1, ours
    for word in words:
        assert word in ours[0], ours[0]
    assert repr(str(folder)) in ours[0] or str(folder) in ours[0], ours[0]
    left = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    assert left == [], left  # no temporary file, no half trace
    for path in named_traces(memory, [*ours, caplog.text]):
        assert Path(path).exists(), f"{path} is named but was never written"
    assert memory.records[-1].iteration == 120  # training went on


def test_a_disk_that_fills_while_tracing_leaves_no_file_and_is_said_as_a_full_disk(tmp_path, clock, monkeypatch,
                                                                                    caplog):
    caplog.set_level(logging.INFO, logger="trainperf")
    folder = tmp_path / "traces"
    disk = Disk(monkeypatch, folder, errno.ENOSPC, on="write")
    memory = MemorySink()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        run_slowing(folder, clock, KinetoLike(on_stop=disk.fail), memory)
    check_failed(folder, memory, said, caplog, "no space left")
    assert all(r.capture is None for r in memory.records)


def test_a_disk_that_fills_while_the_trace_is_compressed_leaves_no_file(tmp_path, clock, monkeypatch, caplog):
    """The profiler's trace was saved whole; the compressed file no longer fits."""
    caplog.set_level(logging.INFO, logger="trainperf")
    folder = tmp_path / "traces"
    disk = Disk(monkeypatch, folder, errno.ENOSPC, on="write")
    tracer = KinetoLike()
    save = tracer.save

    def save_then_fill(path: str) -> None:
        save(path)
        disk.fail()

    tracer.save = save_then_fill
    memory = MemorySink()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        run_slowing(folder, clock, tracer, memory)
    check_failed(folder, memory, said, caplog, "no space left")


@pytest.mark.parametrize("error, words", [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only")])
def test_a_folder_that_cannot_be_written_is_said_by_its_cause_and_no_trace_is_named(tmp_path, clock, monkeypatch,
                                                                                     caplog, error, words):
    caplog.set_level(logging.INFO, logger="trainperf")
    folder = tmp_path / "traces"
    folder.mkdir()
    if error == errno.EACCES and os.geteuid() != 0:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)  # a real read-only folder (root ignores it)
    else:
        Disk(monkeypatch, folder, error, on="open").fail()
    memory = MemorySink()
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            run_slowing(folder, clock, KinetoLike(), memory)
    finally:
        folder.chmod(stat.S_IRWXU)
    check_failed(folder, memory, said, caplog, words)
    assert "No such file or directory" not in caplog.text and all(r.capture is None for r in memory.records)


@pytest.mark.parametrize("error, words", [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only")])
def test_a_folder_made_unwritable_while_tracing_is_said_by_its_cause(tmp_path, clock, monkeypatch, caplog, error,
                                                                     words):
    caplog.set_level(logging.INFO, logger="trainperf")
    folder = tmp_path / "traces"
    disk = Disk(monkeypatch, folder, error, on="open")
    memory = MemorySink()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        run_slowing(folder, clock, KinetoLike(on_stop=disk.fail), memory)
    check_failed(folder, memory, said, caplog, words)
    assert "No such file or directory" not in caplog.text and all(r.capture is None for r in memory.records)


def test_records_name_the_trace_once_it_is_written_even_with_a_report_every_iteration(tmp_path, clock, caplog):
    """The windows a capture overlaps are reported once its trace is written (a little later), and
    then name it: every trace a record or a log line names exists."""
    caplog.set_level(logging.INFO, logger="trainperf")
    memory = MemorySink()
    lis = PerformanceListener(1, clock=clock, sinks=[memory], profile_dir=tmp_path, sink_thread=False,
                              profile_rule=CaptureRule(baseline=False, confirm=1))
    tracer = KinetoLike()
    lis._capture._new_tracer = lambda: tracer
    seen_at: dict[int, int] = {}

    def check(record) -> None:
        seen_at[record.iteration] = lis.iteration
        if record.capture is not None:
            assert Path(record.capture).exists()

    lis.add_sink(check)
    with lis:
        for i in range(1, 101):
            clock.advance(0.006 if i >= 81 else 0.001)
            lis.record_iteration(samples=8)
    (trace,) = tmp_path.glob("*.gz")
    marked = [r.iteration for r in memory.records if r.capture]
    assert marked == [82, 83, 84, 85] and all(r.capture == str(trace) for r in memory.records if r.capture)
    assert [r.iteration for r in memory.records] == list(range(1, 101))  # none lost, in order
    assert seen_at[82] >= 85 and seen_at[100] == 100  # held until the trace was written, then on time again
    for path in named_traces(memory, [caplog.text]):
        assert Path(path).exists()
