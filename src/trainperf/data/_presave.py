"""Pre-saving: build the batches once, write them to shards, and train from the shards."""

from __future__ import annotations

import json
import os
import random
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..base import atomic_write

__all__ = ["presave", "load_presaved", "PresavedDataset", "CorruptShardError"]

MANIFEST = "manifest.json"
FORMAT = "trainperf-presave/1"


class CorruptShardError(OSError):
    """A shard is missing, truncated or damaged; the message names it."""


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def presave(source: Iterable[Any], path: str | os.PathLike[str], *, batches_per_shard: int = 64) -> Path:
    """Write every batch of ``source`` (tensors, nested tuples, lists and dicts of them) to shards.

    Each shard is written to a temporary file and renamed into place; the manifest (batch counts,
    sizes and CRC-32 checksums) is written last, so an interrupted pre-save leaves no manifest
    and is never mistaken for a complete one.

    Args:
        source: the loader whose batches to keep (iterated once).
        path: a folder, created if needed; existing shards there are replaced.
        batches_per_shard: batches per file (a positive int).

    Returns:
        The folder.
    """
    import torch

    from ..torch import map_tensors

    if isinstance(batches_per_shard, bool) or not isinstance(batches_per_shard, int) or batches_per_shard < 1:
        raise ValueError(f"batches_per_shard must be a positive int, got {batches_per_shard!r}")
    if not isinstance(source, Iterable):
        raise TypeError(f"source must be iterable (a DataLoader, say), got {source!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {path!r}")
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / MANIFEST
    if manifest_path.exists():
        manifest_path.unlink()
    shards: list[dict[str, Any]] = []
    pending: list[Any] = []

    def flush() -> None:
        name = f"shard-{len(shards):05d}.pt"
        target = folder / name
        atomic_write(target, lambda f: torch.save(list(pending), f), binary=True, fsync=True)
        shards.append({"file": name, "batches": len(pending), "bytes": target.stat().st_size,
                       "crc32": _crc32(target)})
        pending.clear()

    for batch in source:
        pending.append(map_tensors(batch, lambda t: t.detach().cpu()))
        if len(pending) == batches_per_shard:
            flush()
    if pending:
        flush()
    manifest = {"format": FORMAT, "batches": sum(s["batches"] for s in shards), "shards": shards}
    atomic_write(manifest_path, lambda f: f.write(json.dumps(manifest, indent=1).encode()), binary=True, fsync=True)
    return folder



class PresavedDataset:
    """The batches of a pre-saved folder; iterate it like a loader (also inside ``prefetch``), once per
    epoch.

    Each pass (each ``iter()``) is an epoch. With ``shuffle`` (the default) every epoch visits the
    shards in a new order and each shard's batches in a new order, drawn from ``seed`` and the
    epoch's number, so that a run is repeatable and two epochs differ; the batches themselves (their
    samples and their augmentation) are the ones saved, the same every epoch. ``shuffle=False`` reads
    them in the order they were saved.

    Shards are memory-mapped (``torch.load(mmap=True)``), so a pass reads only what it touches, and
    they are checked against the manifest's size and checksum the first time they are opened.

    Args:
        path: a folder written by :func:`presave`.
        verify: check each shard's CRC-32 when first opened (reads it once; default on).
        shuffle: a new order of shards and of batches within each shard every epoch.
        seed: the orders' seed; the epoch ``e`` order is drawn from ``(seed, e)``.
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True, shuffle: bool = True,
                 seed: int = 0) -> None:
        if not isinstance(shuffle, bool):
            raise TypeError(f"shuffle must be a bool, got {shuffle!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.shuffle, self.seed = shuffle, seed
        #: The epoch the next pass is (counts up with each pass; :meth:`set_epoch` sets it).
        self.epoch = 0
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
        except FileNotFoundError as exc:
            raise FileNotFoundError(
                f"{str(manifest_path)!r} not found: {str(self.path)!r} is not a complete pre-save"
            ) from exc
        except ValueError as exc:
            raise CorruptShardError(f"{str(manifest_path)!r} is not valid JSON: {exc}") from exc
        if manifest.get("format") != FORMAT:
            raise CorruptShardError(f"{str(manifest_path)!r}: unknown format {manifest.get('format')!r}")
        self.shards: list[dict[str, Any]] = manifest["shards"]
        self.verify = verify
        self._checked: set[str] = set()

    def __len__(self) -> int:
        return sum(int(s["batches"]) for s in self.shards)

    def _load(self, shard: dict[str, Any]) -> list[Any]:
        import torch

        file = self.path / shard["file"]
        if not file.exists():
            raise CorruptShardError(f"shard {str(file)!r} is missing")
        if shard["file"] not in self._checked:
            size = file.stat().st_size
            if size != shard["bytes"]:
                raise CorruptShardError(f"shard {str(file)!r} is truncated or damaged: {size} bytes, "
                                        f"the manifest says {shard['bytes']}")
            if self.verify and _crc32(file) != shard["crc32"]:
                raise CorruptShardError(f"shard {str(file)!r} is damaged: its checksum does not match the manifest")
            self._checked.add(shard["file"])
        try:
            batches = torch.load(file, mmap=True, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any failure to read is a damaged shard
            raise CorruptShardError(f"shard {str(file)!r} cannot be read: {exc}") from exc
        if not isinstance(batches, list) or len(batches) != shard["batches"]:
            raise CorruptShardError(f"shard {str(file)!r} does not hold the {shard['batches']} batches listed")
        return batches

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass epoch ``epoch`` (as ``DistributedSampler.set_epoch``: resuming a run, or
        every rank of a distributed run passing through the same order)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = epoch

    def order(self, epoch: int) -> list[tuple[int, list[int]]]:
        """Epoch ``epoch``'s order: ``(shard index, [batch index within it, ...])`` in reading order."""
        shards = [(i, list(range(int(s["batches"])))) for i, s in enumerate(self.shards)]
        if not self.shuffle:
            return shards
        rng = random.Random(f"{self.seed}:{epoch}")  # a str seed hashes the same in every process
        rng.shuffle(shards)
        for _, batches in shards:
            rng.shuffle(batches)
        return shards

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch
        self.epoch += 1
        for shard, batches in self.order(epoch):
            loaded = self._load(self.shards[shard])
            for b in batches:
                yield loaded[b]


def load_presaved(path: str | os.PathLike[str], *, verify: bool = True, shuffle: bool = True,
                  seed: int = 0) -> PresavedDataset:
    """Open a folder written by :func:`presave`; see :class:`PresavedDataset` (each pass is an epoch
    in a new, seeded order unless ``shuffle=False``)."""
    return PresavedDataset(path, verify=verify, shuffle=shuffle, seed=seed)
