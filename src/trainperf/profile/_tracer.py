"""The profiler a capture drives: ``torch.profiler`` (CPU activity, and CUDA's when the process uses
CUDA), warmed up before it records, with a ``ProfilerStep#N`` marker per training iteration."""

from __future__ import annotations

from typing import Any, Protocol

__all__: list[str] = []


class Tracer(Protocol):
    """What a capture needs of a profiler, called on the training thread but for :meth:`save`."""

    def prepare(self) -> None:
        """Start the warm-up: the profiler is set up but records nothing yet."""

    def start(self) -> None:
        """Start recording."""

    def mark(self, iteration: int) -> None:
        """The previous iteration ended: close its marker and open ``ProfilerStep#<iteration>``."""

    def stop(self) -> None:
        """Close the open marker and stop recording (on CUDA this waits for the traced work)."""

    def save(self, path: str) -> None:
        """Write the recorded trace as Chrome trace JSON to ``path`` (on the capture's writer thread)."""


class TorchTracer:
    """:class:`Tracer` with ``torch.profiler``: shapes, stacks and memory off, so that a few iterations
    stay small; torch's own step markers off, ours carry the training iteration."""

    def __init__(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            activities.append(ProfilerActivity.CUDA)
        if torch.autograd.profiler._is_profiler_enabled:
            raise RuntimeError("another profiler is running in this process")
        self._record_function = torch.profiler.record_function
        self._profile: Any = profile(activities=activities, record_shapes=False, profile_memory=False,
                                     with_stack=False)
        self._marker: Any = None

    def prepare(self) -> None:
        self._profile.prepare_trace()

    def start(self) -> None:
        self._profile.start_trace()

    def mark(self, iteration: int) -> None:
        self._close_marker()
        marker = self._record_function(f"ProfilerStep#{iteration}")
        marker.__enter__()  # type: ignore[no-untyped-call]
        self._marker = marker

    def _close_marker(self) -> None:
        marker, self._marker = self._marker, None
        if marker is not None:
            marker.__exit__(None, None, None)

    def stop(self) -> None:
        try:
            self._close_marker()
        finally:
            self._profile.stop_trace()

    def save(self, path: str) -> None:
        self._profile.export_chrome_trace(path)
