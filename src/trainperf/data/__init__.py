"""Fixes for input-bound training: background prefetching and pre-saved datasets."""

from ._prefetch import Prefetcher, prefetch

__all__ = ["Prefetcher", "prefetch"]
