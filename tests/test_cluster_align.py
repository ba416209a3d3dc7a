"""The ranks' link aligning a peer's clock over a scripted store: the round trips it makes and the
offset it posts back (the arithmetic itself is in ``test_gather.py``)."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("torch")


class ScriptedStore:
    """A store whose pongs arrive at once, holding the peer's clock readings given."""

    def __init__(self, theirs):
        self.theirs, self.data = list(theirs), {}

    def set(self, key, value):
        self.data[key] = value

    def check(self, keys):
        return True

    def get(self, key):
        i = int(key.rsplit("/", 1)[1])
        return repr(self.theirs[i]).encode()

    def delete_key(self, key):
        self.data.pop(key, None)
        return True


def test_the_clock_estimate_keeps_the_shortest_round_trip():
    from trainperf.torch import _cluster_roles
    from trainperf.torch._cluster import Cluster

    # (sent, back) on rank 0's clock per ping, and the peer's reading in between; the peer runs 2 s behind
    trips = [(10.0, 10.010), (11.0, 11.002), (12.0, 12.0004), (13.0, 13.006)]
    trips += [(14.0 + k, 14.05 + k) for k in range(8)]
    theirs = [(s + b) / 2 - 2.0 + (0.003 if k != 2 else 0.0) for k, (s, b) in enumerate(trips)]
    readings = iter(t for trip in trips for t in trip)

    class Link:
        _store = ScriptedStore(theirs)
        timeout_s = 1.0
        _run_dir = None
        _closing = _halt = threading.Event()
        offsets: dict = {}
        _await, _has = Cluster._await, Cluster._has

        @staticmethod
        def _wall():
            return next(readings)

    link = Link()
    leader = _cluster_roles.Leader.__new__(_cluster_roles.Leader)
    leader.link, leader.store, leader.rounds = link, link._store, {}
    leader._align(1)
    offset, uncertainty = link.offsets[1]
    assert offset == pytest.approx(2.0) and uncertainty == pytest.approx(0.0002)  # the third ping's
    assert link._store.data["offset/1/0"] == f"{offset!r},{uncertainty!r}"
