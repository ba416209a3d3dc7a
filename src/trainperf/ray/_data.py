"""Ray Data input: a dataset shard's batches timed as :func:`~trainperf.torch.timed` times a loader, with
Ray Data's own account of the wait beside them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..core import PerformanceListener
from ..torch import TimedLoader, timed
from ..torch.shared import listeners_of

__all__ = ["RAY_DATA_TIMERS", "ShardBatches", "batches"]

#: Ray Data's cumulative timers of a shard's iteration (``DatasetStats``) and the part names they are
#: recorded under: records carry each one's seconds per iteration as ``extra["<name>_ms"]``.
RAY_DATA_TIMERS: tuple[tuple[str, str], ...] = (
    ("iter_total_blocked_s", "ray_data_blocked"),  # the training thread blocked in next(), in all
    ("iter_blocked_production_wait_s", "ray_data_production_wait"),  # of it: the pipeline had no batch ready
    ("iter_blocked_data_transfer_s", "ray_data_transfer"),  # of it: blocks fetched from the object store
    ("iter_blocked_format_s", "ray_data_format"),  # of it: batches formatted (to tensors)
    ("iter_blocked_collate_s", "ray_data_collate"),  # of it: the collate function
)


def _timers(shard: Any) -> list[tuple[str, Any]]:
    """The shard's timers that can be read (``Timer.get()``: total seconds), by part name. They are Ray
    Data's private statistics (``DataIterator._iter_stats``), so any that is missing or not a timer is
    left out, and none at all when the shard keeps none."""
    stats = getattr(shard, "_iter_stats", None)
    found = []
    for attribute, name in RAY_DATA_TIMERS:
        timer = getattr(stats, attribute, None)
        if callable(getattr(timer, "get", None)):
            found.append((name, timer))
    return found


def _seconds(timer: Any) -> float | None:
    try:
        value = float(timer.get())
    except Exception:  # noqa: BLE001 - Ray's private statistics: a change there must not stop training
        return None
    return value if value >= 0.0 else None


class ShardBatches(Iterable[Any]):
    """A Ray Data shard's batches (``iter_torch_batches``'s iterable) that hands Ray Data's own timing of
    each batch to the listeners: after each batch, what each of the shard's timers grew by since the batch
    before is added to the window as a named part (:meth:`PerformanceListener.add_time`).

    Args:
        shard: the ``ray.data.DataIterator`` (``ray.train.get_dataset_shard(...)``).
        iterable: the shard's batches (``shard.iter_torch_batches(...)``).
        targets: listeners, or models with listeners attached (resolved on each ``iter()``).
    """

    def __init__(self, shard: Any, iterable: Iterable[Any], *targets: Any) -> None:
        listeners_of(targets)  # a bad target is named now, not at the first batch
        self.shard, self.iterable, self.targets = shard, iterable, targets

    def __iter__(self) -> Iterator[Any]:
        listeners: list[PerformanceListener] = listeners_of(self.targets)
        timers = _timers(self.shard)
        last = [_seconds(timer) for _, timer in timers]
        for batch in self.iterable:
            for k, (name, timer) in enumerate(timers):
                now, before = _seconds(timer), last[k]
                last[k] = now
                if now is not None and before is not None and now > before:
                    for listener in listeners:
                        listener.add_time(name, now - before)
            yield batch


def batches(shard: Any, *targets: Any, **options: Any) -> TimedLoader[Any]:
    """``shard.iter_torch_batches(**options)`` for a training loop: every ``next()`` is the iteration's data
    wait (the time the training thread blocked in Ray Data's iterator, as :func:`~trainperf.torch.timed`
    times a loader), and each window's record carries Ray Data's own account of that wait per iteration:
    ``extra["ray_data_blocked_ms"]`` (in all), of it ``ray_data_production_wait_ms`` (the dataset's
    pipeline had no batch ready: its stages are too slow or too few), ``ray_data_transfer_ms`` (blocks
    fetched from the object store), ``ray_data_format_ms`` and ``ray_data_collate_ms``; a figure Ray does
    not keep is left out.

    Args:
        shard: the worker's ``ray.data.DataIterator`` (``ray.train.get_dataset_shard("train")``).
        targets: listeners, or models with listeners attached (as for :func:`~trainperf.torch.timed`).
        options: ``iter_torch_batches``'s arguments (``batch_size``, ``prefetch_batches``, ...).

    Raises:
        TypeError: ``shard`` has no ``iter_torch_batches``, or a target is neither a listener nor a
            listened-to model (named).
        ValueError: no target is given.
    """
    if not callable(getattr(shard, "iter_torch_batches", None)):
        raise TypeError(f"shard must be a Ray Data iterator (ray.train.get_dataset_shard(...)), got {shard!r}")
    if not targets:
        raise ValueError("batches() needs at least one listener or listened-to model in targets")
    return timed(ShardBatches(shard, shard.iter_torch_batches(**options), *targets), *targets)
