"""Checkpoints in an unchanged loop: ``torch.save`` and ``torch.load`` are timed while a model is
listened to with :func:`trainperf.torch.attach`.

Installed when the first attachment registers and removed with the last one (``torch.save`` and
``torch.load`` are torch's own again). Each call on an attachment's training thread is handed to it
with its start and end on the attachment's clock; calls on other threads (a background saver) are
not. A name bound before the first attach (``from torch import save``) keeps calling torch's own.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from threading import get_ident
from typing import Any, Protocol

import torch

__all__: list[str] = []


class CheckpointObserver(Protocol):
    """What the wrappers call; :class:`trainperf.torch.Attachment` implements it."""

    def on_checkpoint(self, started: float, ended: float) -> None: ...

    clock: Callable[[], float]
    thread: int


_observers: list[weakref.ref[CheckpointObserver]] = []
_originals: dict[str, Any] = {}
_depth = 0  # a save inside a load (or the other way round) is timed once, by the outer call


def register(observer: CheckpointObserver) -> None:
    """Start telling ``observer`` about checkpoints (installs the wrappers on first use)."""
    if not _observers:
        _install()
    _observers.append(weakref.ref(observer))


def unregister(observer: CheckpointObserver) -> None:
    """Stop telling ``observer``; the last one out restores torch's own functions."""
    _observers[:] = [ref for ref in _observers if ref() not in (None, observer)]
    if not _observers:
        _uninstall()


def _timed(name: str) -> Callable[..., Any]:
    original = _originals[name]

    def timed(*args: Any, **kwargs: Any) -> Any:
        global _depth
        thread = get_ident()
        observers = [o for ref in _observers if (o := ref()) is not None and o.thread == thread] if not _depth else []
        if not observers:
            return original(*args, **kwargs)
        starts = [o.clock() for o in observers]
        _depth += 1
        try:
            return original(*args, **kwargs)
        finally:
            _depth -= 1
            for observer, started in zip(observers, starts, strict=True):
                observer.on_checkpoint(started, observer.clock())

    timed.__wrapped__ = original  # type: ignore[attr-defined]
    timed.__name__ = name
    timed.__doc__ = original.__doc__
    return timed


def _install() -> None:
    for name in ("save", "load"):
        _originals[name] = getattr(torch, name)
        setattr(torch, name, _timed(name))


def _uninstall() -> None:
    for name in ("save", "load"):
        if name in _originals:
            setattr(torch, name, _originals.pop(name))
