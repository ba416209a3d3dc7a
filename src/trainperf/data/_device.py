"""Copy the next batch to the GPU on a side stream while the current step runs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["DevicePrefetcher"]


class DevicePrefetcher:
    """Iterates ``source`` one batch ahead: while the loop trains on batch N, batch N+1 is pinned
    and copied to ``device`` on a separate CUDA stream. Before a batch is handed over, the training
    stream waits for its copy, and its memory is marked as used by that stream, so the caching
    allocator never reuses it too early. On a CPU device it hands batches over unchanged.

    Args:
        source: any iterable of tensors or nested tuples, lists and dicts of tensors.
        device: where the batches go (``"cuda"``, ``torch.device("cuda:1")``, ...).
    """

    def __init__(self, source: Iterable[Any], device: Any) -> None:
        import torch

        if not isinstance(source, Iterable):
            raise TypeError(f"source must be iterable (a DataLoader, say), got {source!r}")
        self.source = source
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"to_device must name a torch device, got {device!r}: {exc}") from exc
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"to_device={device!r} but CUDA is not available on this machine")

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        import torch

        from ..torch import map_tensors

        if self.device.type != "cuda":
            yield from self.source
            return
        stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        pin = torch.cuda.is_available()

        def start_copy(batch: Any) -> Any:
            with torch.cuda.stream(stream):
                return map_tensors(
                    batch,
                    lambda t: (t.pin_memory() if pin and t.device.type == "cpu" and not t.is_pinned() else t).to(
                        self.device, non_blocking=True
                    ),
                )

        iterator = iter(self.source)
        try:
            ahead = start_copy(next(iterator))
        except StopIteration:
            return
        def hand_over(batch: Any) -> Any:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(stream)  # the copy is done before the step uses the batch
            map_tensors(batch, lambda t: t.record_stream(current))  # its memory belongs to the step now
            return batch

        for batch in iterator:
            ready = hand_over(ahead)
            ahead = start_copy(batch)
            yield ready
        yield hand_over(ahead)
