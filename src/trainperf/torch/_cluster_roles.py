"""Rank 0's role on a ranks' link (:class:`~trainperf.torch._cluster.Cluster`), the leader: welcomes,
clock estimates, gathers and the cluster line, silence, the files at close; and the link's timings.
Every rank's role, the member, is :mod:`trainperf.torch._cluster_member`."""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..ranks import RANK_FILES, LiveJudge, clock_offset, cluster_line, mean_figures, rank_dir, rank_figures
from ..records import PerformanceRecord

if TYPE_CHECKING:
    from ._cluster import Cluster

__all__: list[str] = []

_LOG = logging.getLogger("trainperf")
#: Round trips per clock estimate; the shortest counts.
_PINGS = 12
#: Clocks are estimated again every this many gathers.
_CLOCK_EVERY = 10
#: The run-directory files sent to rank 0 at the end.
_FILES = RANK_FILES
#: At most this many bytes of one rank's files go to rank 0, in pieces of ``_CHUNK`` bytes (a
#: store takes values of a few MiB at most).
_MAX_FILE_BYTES = 64 << 20
_CHUNK = 1 << 20
#: How often the link's thread looks for work when idle, and how often a rank posts a heartbeat.
_POLL_S = 0.05
_BEAT_S = 1.0
#: At close, a rank whose heartbeat is older than this has died: rank 0 waits no longer for it.
_DEAD_AFTER_S = 3 * _BEAT_S
#: At exit without a close (a crash), rank 0 waits at most this long for the others' last word.
_EXIT_WAIT_S = 4.0
#: How often rank 0 looks for the others' goodbyes while it closes.
_CLOSE_POLL_S = 0.05
#: Rank 0's windows wait for the others' figures over the same iterations at most this many gathers;
#: past it a lagging rank's newest figures stand in (its thread, not its training, is late).
_MAX_DEFERRED = 3
#: Each rank's last few posted figures kept, to pair with rank 0's window over the same iterations.
_KEEP_POSTED = 8


class Leader:
    """Rank 0: welcomes the ranks, estimates their clocks, reads their figures, names stragglers."""

    def __init__(self, link: Cluster) -> None:
        self.link = link
        self.store = link._store
        self.began = time.monotonic()
        self.waiting = set(range(1, link.world))  # not joined yet
        self.seen: dict[int, float] = {}  # rank -> monotonic time of its last sign of life
        self.wall_seen: dict[int, float] = {}  # rank -> its last heartbeat, on its wall clock
        self.latest: dict[int, dict[str, Any]] = {}
        self.posted: dict[int, deque[dict[str, Any]]] = {}  # rank -> its last few figures, oldest first
        self.deferred: deque[dict[str, Any]] = deque()  # rank 0's windows not yet in a line
        self.next_seq: dict[int, int] = {}
        self.rounds: dict[int, int] = {}
        self.gathers = 0
        self.judge = LiveJudge()  # each gather judged against the ones before it
        self.last_look = 0.0

    def run(self) -> None:
        link = self.link
        if link._run_dir is not None:
            link._run_dir.clock(link._wall(), 0.0, 0.0, "reference")
        while not link._halt.is_set():
            task = link._next_task(_POLL_S)
            if link._on and self.waiting and time.monotonic() - self.last_look >= 0.1:
                self._welcome()
            if task is None:
                continue
            kind, reports = task
            if kind in ("close", "exit"):
                if link._on:
                    self._close(reports or [], exiting=kind == "exit")
                return
            if link._on:
                self._gather(reports)

    def _welcome(self) -> None:
        link = self.link
        self.last_look = time.monotonic()
        for peer in sorted(self.waiting):
            if link._has(f"hello/{peer}"):
                self.waiting.discard(peer)
                link.joined.add(peer)
                self.seen[peer] = time.monotonic()
                self.store.set(f"welcome/{peer}", "1")
                self.next_seq[peer] = 1
                self._align(peer)
        if self.waiting and time.monotonic() - self.began > link.timeout_s:
            missing = ", ".join(str(r) for r in sorted(self.waiting))
            self.waiting.clear()
            if not link.joined:
                link._off(f"no other rank linked within {link.timeout_s:g} s (listeners on rank 0 only?); "
                          "figures across ranks are off, this rank's own are kept")
            else:
                link._messages.append(f"rank(s) {missing} did not link within {link.timeout_s:g} s; "
                                      "the cluster view covers the others")

    def _align(self, peer: int) -> None:
        """Ping-pong with ``peer``; the shortest round trip gives its offset, posted back to it. Rounds
        after the first (which a rank waits for before it closes) neither start nor go on once rank 0 is
        closing, and no round waits on a peer that is closing or has died."""
        link, store = self.link, self.store
        k = self.rounds.get(peer, 0)
        first = k == 0
        if not first and (link._closing.is_set() or self._leaving(peer)):
            return

        def give_up() -> bool:
            return (not first and link._closing.is_set()) or self._leaving(peer)

        self.rounds[peer] = k + 1
        trips: list[tuple[float, float, float]] = []
        for i in range(_PINGS):
            sent = link._wall()
            store.set(f"ping/{peer}/{k}/{i}", repr(sent))
            key = f"pong/{peer}/{k}/{i}"
            if not link._await(key, link.timeout_s if i == 0 else 1.0, give_up):
                break
            back = link._wall()
            trips.append((sent, float(store.get(key).decode()), back))
        for i in range(_PINGS):
            for name in ("ping", "pong"):
                store.delete_key(f"{name}/{peer}/{k}/{i}")
        best = clock_offset(trips)
        offset, half = best if best is not None else (math.nan, math.nan)
        store.set(f"offset/{peer}/{k}", f"{offset!r},{half!r}")
        if best is not None:
            link.offsets[peer] = best

    def _live_peers(self) -> list[int]:
        return [p for p in sorted(self.link.joined) if p not in self.link.silent]

    def _age(self, peer: int) -> float:
        """Seconds since ``peer``'s last sign of life, as far as rank 0 has read."""
        return time.monotonic() - self.seen.get(peer, self.began)

    def _leaving(self, peer: int) -> bool:
        """Whether ``peer`` will answer no more pings: it is closing or ended, or it has died."""
        self._read(peer)
        return self.link._has(f"closing/{peer}") or self._age(peer) > _DEAD_AFTER_S

    def _read(self, peer: int) -> bool:
        """Read what ``peer`` posted since the last look; whether it closed."""
        link = self.link
        while True:
            value = link._take(f"fig/{peer}/{self.next_seq[peer]}")
            if value is None:
                break
            self.next_seq[peer] += 1
            self.latest[peer] = figures = json.loads(value)
            self.posted.setdefault(peer, deque(maxlen=_KEEP_POSTED)).append(figures)
            self.seen[peer] = time.monotonic()
        beat = link._take(f"beat/{peer}")
        if beat is not None:  # when it was posted, on rank 0's clock: an old beat read late is still old
            posted = float(beat.decode()) + link.offsets.get(peer, (0.0, 0.0))[0]
            # before its first clock estimate a rank's clock may be off by any amount: the beat is new
            age = max(0.0, link._wall() - posted) if peer in link.offsets else 0.0
            self.seen[peer] = time.monotonic() - age
            self.wall_seen[peer] = posted
        return link._has(f"bye/{peer}")

    def _gather(self, reports: list[PerformanceRecord]) -> None:
        link = self.link
        now = time.monotonic()
        for peer in self._live_peers():
            self._read(peer)
            silent_s = now - self.seen.get(peer, now)
            if silent_s > link.timeout_s:
                self._silent(peer, f"went silent: no heartbeat for {silent_s:.0f} s")
        if reports:
            self.deferred.append(mean_figures(reports))
        self._lines(final=False)
        self.gathers += 1
        if self.gathers % _CLOCK_EVERY == 0 and not link._closing.is_set():
            for peer in self._live_peers():
                self._align(peer)

    def _lines(self, *, final: bool) -> None:
        """A cluster line for each of rank 0's windows, oldest first, beside each other rank's figures
        over the same iterations. A window whose iterations a rank has not posted yet waits for them
        (at most ``_MAX_DEFERRED`` gathers; at close, ``final``, none waits)."""
        while self.deferred:
            own = self.deferred[0]
            behind = [p for p in self._live_peers() if p in self.posted
                      and int(self.posted[p][-1].get("last", 0)) < int(own.get("first", 0))]
            if behind and not final and len(self.deferred) <= _MAX_DEFERRED:
                return
            self.deferred.popleft()
            self._line(own, {p: _same_iterations(self.posted[p], own) for p in self._live_peers()
                             if p in self.posted})

    def _line(self, own: dict[str, Any] | None, peers: dict[int, dict[str, Any]]) -> None:
        link = self.link
        found = [rank_figures(0, own)] if own is not None else []
        found += [rank_figures(peer, figures) for peer, figures in sorted(peers.items())]
        figures = [f for f in found if f is not None]
        if len(figures) < 2:
            return
        stragglers = self.judge.see(figures)
        line = cluster_line(figures, stragglers)
        last = max(int(own.get("last", 0)) if own is not None else 0,
                   *(int(f.get("last", 0)) for f in peers.values()))
        text = f"cluster at iteration {last}: {line}"
        if link.silent:
            text += "; silent: " + ", ".join(f"rank {r}" for r in sorted(link.silent))
        link.lines.append(text)
        _LOG.info("%s", text)
        times = [f.iteration_ms for f in figures]
        event = {
            "kind": "cluster", "iteration": last, "line": line,
            "stragglers": [{"rank": s.rank, "cause": s.cause, "excess_ms": s.excess_ms, "evidence": s.evidence}
                           for s in stragglers],
        }
        if link._run_dir is not None:
            link._run_dir.event(event)
        # the sinks' word (on the training thread's next report): the line with the world's figures
        link.events.append({**event, "time": link._wall(), "ranks": len(figures), "iteration_ms_min": min(times),
                            "iteration_ms_max": max(times), "etl_ms_max": max(f.etl_ms for f in figures),
                            "spread_pct": 100.0 * (max(times) - min(times)) / min(times) if min(times) > 0 else 0.0})

    def _silent(self, peer: int, why: str) -> None:
        link = self.link
        last = self.wall_seen.get(peer)
        if last is None:
            last = link._wall() - (time.monotonic() - self.seen.get(peer, self.began))
        link.silent[peer] = last
        link._messages.append(f"rank {peer} {why}; the others go on without it")
        if link._run_dir is not None:
            link._run_dir.event({"kind": "silent", "rank": peer, "last_seen": last, "why": why})

    def _close(self, reports: list[PerformanceRecord], *, exiting: bool = False) -> None:
        """Wait for the others' goodbyes (for how long: ``_cluster``'s docstring), name the ranks that gave
        none and why, write the files of those that did. At the process's end without a close
        (``exiting``), only the naming, and not of a rank that ended the same way."""
        link = self.link
        limit = min(link.timeout_s, _EXIT_WAIT_S) if exiting else link.timeout_s
        deadline = time.monotonic() + limit
        closed: set[int] = set()
        gone: dict[int, str | None] = {}  # rank -> why it is not waited for (None: not to be named)
        while True:
            if self.waiting and not exiting:  # a short run: ranks may link now (or be given up on, once)
                self._welcome()
            for peer in self._live_peers():
                if peer in closed or peer in gone:
                    continue
                if self._read(peer):
                    closed.add(peer)
                elif link._has(f"exit/{peer}"):  # at rank 0's own crash: the run failed on every rank
                    gone[peer] = None if exiting else "ended without closing its listener"
                elif self._age(peer) > _DEAD_AFTER_S:
                    gone[peer] = f"died: no heartbeat for {self._age(peer):.0f} s"
            pending = [p for p in self._live_peers() if p not in closed and p not in gone]
            if ((not pending and (exiting or not self.waiting)) or time.monotonic() > deadline
                    or not link._on or link._halt.is_set()):
                break
            time.sleep(_CLOSE_POLL_S)
        for peer in pending:
            gone[peer] = f"did not close within {limit:g} s, though alive (its heartbeat went on)"
        for peer, why in sorted(gone.items()):
            if why is not None:
                self._silent(peer, why)
        if not exiting and reports:
            self.deferred.append(mean_figures(reports))
        if not exiting and self.deferred:
            self._lines(final=True)
        elif not exiting and closed:  # the last line names the ranks just found silent
            self._line(None, {p: self.latest[p] for p in self._live_peers() if p in self.latest})
        if exiting:
            return
        run_dir = link._run_dir
        for peer in sorted(closed):
            files = self._files(peer)
            if run_dir is not None:
                _write_peer_files(rank_dir(run_dir.path.parent, peer), files)
            link._store.delete_key(f"bye/{peer}")

    def _files(self, peer: int) -> dict[str, bytes]:
        link, out = self.link, {}
        for name in _FILES:
            count = link._take(f"file/{peer}/{name}")
            if count is None:
                continue
            pieces = [link._take(f"file/{peer}/{name}/{k}") or b"" for k in range(int(count.decode()))]
            out[name] = b"".join(pieces)
        return out


def _same_iterations(posted: deque[dict[str, Any]], own: dict[str, Any]) -> dict[str, Any]:
    """Of a rank's ``posted`` figures, those over the iterations nearest ``own``'s: the most iterations
    in common, then the nearest last iteration (ranks gathering at other rates share no window)."""
    first, last = int(own.get("first", 0)), int(own.get("last", 0))

    def fit(figures: dict[str, Any]) -> tuple[int, int]:
        a, b = int(figures.get("first", 0)), int(figures.get("last", 0))
        return min(b, last) - max(a, first), -abs(b - last)

    return max(posted, key=fit)


def _write_peer_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write a peer's files under rank 0's run directory, unless the folder already has them (a
    shared disk): what the peer wrote itself is never replaced."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        if data and not path.exists():
            tmp = path.with_suffix(path.suffix + ".part")
            tmp.write_bytes(data)
            tmp.replace(path)
