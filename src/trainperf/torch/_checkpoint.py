"""Checkpoints in an unchanged loop: while a model is listened to with :func:`trainperf.torch.attach`,
``torch.save`` is a ``"checkpoint"`` span and ``torch.load`` a ``"checkpoint_load"`` span of its listener.

Installed when the first attachment registers and removed with the last one (``torch.save`` and
``torch.load`` are torch's own again). Each call on an attachment's training thread is timed as a
:meth:`~trainperf.PerformanceListener.span` of its listener, which hands it to the attachment (or, before
training starts, keeps it in the first window's named times); calls on other threads (a background
saver) are not. A save inside a load, or one inside a span the user opened, counts once (the outer
span). A name bound before the first attach (``from torch import save``) keeps calling torch's own.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from contextlib import ExitStack
from threading import get_ident
from typing import Any, Protocol

import torch

from ..core import PerformanceListener

__all__: list[str] = []


class CheckpointObserver(Protocol):
    """What the wrappers read; :class:`trainperf.torch.Attachment` has both."""

    listener: PerformanceListener
    thread: int


#: The span each wrapped function is.
KINDS = {"save": "checkpoint", "load": "checkpoint_load"}

_observers: list[weakref.ref[CheckpointObserver]] = []
_originals: dict[str, Any] = {}


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
    original, kind = _originals[name], KINDS[name]

    def timed(*args: Any, **kwargs: Any) -> Any:
        thread = get_ident()
        listeners = [o.listener for ref in _observers if (o := ref()) is not None and o.thread == thread]
        if not listeners:
            return original(*args, **kwargs)
        with ExitStack() as spans:
            for listener in listeners:
                spans.enter_context(listener.span(kind))
            return original(*args, **kwargs)

    timed.__wrapped__ = original  # type: ignore[attr-defined]
    timed.__name__ = name
    timed.__doc__ = original.__doc__
    return timed


def _install() -> None:
    for name in KINDS:
        _originals[name] = getattr(torch, name)
        setattr(torch, name, _timed(name))


def _uninstall() -> None:
    for name in KINDS:
        if name in _originals:
            setattr(torch, name, _originals.pop(name))
