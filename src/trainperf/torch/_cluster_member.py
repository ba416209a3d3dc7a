"""Every rank's role on a ranks' link (:class:`~trainperf.torch._cluster.Cluster`) other than rank
0's: greeting, heartbeats, pings answered, figures and files posted."""

from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING

from ..ranks import mean_figures
from ..records import PerformanceRecord
from ._cluster_roles import _BEAT_S, _CHUNK, _FILES, _MAX_FILE_BYTES, _PINGS, _POLL_S

if TYPE_CHECKING:
    from ._cluster import Cluster

__all__ = ["Member"]


class Member:
    """A rank other than 0: posts figures, answers clock pings, sends its files at the end."""

    def __init__(self, link: Cluster) -> None:
        self.link = link
        self.store = link._store
        self.rank = link.rank
        self.welcomed = False
        self.seq = 0
        self.round = 0
        self.beat = 0.0
        self.began = time.monotonic()

    def run(self) -> None:
        link = self.link
        while not link._halt.is_set():
            task = link._next_task(_POLL_S)
            self._tick()
            if task is None:
                continue
            kind, reports = task
            if kind == "close":
                self._close(reports)
                return
            if kind == "exit":
                self._exit()
                return
            if link._on and self.welcomed:
                self._post(reports)

    def _tick(self) -> None:
        link, now = self.link, time.monotonic()
        if not link._on:
            return
        if not self.welcomed:
            if link._has(f"welcome/{self.rank}"):
                self.welcomed = True
            elif now - self.began > link.timeout_s:
                link._off(f"rank 0 did not link within {link.timeout_s:g} s (no listener there?); "
                          "this rank's figures stay in its own files")
                return
        if self._beat():
            self._skip_missed_round()
        self._answer_pings()

    def _beat(self) -> bool:
        """Post a heartbeat when one is due; whether one was."""
        now = time.monotonic()
        if now - self.beat < _BEAT_S:
            return False
        self.beat = now
        self.store.set(f"beat/{self.rank}", repr(self.link._wall()))
        return True

    def _skip_missed_round(self) -> None:
        """Rank 0 gave up a clock round before this rank saw its first ping (it posts the round's
        outcome after removing the pings): go on to the next, or this rank would wait for it forever."""
        link, rank = self.link, self.rank
        if not link._has(f"ping/{rank}/{self.round}/0") and link._take(f"offset/{rank}/{self.round}") is not None:
            self.round += 1

    def _answer_pings(self) -> None:
        link, store, rank, k = self.link, self.store, self.rank, self.round
        if not link._has(f"ping/{rank}/{k}/0"):
            return
        outcome = f"offset/{rank}/{k}"

        def round_over() -> bool:  # rank 0 posted the outcome (it may cut a round short); beats go on
            self._beat()
            return link._has(outcome)

        for i in range(_PINGS):
            if not link._await(f"ping/{rank}/{k}/{i}", 1.0, round_over):
                break
            store.set(f"pong/{rank}/{k}/{i}", repr(link._wall()))
        link._await(outcome, 2.0, round_over)
        value = link._take(outcome)
        self.round += 1
        if value:
            offset, uncertainty = (float(x) for x in value.decode().split(","))
            if math.isfinite(offset):
                link.offsets[rank] = (offset, uncertainty)
                if link._run_dir is not None:
                    link._run_dir.clock(link._wall(), offset, uncertainty, "aligned")

    def _post(self, reports: list[PerformanceRecord]) -> None:
        if not reports:
            return
        self.seq += 1
        self.store.set(f"fig/{self.rank}/{self.seq}", json.dumps(mean_figures(reports)))

    def _close(self, reports: list[PerformanceRecord]) -> None:
        link = self.link
        # A short run may end before rank 0 has seen this rank: wait for its welcome and first
        # clock estimate (rank 0 looks every 0.1 s), or until the link gives up on rank 0.
        deadline = time.monotonic() + link.timeout_s
        while (link._on and (not self.welcomed or self.round == 0) and time.monotonic() < deadline
               and not link._halt.is_set()):
            self._tick()
            time.sleep(0.005)
        if not link._on or not self.welcomed:
            return
        # from here on this rank answers no pings: rank 0 starts no clock round with it, cuts one under way
        self.store.set(f"closing/{self.rank}", repr(link._wall()))
        self._post(reports)
        run_dir = link._run_dir
        if run_dir is not None:
            for name in _FILES:
                path = run_dir.path / name
                data = path.read_bytes()[-_MAX_FILE_BYTES:] if path.exists() else b""
                pieces = [data[k : k + _CHUNK] for k in range(0, len(data), _CHUNK)]
                for k, piece in enumerate(pieces):
                    if link._halt.is_set():
                        return
                    self.store.set(f"file/{self.rank}/{name}/{k}", piece)  # type: ignore[arg-type] # bytes work
                    self._beat()  # a rank sending large files is alive
                self.store.set(f"file/{self.rank}/{name}", str(len(pieces)))
        self.store.set(f"bye/{self.rank}", repr(link._wall()))

    def _exit(self) -> None:
        """The process ends without a close: say so, so that rank 0 does not wait for a goodbye."""
        link = self.link
        if link._on:
            self.store.set(f"closing/{self.rank}", repr(link._wall()))
            self.store.set(f"exit/{self.rank}", repr(link._wall()))
