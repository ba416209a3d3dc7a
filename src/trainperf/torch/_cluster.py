"""trainperf's own traffic between the ranks of a ``torch.distributed`` run.

On a gloo group of its own, with small CPU tensors and point-to-point messages (never on the
training's NCCL group, never touching the device):

* **clocks**: rank 0 estimates each rank's wall-clock offset by ping-pong (several round trips,
  the shortest kept; uncertainty = half of it), at start and every few gathers, so drift shows;
* **gathers**: every ``every`` reports each rank sends rank 0 its mean figures over those reports
  (nine numbers); rank 0 names the straggler and its cause in one cluster line;
* **files**: at the end each rank sends rank 0 its run-directory files, so that rank 0's folder
  alone is enough for ``trainperf report`` when the ranks' disks are not shared.

A rank that does not answer within ``timeout_s`` is marked silent (said once, written to the run
directory) and left out from then on: no rank waits for it again. Any failure of this traffic
turns it off with one warning; training goes on.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .._listener import PerformanceListener
from .._record import PerformanceRecord
from .._stragglers import RankFigures, cluster_line, find_stragglers
from ..sinks._rundir import RunDirSink, rank_dir

__all__ = ["Cluster"]

_LOG = logging.getLogger("trainperf")
#: The figures a rank sends per gather: sequence number, wall time, iterations, then mean
#: milliseconds per iteration of data wait, forward (NaN when unknown), step, other host time and
#: iteration time, and the last iteration number.
_FIELDS = 9
#: Round trips per clock estimate; the shortest counts.
_PINGS = 8
#: Clocks are estimated again every this many gathers.
_CLOCK_EVERY = 10
#: The run-directory files sent to rank 0 at the end.
_FILES = ("meta.json", "windows.jsonl", "timeline.jsonl", "clock.jsonl")
#: At most this many bytes of one rank's files go to rank 0.
_MAX_FILE_BYTES = 64 << 20


class Cluster:
    """The ranks' link for one listener: a sink that, every ``every`` reports, gathers the ranks'
    figures on rank 0; see the module's docstring.

    Args:
        listener: this rank's listener.
        every: gather every this many reports.
        timeout_s: the longest any rank waits for another.
        wall_clock: the clock whose offsets are estimated (the listener's wall clock).
    """

    def __init__(
        self,
        listener: PerformanceListener,
        *,
        every: int = 10,
        timeout_s: float = 30.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.listener = listener
        self.every = every
        self.timeout_s = timeout_s
        self._wall = wall_clock
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.group: Any = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        self.silent: dict[int, float] = {}
        self.offsets: dict[int, tuple[float, float]] = {}
        self.lines: list[str] = []
        self._on = True
        self._reports: list[PerformanceRecord] = []
        self._gathers = 0
        self._seq = 0
        self._run_dir = next((s for s in listener.sinks if isinstance(s, RunDirSink)), None)
        self.align_clocks()

    # -- the sink --------------------------------------------------------------------------------
    def __call__(self, record: PerformanceRecord) -> None:
        if not self._on:
            return
        self._reports.append(record)
        if len(self._reports) >= self.every:
            self.gather()

    def close(self) -> None:
        """A last gather of what is left, then the files to rank 0; the group is released."""
        if not self._on:
            return
        if self._reports:
            self.gather()
        self._send_files()
        self._on = False

    # -- clocks ----------------------------------------------------------------------------------
    def align_clocks(self) -> None:
        """Estimate every rank's offset to rank 0's wall clock; each rank writes its own."""
        self._guard(self._align)

    def _align(self) -> None:
        buf = torch.zeros(2, dtype=torch.float64)
        if self.rank == 0:
            for peer in self._peers():
                best: tuple[float, float] | None = None
                for _ in range(_PINGS):
                    sent = self._wall()
                    if not self._p2p(dist.send, torch.tensor([sent, 0.0], dtype=torch.float64), peer):
                        break
                    if not self._p2p(dist.recv, buf, peer):
                        break
                    back = self._wall()
                    rtt = back - sent
                    offset = (sent + back) / 2.0 - float(buf[0])  # add to the peer's clock: rank 0's
                    if best is None or rtt / 2.0 < best[1]:
                        best = (offset, rtt / 2.0)
                if best is not None and peer not in self.silent:
                    self.offsets[peer] = best
                    self._p2p(dist.send, torch.tensor(best, dtype=torch.float64), peer)
            if self._run_dir is not None:
                self._run_dir.clock(self._wall(), 0.0, 0.0, "reference")
            return
        for _ in range(_PINGS):
            if not self._p2p(dist.recv, buf, 0):
                return
            self._p2p(dist.send, torch.tensor([self._wall(), 0.0], dtype=torch.float64), 0)
        if self._p2p(dist.recv, buf, 0):
            offset, uncertainty = float(buf[0]), float(buf[1])
            self.offsets[self.rank] = (offset, uncertainty)
            if self._run_dir is not None:
                self._run_dir.clock(self._wall(), offset, uncertainty, "aligned")

    # -- gathers ---------------------------------------------------------------------------------
    def gather(self) -> None:
        """Send this rank's figures since the last gather to rank 0; rank 0 names the straggler."""
        reports, self._reports = self._reports, []
        self._seq += 1
        self._guard(lambda: self._gather(reports))
        self._gathers += 1
        if self._on and self._gathers % _CLOCK_EVERY == 0:
            self.align_clocks()

    def _gather(self, reports: list[PerformanceRecord]) -> None:
        mine = _figures(self._seq, self._wall(), reports)
        if self.rank != 0:
            self._p2p(dist.send, mine, 0)
            return
        received = {0: mine}
        for peer in self._peers():
            buf = torch.zeros(_FIELDS, dtype=torch.float64)
            if self._p2p(dist.recv, buf, peer):
                received[peer] = buf
        found = [_rank_figures(rank, values) for rank, values in sorted(received.items())]
        figures = [f for f in found if f is not None]
        if len(figures) < 2:
            return
        stragglers = find_stragglers(figures)
        line = cluster_line(figures, stragglers)
        last = int(max(float(v[8]) for v in received.values()))
        text = f"cluster at iteration {last}: {line}"
        if self.silent:
            text += "; silent: " + ", ".join(f"rank {r}" for r in sorted(self.silent))
        self.lines.append(text)
        _LOG.info("%s", text)
        if self._run_dir is not None:
            self._run_dir.event(
                {
                    "kind": "cluster",
                    "iteration": last,
                    "line": line,
                    "stragglers": [
                        {"rank": s.rank, "cause": s.cause, "excess_ms": s.excess_ms, "evidence": s.evidence}
                        for s in stragglers
                    ],
                }
            )

    # -- files -----------------------------------------------------------------------------------
    def _send_files(self) -> None:
        if self._run_dir is None:
            return
        run_dir = self._run_dir
        self._guard(lambda: self._files(run_dir))

    def _files(self, sink: RunDirSink) -> None:
        own = sink.path
        if self.rank != 0:
            blob = bytearray()
            for name in _FILES:
                path = own / name
                data = path.read_bytes() if path.exists() else b""
                data = data[-_MAX_FILE_BYTES:]
                blob += len(data).to_bytes(8, "little") + data
            self._p2p(dist.send, torch.tensor([len(blob)], dtype=torch.int64), 0)
            self._p2p(dist.send, torch.frombuffer(blob, dtype=torch.uint8) if blob else torch.zeros(0), 0)
            return
        for peer in self._peers():
            size = torch.zeros(1, dtype=torch.int64)
            if not self._p2p(dist.recv, size, peer):
                continue
            blob_t = torch.empty(int(size[0]), dtype=torch.uint8)
            if not self._p2p(dist.recv, blob_t, peer):
                continue
            _write_peer_files(rank_dir(sink.path.parent, peer), bytes(blob_t.numpy()))

    # -- plumbing --------------------------------------------------------------------------------
    def _peers(self) -> list[int]:
        return [r for r in range(1, self.world) if r not in self.silent]

    def _p2p(self, op: Callable[..., Any], tensor: torch.Tensor, peer: int) -> bool:
        """One blocking send or receive with ``peer``; a peer that fails or does not answer within
        the group's timeout is marked silent (rank 0) or ends the traffic (other ranks)."""
        if peer in self.silent:
            return False
        try:
            op(tensor, peer, group=self.group)
            return True
        except RuntimeError as exc:
            if self.rank == 0:
                self._mark_silent(peer, exc)
            else:
                self._stop(f"rank 0 did not answer ({exc}); per-rank figures stay in this rank's files")
            return False

    def _mark_silent(self, peer: int, exc: BaseException) -> None:
        now = self._wall()
        self.silent[peer] = now
        warnings.warn(
            f"trainperf: rank {peer} went silent ({type(exc).__name__}); the others go on without it",
            RuntimeWarning,
            stacklevel=2,
        )
        if self._run_dir is not None:
            self._run_dir.event({"kind": "silent", "rank": peer, "last_seen": now})

    def _guard(self, work: Callable[[], None]) -> None:
        if not self._on:
            return
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - our own traffic must never stop training
            self._stop(f"{type(exc).__name__}: {exc}")

    def _stop(self, why: str) -> None:
        if self._on:
            self._on = False
            warnings.warn(f"trainperf: figures across ranks are off for this run: {why}", RuntimeWarning, stacklevel=3)


def _figures(seq: int, wall: float, reports: list[PerformanceRecord]) -> torch.Tensor:
    """This rank's mean figures per iteration over ``reports``, as the tensor rank 0 receives."""
    n = sum(r.window_iterations for r in reports)

    def mean(name: str) -> float:
        if n == 0:
            return math.nan
        total = 0.0
        for r in reports:
            value = r.extra.get(name) if name.endswith("forward_ms") else getattr(r, name)
            if value is None:
                return math.nan
            total += float(value) * r.window_iterations
        return total / n

    last = reports[-1].iteration if reports else 0
    values = [float(seq), wall, float(n), mean("etl_ms"), mean("forward_ms"), mean("compute_ms"),
              mean("other_ms"), mean("iteration_ms"), float(last)]
    return torch.tensor(values, dtype=torch.float64)


def _rank_figures(rank: int, values: torch.Tensor) -> RankFigures | None:
    v = [float(x) for x in values]
    if v[2] <= 0 or any(math.isnan(x) for x in (v[3], v[5], v[6], v[7])):
        return None
    return RankFigures(rank=rank, iterations=int(v[2]), etl_ms=v[3], forward_ms=None if math.isnan(v[4]) else v[4],
                       compute_ms=v[5], other_ms=v[6], iteration_ms=v[7])


def _write_peer_files(folder: Path, blob: bytes) -> None:
    """Write a peer's files under rank 0's run directory, unless the folder already has them (a
    shared disk): what the peer wrote itself is never replaced."""
    folder.mkdir(parents=True, exist_ok=True)
    pos = 0
    for name in _FILES:
        size = int.from_bytes(blob[pos : pos + 8], "little")
        data = blob[pos + 8 : pos + 8 + size]
        pos += 8 + size
        path = folder / name
        if data and not path.exists():
            tmp = path.with_suffix(path.suffix + ".part")
            tmp.write_bytes(data)
            tmp.replace(path)


def forward_timer(listener: PerformanceListener, clock: Callable[[], float]) -> tuple[
    Callable[[tuple[Any, ...], dict[str, Any]], None], Callable[[], None]
]:
    """A pair of forward callbacks (before, after) that add each forward pass's host time to the
    listener as ``"forward"``: what tells a rank with slow compute from one with slow data."""
    started = [0.0]

    def before(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        started[0] = clock()

    def after() -> None:
        listener.add_time("forward", clock() - started[0])

    return before, after
