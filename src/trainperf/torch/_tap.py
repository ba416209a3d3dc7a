"""A per-model forward tap: cheaper than a forward pre-hook, and invisible to copies and pickles.

Registering any forward hook sends every call of a module down ``torch.nn.Module``'s slow dispatch
path (about 2 us per call on a small CPU). Instead, the tap is installed as the instance's
``forward``: ``Module.__call__`` keeps its fast path and calls the tap, which calls the listeners'
callbacks and then the real ``forward``. A ``copy.deepcopy`` or pickle of the model gets the plain
``forward`` back, so EMA copies and ``torch.save(model)`` carry no listener.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.compiler import is_compiling

__all__: list[str] = []

#: What a forward pass may raise that :attr:`ForwardTap.errors` hear of.
_OOM_ERRORS = (MemoryError, torch.OutOfMemoryError)

Callback = Callable[[tuple[Any, ...], dict[str, Any]], None]


class ForwardTap:
    """Calls ``callbacks(args, kwargs)`` before each forward pass of one model."""

    __slots__ = ("forward", "callbacks", "after", "errors", "__wrapped__", "__dict__")

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward
        self.__wrapped__ = forward  # inspect.signature(model.forward) still shows the real one
        self.callbacks: list[Callback] = []
        self.after: list[Callable[[], None]] = []  # called when a forward pass returns (rarely used)
        self.errors: list[Callable[[BaseException], None]] = []  # told of an out-of-memory error, raised on

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Under torch.compile, Dynamo traces this call: it sees a constant True here and never the
        # callbacks (clock reads, Python bookkeeping), so the graph stays whole. The adapter then
        # takes its iterations from optimizer steps and loader fetches, which run outside the graph.
        if not is_compiling():
            for callback in self.callbacks:
                callback(args, kwargs)
            try:  # free unless raised
                out = self.forward(*args, **kwargs)
            except _OOM_ERRORS as error:
                for seen in self.errors:
                    seen(error)
                raise
            for done in self.after:
                done()
            return out
        return self.forward(*args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self.forward, memo)

    def __reduce__(self) -> str | tuple[Any, ...]:
        return self.forward.__reduce__()

    def __repr__(self) -> str:
        return f"<trainperf forward tap of {self.forward!r}>"


class AttachmentList(list):  # type: ignore[type-arg]
    """The model's attachments; a copy or pickle of the model starts with none."""

    def __deepcopy__(self, memo: dict[int, Any]) -> AttachmentList:
        return AttachmentList()

    def __copy__(self) -> AttachmentList:
        return AttachmentList()

    def __reduce__(self) -> tuple[Any, ...]:
        return (AttachmentList, ())


def tap_of(model: torch.nn.Module) -> ForwardTap:
    """The model's tap, installed on first use."""
    current = model.__dict__.get("forward")
    if isinstance(current, ForwardTap):
        return current
    tap = ForwardTap(model.forward)
    model.__dict__["forward"] = tap
    return tap


def untap(model: torch.nn.Module, callback: Callback) -> None:
    """Remove ``callback``; the last one out restores the model's own ``forward``."""
    tap = model.__dict__.get("forward")
    if not isinstance(tap, ForwardTap):
        return
    if callback in tap.callbacks:
        tap.callbacks.remove(callback)
    if not tap.callbacks and not tap.after:
        original = tap.forward
        if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is getattr(
            type(model), "forward", None
        ):
            del model.__dict__["forward"]
        else:
            model.__dict__["forward"] = original


_ATTACHMENTS = "_trainperf_attachments"


def attachments_of(model: Any, *, create: bool = False) -> AttachmentList:
    """The attachments of ``model`` (a list kept in the instance's ``__dict__``); ``create`` adds the
    list when there is none, else a model without attachments gives an empty, unattached list."""
    found = model.__dict__.get(_ATTACHMENTS)
    if found is None:
        found = AttachmentList()
        if create:
            model.__dict__[_ATTACHMENTS] = found
    return found  # type: ignore[no-any-return]


def leave(model: Any, attachment: Any) -> None:
    """``attachment`` is no longer one of ``model``'s (it detached)."""
    attachments = attachments_of(model)
    if attachment in attachments:
        attachments.remove(attachment)


def seen_before(inputs: list[weakref.ref[Tensor]], tensor: Tensor) -> bool:
    """Whether a later forward of the step had ``tensor`` as input already (``inputs``, weakly); remembers
    it in ``inputs`` if not."""
    for ref in inputs:
        if ref() is tensor:
            return True
    inputs.append(weakref.ref(tensor))
    return False


def is_listened(model: Any) -> bool:
    """Whether ``model`` has had listeners attached (now or before)."""
    return _ATTACHMENTS in getattr(model, "__dict__", {})
