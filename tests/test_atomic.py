"""atomic_write: the temporary file sits beside the target, a reader sees the old file or the new one,
nothing is left behind on failure, and the new file has a plain file's permissions."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from trainperf import _atomic
from trainperf._atomic import atomic_write


def test_the_temporary_file_is_beside_the_target_and_the_old_content_stays_until_the_rename(tmp_path, monkeypatch):
    target = tmp_path / "meta.json"
    target.write_text("old", encoding="utf-8")
    seen = {}
    made = []
    real_mkstemp = tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        made.append(name)
        return fd, name

    monkeypatch.setattr(_atomic.tempfile, "mkstemp", spy)

    def write(f):
        f.write("new")
        f.flush()
        seen["during"] = target.read_text(encoding="utf-8")  # a reader while the writer writes
        seen["temporary"] = sorted(p.name for p in tmp_path.iterdir())

    atomic_write(target, write)
    assert seen["during"] == "old" and target.read_text(encoding="utf-8") == "new"
    assert len(made) == 1 and os.path.dirname(made[0]) == str(tmp_path)  # same folder, not the system's temp
    name = os.path.basename(made[0])
    assert name.startswith(".meta.json.") and name.endswith(".tmp") and name in seen["temporary"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


def test_a_failing_writer_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old", encoding="utf-8")

    def fail(f):
        f.write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, fail)
    assert target.read_text(encoding="utf-8") == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_an_interrupt_while_writing_leaves_no_temporary_file(tmp_path):
    def interrupted(f):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "new.txt", interrupted)
    assert list(tmp_path.iterdir()) == []


def test_binary_content_and_text_newlines_are_written_as_given(tmp_path):
    atomic_write(tmp_path / "b.bin", lambda f: f.write(b"\x00\xff\r\n"), binary=True)
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff\r\n"
    atomic_write(tmp_path / "t.txt", lambda f: f.write("a\r\nb\n\u00e9"), fsync=True)
    assert (tmp_path / "t.txt").read_bytes() == "a\r\nb\n\u00e9".encode()


def test_the_new_file_has_a_plain_files_permissions_not_a_temporary_files(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "out.txt", lambda f: f.write("x"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o644
