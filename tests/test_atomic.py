"""atomic_write: the temporary file sits beside the target, a reader sees the old file or the new one,
nothing is left behind on failure, and the new file has a plain file's permissions."""

from __future__ import annotations

import os
import stat

import pytest

from trainperf.base import _atomic
from trainperf.base._atomic import atomic_write


def test_the_temporary_file_is_beside_the_target_and_the_old_content_stays_until_the_rename(tmp_path, monkeypatch):
    target = tmp_path / "meta.json"
    target.write_text("old", encoding="utf-8")
    seen = {}
    made = []
    real_create = _atomic._create_beside

    def spy(target_path):
        fd, name = real_create(target_path)
        made.append(name)
        return fd, name

    monkeypatch.setattr(_atomic, "_create_beside", spy)

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


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_the_process_umask_is_never_changed_not_even_for_a_moment(tmp_path, monkeypatch, mask, mode):
    """Setting the umask to 0 to read it gives a file another thread creates meanwhile the
    permissions 0o666: the writer leaves the umask to the kernel's own file creation."""
    old = os.umask(mask)
    try:
        def no_umask(value: int) -> int:
            raise AssertionError(f"os.umask({value:#o}) called")

        monkeypatch.setattr(os, "umask", no_umask)
        atomic_write(tmp_path / "out.txt", lambda f: f.write("x"))
        atomic_write(tmp_path / "out.txt", lambda f: f.write("y"))  # over an existing file
        monkeypatch.undo()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == mode
    assert (tmp_path / "out.txt").read_text() == "y"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_temporary_names_that_exist_already_are_skipped(tmp_path, monkeypatch):
    import secrets

    names = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".out.txt.aaaaaaaaaaaa.tmp").write_text("someone else's")
    atomic_write(tmp_path / "out.txt", lambda f: f.write("x"))
    assert (tmp_path / "out.txt").read_text() == "x"
    assert (tmp_path / ".out.txt.aaaaaaaaaaaa.tmp").read_text() == "someone else's"


def test_the_temporary_name_is_the_targets_with_twelve_random_hex_digits(tmp_path, monkeypatch):
    seen = []
    real = os.open

    def spy(path, *args, **kwargs):
        seen.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    atomic_write(tmp_path / "meta.json", lambda f: f.write("{}"))
    assert len(seen) == 1 and seen[0].startswith(".meta.json.") and seen[0].endswith(".tmp")
    assert len(seen[0]) == len(".meta.json.") + 12 + len(".tmp")


def test_after_a_hundred_names_taken_the_write_gives_up_naming_the_target(tmp_path, monkeypatch):
    import secrets

    tries = []
    monkeypatch.setattr(secrets, "token_hex", lambda n: tries.append(n) or "taken")
    (tmp_path / ".out.txt.taken.tmp").write_text("")
    with pytest.raises(FileExistsError, match="no free temporary name beside"):
        atomic_write(tmp_path / "out.txt", lambda f: f.write("x"))
    assert len(tries) == 100 and not (tmp_path / "out.txt").exists()


def test_leftovers_are_removed_and_one_that_cannot_be_is_left_quietly(tmp_path, monkeypatch):
    from pathlib import Path

    left = [tmp_path / ".perf.csv.aaaaaaaaaaaa.tmp", tmp_path / ".perf.csv.bbbbbbbbbbbb.tmp"]
    for path in left:
        path.write_text("half")
    (tmp_path / ".perf.csvx.cccccccccccc.tmp").write_text("another file's")
    real = Path.unlink

    def stuck(self, *args, **kwargs):
        if self.name.startswith(".perf.csv.aaaa"):
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", stuck)
    removed = _atomic.remove_leftovers(tmp_path / "perf.csv")
    assert removed == [left[1]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".perf.csv.aaaaaaaaaaaa.tmp", ".perf.csvx.cccccccccccc.tmp"]
    assert _atomic.remove_leftovers(tmp_path / "missing" / "perf.csv") == []


def test_a_folder_that_cannot_be_listed_has_no_leftovers_to_remove(tmp_path, monkeypatch):
    from pathlib import Path

    def unreadable(self, pattern):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "glob", unreadable)
    assert _atomic.remove_leftovers(tmp_path / "perf.csv") == []


def test_the_data_is_put_on_disk_before_the_rename_only_when_asked(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    atomic_write(tmp_path / "a.txt", lambda f: f.write("x"))
    assert synced == []
    atomic_write(tmp_path / "b.txt", lambda f: f.write("x"), fsync=True)
    assert len(synced) == 1
