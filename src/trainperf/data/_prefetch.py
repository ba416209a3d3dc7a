"""Background prefetching for any iterable, with optional copies to a device on a side stream."""

from __future__ import annotations

import queue
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Generic, TypeVar

__all__ = ["prefetch", "Prefetcher"]

T = TypeVar("T")

_DONE = object()


class _Failure:
    __slots__ = ("exc", "tb")

    def __init__(self, exc: BaseException, tb: TracebackType | None) -> None:
        self.exc = exc
        self.tb = tb


def _produce(source: Iterator[Any], slots: queue.Queue[Any], stop: threading.Event) -> None:
    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    try:
        for item in source:
            if not put(item):
                return
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer
        put(_Failure(exc, sys.exc_info()[2]))
        return
    finally:
        close = getattr(source, "close", None)
        if close is not None and stop.is_set():
            try:
                close()
            except Exception:  # noqa: BLE001
                pass
    put(_DONE)


class Prefetcher(Generic[T]):
    """Iterates ``source`` on a background thread, at most ``depth`` items ahead of the consumer.

    Order is preserved; an exception raised by the source is re-raised in the consumer with its
    original traceback; stopping early (``break``, :meth:`close`, or dropping the iterator) stops
    the thread. Each ``iter()`` starts a fresh pass over ``source``.

    Args:
        source: any iterable (a DataLoader, a generator, a list).
        depth: how many items may wait ready (a positive int); memory is bounded by it: at most
            ``depth`` items in the queue plus the one the thread is producing.
        to_device: also copy each batch to this device one step ahead, on a side CUDA stream from
            pinned memory (see :class:`DevicePrefetcher`); on a CPU device nothing more happens.
    """

    def __init__(self, source: Iterable[T], depth: int = 2, *, to_device: Any = None) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive int, got {depth!r}")
        if not isinstance(source, Iterable):
            raise TypeError(f"source must be iterable, got {type(source).__name__}")
        self.source = source
        self.depth = depth
        self.to_device = to_device
        if to_device is not None:
            from ._device import DevicePrefetcher

            DevicePrefetcher((), to_device)  # checks the device now, not at the first batch

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        background: Iterator[T] = _PrefetchIterator(iter(self.source), self.depth)
        if self.to_device is not None:
            from ._device import DevicePrefetcher

            return iter(DevicePrefetcher(_Once(background), self.to_device))
        return background


class _Once(Iterable[T]):
    def __init__(self, iterator: Iterator[T]) -> None:
        self.iterator = iterator

    def __iter__(self) -> Iterator[T]:
        return self.iterator


class _PrefetchIterator(Iterator[T]):
    def __init__(self, source: Iterator[T], depth: int) -> None:
        self._slots: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_produce, args=(source, self._slots, self._stop), name="trainperf-prefetch", daemon=True
        )
        self._finished = False
        # Stop the producer when this iterator is garbage-collected without being exhausted.
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self._thread)
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        item = self._slots.get()
        if item is _DONE:
            self._finish()
            raise StopIteration
        if isinstance(item, _Failure):
            self._finish()
            raise item.exc.with_traceback(item.tb)
        return item  # type: ignore[no-any-return]

    def _finish(self) -> None:
        self._finished = True
        self._finalizer()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the producer thread and wait up to ``timeout`` seconds for it to end.

        Dropping the iterator (``break`` out of a ``for`` loop) stops the thread too, without waiting:
        it ends as soon as the item it is producing is ready.
        """
        self._finish()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


def _shutdown(stop: threading.Event, thread: threading.Thread) -> None:
    stop.set()


def prefetch(source: Iterable[T], depth: int = 2, *, to_device: Any = None) -> Prefetcher[T]:
    """Load the next ``depth`` items of ``source`` in the background while the loop trains.

    Example:
        >>> for x, y in trainperf.data.prefetch(loader, depth=4, to_device="cuda"):  # doctest: +SKIP
        ...     train_step(x, y)
    """
    return Prefetcher(source, depth, to_device=to_device)
