"""trainperf's own traffic between the ranks of a ``torch.distributed`` run.

Everything goes through the run's key-value store (a connection of its own) on a thread of its
own, never through a collective and never on the training thread, so a rank without a listener,
ranks that report at other rates, a rank that dies or one that never closes cannot block or break
training:

* **joining**: each rank posts a greeting; rank 0 welcomes every rank it sees within ``timeout_s``
  and warns once about the others; a rank rank 0 never welcomes turns its traffic off, once warned;
* **clocks**: rank 0 estimates each rank's wall-clock offset by ping-pong (several round trips,
  the shortest kept; uncertainty = half of it), on joining and every few gathers, so drift shows.
  No new round starts once rank 0 is closing or with a rank that is closing, and a round under way
  is cut when either starts to close or the rank dies;
* **gathers**: every ``every`` reports each rank posts its mean figures over them; rank 0 reads
  what has arrived and names the straggler and its cause in one cluster line;
* **liveness**: each rank posts a heartbeat every second (``_BEAT_S``); during the run, a rank whose
  heartbeat is older than ``timeout_s`` is marked silent (said once, written to the run directory)
  and left out from then on;
* **closing**: each rank says it is closing, posts its last figures and its run-directory files,
  then a goodbye; rank 0 writes the files into its own run directory, so that folder alone is
  enough for ``trainperf report`` when the ranks' disks are not shared. Rank 0 waits for a rank's
  goodbye at most ``timeout_s`` from its own close, and less when it knows better:

  - a rank whose heartbeat is older than ``_DEAD_AFTER_S`` (3 s: three missed heartbeats) has died: it is
    not waited for, and is marked silent as *died*;
  - a rank that ended without closing (its process stopped with an error: it says so at exit) is
    not waited for, and is marked silent as *ended without closing*;
  - a rank still beating but not closed after ``timeout_s`` is marked silent as *did not close*.

  When the process ends without a close (a crash), the same rules hold with ``_EXIT_WAIT_S`` (4 s) in
  place of ``timeout_s``. Close, and the end of the process without one, stop the link's thread and
  wait for it: no store call of ours outlives them (a thread inside a store call when the
  interpreter ends aborts the process).

Every wait sleeps or blocks with a time limit; none spins. Any failure of this traffic turns it off
with one warning; training goes on.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core import PerformanceListener
from ..ranks import RunDirSink
from ..records import PerformanceRecord
from ._cluster_member import Member
from ._cluster_roles import _EXIT_WAIT_S, Leader

__all__ = ["Cluster", "default_store"]

#: Beyond what it may wait for the others, close gives the link's thread this long to finish its
#: work (files to send or write) before telling it to stop, and then this long to stop.
_CLOSE_SLACK_S = 10.0
_HALT_WAIT_S = 5.0
#: Between two looks at the store a waiting loop sleeps, from ``_FIRST_STEP_S`` (an answer often comes
#: within a fraction of a millisecond: a clock round trip stays short) doubling up to ``_STEP_S`` (a
#: store call takes ~0.1 ms: a long wait costs a few percent of a core); it asks whether to give up
#: every ``_GIVE_UP_EVERY_S``.
_FIRST_STEP_S = 0.0001
_STEP_S = 0.002
_GIVE_UP_EVERY_S = 0.01

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
        self.events: deque[dict[str, Any]] = deque()  # rank 0's lines for the sinks, handed over on the training thread
        self.joined: set[int] = set()
        self._run_dir = next((s for s in listener.sinks if isinstance(s, RunDirSink)), None)
        self._reports: list[PerformanceRecord] = []
        self._tasks: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._messages: list[str] = []
        self._warned = False
        self._on = True
        self._closed = False
        self._closing = threading.Event()  # close (or the process's end) has begun: no new clock rounds
        self._halt = threading.Event()  # the thread must stop now: every wait gives up
        self._thread = threading.Thread(target=self._run, name=f"trainperf-cluster-{rank}", daemon=True)
        self._thread.start()
        # closed before the sinks are: the last gather and the files still reach the run directory
        listener.on_close(self.close)
        _at_exit(self)

    # -- the sink (training thread) ------------------------------------------------------------
    def __call__(self, record: PerformanceRecord) -> None:
        if self._messages:
            self._say()
        if self.events:
            self._tell()
        if not self._on:
            return
        self._reports.append(record)
        if len(self._reports) >= self.every:
            reports, self._reports = self._reports, []
            self._tasks.put(("gather", reports))

    def close(self) -> None:
        """Post the last figures and the files (rank 0: wait for the others', see the module's
        docstring), then stop the link's thread and wait for it."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        reports, self._reports = self._reports, []
        self._tasks.put(("close", reports))
        self._stop(self.timeout_s + _CLOSE_SLACK_S)
        self._tell()
        self._say()

    def _tell(self) -> None:
        """Hand rank 0's lines to the listener's sinks (where they run), oldest first."""
        events = self.events
        while events:
            self.listener.tell_sinks(events.popleft())

    def exit_unclosed(self) -> None:
        """The process ends without a close (training raised: under DDP, a rank died): every rank
        says so, rank 0 names the ranks that said nothing as a rank that died does, and the link's
        thread is stopped before the process (and its store) goes."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._tasks.put(("exit", None))
        self._stop(min(self.timeout_s, _EXIT_WAIT_S) + 1.0)

    def _stop(self, wait_s: float) -> None:
        """Let the link's thread finish within ``wait_s``, else tell it to stop now, and wait for it."""
        thread = self._thread
        if thread is threading.current_thread():
            return
        thread.join(wait_s)
        if thread.is_alive():
            self._halt.set()
            thread.join(_HALT_WAIT_S)
        if thread.is_alive():
            self._messages.append(f"the link's thread did not stop within {wait_s + _HALT_WAIT_S:g} s")

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
                Leader(self).run()
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

    def _await(self, key: str, seconds: float, give_up: Callable[[], bool] | None = None) -> bool:
        """Whether ``key`` appears within ``seconds``. Sleeps between looks (see ``_STEP_S``); stops looking
        when the link must stop, or when ``give_up()`` says so."""
        now = time.monotonic()
        deadline, ask, step = now + seconds, now + _GIVE_UP_EVERY_S, _FIRST_STEP_S
        while not self._has(key):
            now = time.monotonic()
            if now >= deadline or self._halt.is_set():
                return False
            if give_up is not None and now >= ask:
                if give_up():
                    return False
                ask = now + _GIVE_UP_EVERY_S
            time.sleep(step)
            step = min(2 * step, _STEP_S)
        return True

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
