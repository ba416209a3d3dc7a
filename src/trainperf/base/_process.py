"""What a listener asks of its process and of the arguments it is given: the cores it may use, its
rank, the user's own line for a warning, and the check of one iteration's figures."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

from ._check import is_int

__all__: list[str] = []


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: Imported at: the fallback for a process whose start the operating system does not say.
_IMPORTED = time.monotonic()


def process_age() -> tuple[float, bool]:
    """Seconds since the operating system started this process, and whether it said so. Linux: the
    process's start in clock ticks since boot (``/proc/self/stat``), against ``CLOCK_BOOTTIME``, both on
    the same clock (10 ms ticks). Elsewhere ``psutil``'s create time, when installed. Otherwise the
    time since trainperf was imported, and ``False``."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # the command name (field 2) is in parentheses and may hold spaces: count after its last ')'
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
        hertz = os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / hertz), True
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time()), True
    except Exception:  # noqa: BLE001 - not installed, or not allowed to read its own process
        return time.monotonic() - _IMPORTED, False


def host_name() -> str:
    """This machine's name, as ``socket.gethostname()`` gives it (on POSIX both read the kernel's node
    name; ``socket`` is imported only where ``os.uname`` is missing, so a listener does not load it)."""
    uname = getattr(os, "uname", None)
    if uname is not None:
        return str(uname().nodename)
    import socket

    return socket.gethostname()


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # trainperf/, above base/
_TORCH_MARKERS = (f"{os.sep}torch{os.sep}", f"{os.sep}lightning{os.sep}", f"{os.sep}pytorch_lightning{os.sep}")


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the user's own line: the first frame outside
    trainperf and the frameworks that called into it (an optimizer's step hook, a Lightning hook)."""
    frame = sys._getframe(2)  # the caller of warnings.warn's caller
    level = 2
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_PACKAGE_DIR) and not any(marker in name for marker in _TORCH_MARKERS):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return 2


def env_int(name: str) -> int | None:
    """The environment variable ``name`` as a non-negative int, else ``None``."""
    raw = os.environ.get(name)
    try:
        value = None if raw is None else int(raw)
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def env_rank() -> int | None:
    """The ``RANK`` environment variable, else the rank of an initialised ``torch.distributed``
    process group when torch is already imported (never imported here), else ``None``."""
    raw = os.environ.get("RANK")
    if raw is None:
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except Exception:  # noqa: BLE001 - a half-built process group: no rank known
            return None
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def ray_train_run_folder() -> str | None:
    """The run's folder on Ray Train's storage (``RunConfig(storage_path=..., name=...)``) when this
    process is a Ray Train worker and that storage is a file system every node mounts (a local or a
    shared path), else ``None``: outside a worker, with cloud storage, or without ``ray.train`` loaded
    (never imported here)."""
    train = sys.modules.get("ray.train")
    if train is None:
        return None
    try:
        storage = train.get_context().get_storage()
    except Exception:  # noqa: BLE001 - not a Ray Train worker (the driver), or another Ray
        return None
    return local_run_folder(storage)


def local_run_folder(storage: Any) -> str | None:
    """The run's folder of a Ray Train storage context (``StorageContext``: a worker's, or a run config's)
    when its file system is the local one (a local or mounted path), else ``None`` (cloud storage, or a
    Ray that keeps it elsewhere)."""
    try:
        if getattr(storage.storage_filesystem, "type_name", None) != "local":
            return None
        folder = storage.experiment_fs_path
    except Exception:  # noqa: BLE001 - Ray's own objects: another version may keep them differently
        return None
    return folder if isinstance(folder, str) and folder else None


def bad_iteration(
    samples: object, batches: object, etl: object, started: object, other: object, steps: object, skipped: object,
    tokens: object = None,
) -> Exception | None:
    """The error for :meth:`PerformanceListener.record_iteration` arguments of the wrong type or
    value, naming the first bad one and the value it got; ``None`` when all are good."""
    counts = {"samples": samples, "batches": batches, "steps": steps, "skipped": skipped, "tokens": tokens}
    for name, value in counts.items():
        if value is None and name in ("samples", "tokens"):
            continue
        if not is_int(value):
            kind = "a non-negative int or None" if name in ("samples", "tokens") else "a non-negative int"
            return TypeError(f"{name} must be {kind}, got {value!r}")
        if value < 0:  # type: ignore[operator]
            return ValueError(f"{name} must not be negative, got {value!r}")
    if skipped > steps:  # type: ignore[operator]
        return ValueError(f"skipped must be at most steps ({steps!r}), got {skipped!r}")
    for name, value in {"etl": etl, "other": other, "started": started}.items():
        if value is None and name == "started":
            continue
        if isinstance(value, (bool, str, bytes)):
            return TypeError(f"{name} must be a number of seconds, got {value!r}")
        if not isinstance(value, (int, float)):
            try:
                value = float(value)  # type: ignore[arg-type]  # numpy and 0-d tensor scalars
            except (TypeError, ValueError):
                return TypeError(f"{name} must be a number of seconds, got {value!r}")
        if not math.isfinite(value) or (name != "started" and value < 0):
            what = "a finite number" if name == "started" else "a finite, non-negative number of seconds"
            return ValueError(f"{name} must be {what}, got {value!r}")
    return None


def iteration_error(
    samples: object, batches: object, etl: object, started: object, other: object, steps: object, skipped: object,
    tokens: object = None,
) -> Exception:
    error = bad_iteration(samples, batches, etl, started, other, steps, skipped, tokens)
    return error or ValueError(f"record_iteration cannot record etl={etl!r} with other={other!r}")
