"""A W&B offline run's transaction log (``run-<id>.wandb``) read back: its history rows, its summary and
the metrics it defines. The file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks (counted from
the file's start) of records
(4-byte checksum, 2-byte length, 1-byte type: whole, first, middle, last), each a ``Record`` message."""

from __future__ import annotations

import glob
import json
import os
import struct
import time
from typing import Any

BLOCK = 32768


def run_file(folder: str | os.PathLike[str]) -> str:
    """The one offline run's file under ``folder`` (``wandb.init(dir=folder)``)."""
    found = glob.glob(os.path.join(os.fspath(folder), "wandb", "offline-run-*", "run-*.wandb"))
    assert len(found) == 1, found
    return found[0]


def _chunks(data: bytes):
    assert data[:4] == b":W&B", data[:7]
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            pos += left
            continue
        if pos + 7 + length > len(data):
            return  # the service has not written the rest yet
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk
            pending = b""


def read_run(path: str, wait_s: float = 20.0) -> dict[str, Any]:
    """``{"history": [row, ...], "summary": {key: value}, "metrics": [{name, glob_name, step_metric}]}``,
    once the file holds the run's ``exit`` record: ``finish()`` returns before W&B's service has written
    the file's last block, so the file is read again until then (at most ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = _read(path)
        if found["exited"] or time.monotonic() > deadline:
            assert found["exited"], f"{path} holds no exit record after {wait_s} s"
            return found
        time.sleep(0.05)


def _read(path: str) -> dict[str, Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    exited = False
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    metrics: list[dict[str, str]] = []
    with open(path, "rb") as f:
        data = f.read()
    for raw in _chunks(data):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "exit":
            exited = True
        elif kind == "metric":
            m = record.metric
            metrics.append({"name": m.name, "glob_name": m.glob_name, "step_metric": m.step_metric})
    return {"history": history, "summary": summary, "metrics": metrics, "exited": exited}
