"""Fixes for input-bound training: background prefetching, device prefetching, pre-saved datasets."""

from ._device import DevicePrefetcher
from ._prefetch import Prefetcher, prefetch
from ._presave import CorruptShardError, PresavedDataset, load_presaved, presave

__all__ = [
    "CorruptShardError",
    "DevicePrefetcher",
    "PresavedDataset",
    "Prefetcher",
    "load_presaved",
    "prefetch",
    "presave",
]
