"""trainperf's own traffic between the ranks of a ``torch.distributed`` run.

Everything goes through the run's key-value store (a connection of its own) on a thread of its
own, never through a collective and never on the training thread, so a rank without a listener,
ranks that report at other rates, a rank that dies or one that never closes cannot block or break
training:

* **joining**: each rank posts a greeting; rank 0 welcomes every rank it sees within ``timeout_s``
  and warns once about the others; a rank rank 0 never welcomes turns its traffic off, once warned;
* **clocks**: rank 0 estimates each rank's wall-clock offset by ping-pong (several round trips,
  the shortest kept; uncertainty = half of it), on joining and every few gathers, so drift shows;
* **gathers**: every ``every`` reports each rank posts its mean figures over them; rank 0 reads
  what has arrived and names the straggler and its cause in one cluster line;
* **liveness**: each rank posts a heartbeat; a rank whose heartbeat is older than ``timeout_s`` is
  marked silent (said once, written to the run directory) and left out from then on;
* **closing**: each rank posts its last figures and its run-directory files, then a goodbye; rank
  0 waits for the goodbyes at most ``timeout_s`` and writes the files into its own run directory, so
  that folder alone is enough for ``trainperf report`` when the ranks' disks are not shared.

Any failure of this traffic turns it off with one warning; training goes on.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from ..core import PerformanceListener
from ..ranks import RunDirSink
from ..records import PerformanceRecord
from ._cluster_roles import Leader, Member

__all__ = ["Cluster", "default_store"]

#: At exit without a close (a crash), rank 0 waits at most this long for the others' last word.
_EXIT_WAIT_S = 3.0

#: Links made so far, per (store given, rank): the n-th link of every rank shares its keys.
_links: dict[tuple[int | None, int], itertools.count[int]] = {}


def default_store() -> Any:
    """The store of the initialised default process group, on a connection of its own when it can
    have one (waits on a shared connection would hold the training's store calls)."""
    from torch.distributed.distributed_c10d import _get_default_store

    store = _get_default_store()
    try:
        return store.clone()  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError, NotImplementedError):
        return store


class Cluster:
    """The ranks' link for one listener: a sink that, every ``every`` reports, posts this rank's
    figures and on rank 0 names the straggler; see the module's docstring.

    Args:
        listener: this rank's listener.
        rank: this rank; ``world``: the number of ranks.
        store: the run's key-value store (``torch.distributed.Store``); the default process
            group's by default.
        every: gather every this many reports.
        timeout_s: the longest this rank's link waits for another rank (never on the training thread).
        wall_clock: the clock whose offsets are estimated (the listener's wall clock).
    """

    def __init__(
        self,
        listener: PerformanceListener,
        *,
        rank: int,
        world: int,
        store: Any = None,
        every: int = 10,
        timeout_s: float = 30.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        import torch.distributed as dist

        self.listener = listener
        self.rank, self.world = rank, world
        self.every = every
        self.timeout_s = timeout_s
        self._wall = wall_clock
        base = default_store() if store is None else store
        n = next(_links.setdefault((None if store is None else id(store), rank), itertools.count(1)))
        self._store = dist.PrefixStore(f"trainperf/{n}/", base)  # type: ignore[attr-defined]
        self.silent: dict[int, float] = {}
        self.offsets: dict[int, tuple[float, float]] = {}
        self.lines: list[str] = []
        self.joined: set[int] = set()
        self._run_dir = next((s for s in listener.sinks if isinstance(s, RunDirSink)), None)
        self._reports: list[PerformanceRecord] = []
        self._tasks: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._messages: list[str] = []
        self._warned = False
        self._on = True
        self._closed = False
        self._leader: Leader | None = None
        self._thread = threading.Thread(target=self._run, name=f"trainperf-cluster-{rank}", daemon=True)
        self._thread.start()
        # closed before the sinks are: the last gather and the files still reach the run directory
        listener.on_close(self.close)
        _at_exit(self)

    # -- the sink (training thread) ------------------------------------------------------------
    def __call__(self, record: PerformanceRecord) -> None:
        if self._messages:
            self._say()
        if not self._on:
            return
        self._reports.append(record)
        if len(self._reports) >= self.every:
            reports, self._reports = self._reports, []
            self._tasks.put(("gather", reports))

    def close(self) -> None:
        """Post the last figures and the files (rank 0: wait for the others' at most ``timeout_s``),
        then stop the link's thread."""
        if self._closed:
            return
        self._closed = True
        reports, self._reports = self._reports, []
        self._tasks.put(("close", reports))
        self._thread.join(self.timeout_s + 10.0)
        self._say()

    def exit_unclosed(self) -> None:
        """The process ends without a close (training raised: under DDP, a rank died): every rank
        says so, and rank 0 names the ranks that said nothing, as a rank that died does."""
        if self._closed or not self._on:
            return
        self._closed = True
        try:
            if self.rank != 0:
                self._store.set(f"exit/{self.rank}", repr(self._wall()))
                return
            leader = self._leader
            if leader is None:
                return
            deadline = time.monotonic() + min(self.timeout_s, _EXIT_WAIT_S)
            pending = set(leader._live_peers())
            while pending and time.monotonic() < deadline:
                pending = {p for p in pending if not (self._has(f"bye/{p}") or self._has(f"exit/{p}"))}
                time.sleep(0.02)
            for peer in sorted(pending):
                leader._silent(peer, "died: it stopped without a word while the others ended")
        except Exception:  # noqa: BLE001 - the process is ending; nothing to stop
            return

    def _say(self) -> None:
        messages, self._messages = self._messages, []
        if messages and not self._warned:
            self._warned = True  # one warning per run, whatever happens after
            warnings.warn("trainperf: " + "; ".join(messages), RuntimeWarning, stacklevel=3)

    # -- the link's thread -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._store.set(f"hello/{self.rank}", repr(self._wall()))
            if self.rank == 0:
                self._leader = Leader(self)
                self._leader.run()
            else:
                Member(self).run()
        except Exception as exc:  # noqa: BLE001 - our own traffic must never stop training
            self._off(f"figures across ranks are off for this run: {type(exc).__name__}: {exc}")

    def _off(self, why: str) -> None:
        if self._on:
            self._on = False
            self._messages.append(why)

    def _next_task(self, timeout: float) -> tuple[str, Any] | None:
        try:
            return self._tasks.get(timeout=timeout)
        except queue.Empty:
            return None

    def _has(self, key: str) -> bool:
        return bool(self._store.check([key]))

    def _take(self, key: str) -> bytes | None:
        """The value at ``key`` and the key removed, or ``None`` when it is not there (never waits)."""
        store = self._store
        if not store.check([key]):
            return None
        value: bytes = store.get(key)
        store.delete_key(key)
        return value


def _at_exit(link: Cluster) -> None:
    """Run ``link.exit_unclosed`` when the process ends: at interpreter exit, and at the end of a
    ``multiprocessing`` child, which skips ``atexit``. Held weakly: a closed, dropped link is forgotten."""
    import multiprocessing.util

    ref = weakref.ref(link)

    def on_exit() -> None:
        live = ref()
        if live is not None:
            live.exit_unclosed()

    atexit.register(on_exit)
    multiprocessing.util.Finalize(None, on_exit, exitpriority=50)
