"""The run's memory, window after window: the floors that may grow (CUDA's allocated memory between steps,
the process's resident memory) and the caching allocator's reserved memory, read from each window's
hardware figures. It knows nothing of the listener; the publisher calls it under the listener's lock."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..records import FloorTrend, Growth, ReservedTrend

__all__: list[str] = []


class MemoryWatch:
    """What each window's memory figures say: growth of a floor (the window's verdict), or
    fragmentation (said once through ``say``).

    Args:
        say: called with a message to say once (fragmentation).
    """

    __slots__ = ("_device", "_host", "_reserved", "_say")

    def __init__(self, say: Callable[[str], None]) -> None:
        self._device = FloorTrend("allocated floor", "the device")
        self._host = FloorTrend("resident memory in use", "the machine's memory")
        self._reserved = ReservedTrend()
        self._say = say

    def observe(self, iteration: int, hardware: Mapping[str, float | None], *, warmup: bool) -> Growth | None:
        """The growth judged after a window ending at ``iteration`` with these figures, ``None`` when none:
        the device's floor first, then the host's."""
        if not hardware:
            return None
        get = hardware.get
        device = self._device.add(iteration, get("cuda_allocated_floor_mb"), get("cuda_headroom_mb"), warmup=warmup)
        floor, rss = get("rss_floor_mb"), get("rss_mb")
        host = self._host.add(iteration, floor if floor is not None else rss, get("rss_headroom_mb"),
                              warmup=warmup, held_mb=rss if floor is not None else None)
        notice = self._reserved.add(iteration, get("cuda_reserved_max_mb"), get("cuda_allocated_max_mb"),
                                    get("cuda_fragmentation_mb"), get("cuda_inactive_split_pct"), warmup=warmup)
        if notice is not None:
            self._say(notice)
        return device if device is not None else host
