"""The bookkeeping behind :func:`trainperf.torch.attach` around its optimizer steps: the weak global
step hooks, which optimizers train a model, and the peers (attachments on other models, told of
each other's steps)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

if TYPE_CHECKING:
    from ._attach import Attachment

__all__: list[str] = []

_all: list[weakref.ref[Attachment]] = []


def link_peers(attachment: Attachment) -> None:
    """Tell every live attachment on another model about ``attachment``, and the other way round
    (forgetting the attachments dropped since)."""
    _all[:] = [ref for ref in _all if (a := ref()) is not None and not a.detached]
    for ref in _all:
        live = ref()
        if live is not None:
            live._peers = [p for p in live._peers if (q := p()) is not None and not q.detached]
    for ref in _all:
        other = ref()
        if other is not None and other.model is not attachment.model:
            other._peers.append(weakref.ref(attachment))
            attachment._peers.append(ref)
    _all.append(weakref.ref(attachment))


def unlink_peers(attachment: Attachment) -> None:
    for ref in _all:
        other = ref()
        if other is not None:
            other._peers = [p for p in other._peers if (q := p()) is not None and q is not attachment]
    _all[:] = [ref for ref in _all if ref() not in (None, attachment)]
    attachment._peers = []


def tell_peers(attachment: Attachment, began: float, now: float) -> None:
    """``attachment``'s model trained from ``began`` to ``now`` (a GAN's discriminator, a second model
    in the same loop). For a listened model between its steps, that is training work, not its loop's
    other host time (nor a data wait that is a gap): it counts as its next iteration's compute."""
    for ref in attachment._peers:
        peer = ref()
        if peer is None or peer.detached or peer.thread != attachment.thread:
            continue
        account = peer._account
        if account.began is not None:  # its iteration has begun: this is inside its step
            continue
        start = began if began > account.boundary else account.boundary
        if now > start:
            peer._peer_busy += now - start


class _WeakStepHook:
    """torch's global step hook for one attachment, holding it weakly: a model and listener dropped
    without ``close()`` are not kept alive by torch's hook table. The hook of a dropped attachment
    does nothing and is removed at the next :func:`attach` (not while torch runs the hooks)."""

    __slots__ = ("ref", "handle")

    def __init__(self, attachment: Attachment) -> None:
        self.ref = weakref.ref(attachment)
        self.handle: Any = None

    @property
    def dead(self) -> bool:
        return self.ref() is None


_step_hooks: list[_WeakStepHook] = []


def register_step_hook(attachment: Attachment) -> Any:
    """Register ``attachment``'s step hook, removing those of attachments dropped since."""
    for dead in [h for h in _step_hooks if h.dead]:
        dead.handle.remove()
        _step_hooks.remove(dead)
    hook = _WeakStepHook(attachment)
    ref = hook.ref

    def on_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:  # a closure: cheaper to call
        target = ref()
        if target is not None:
            target._on_step(optimizer, args, kwargs)

    on_step.attachment = ref  # type: ignore[attr-defined]  # which attachment a hook in torch's table serves
    hook.handle = register_optimizer_step_post_hook(on_step)
    _step_hooks.append(hook)
    return hook.handle


def owns(attachment: Attachment, optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` trains ``attachment``'s model (remembered per optimizer, weakly). An
    optimizer seen first in the innermost of several step hooks of one step (a subclass whose
    ``step`` calls its base's) has its outer ones counted down, so only the outer call counts."""
    owned = attachment._owned.get(optimizer)
    if owned is None:
        ours = {id(p) for p in attachment.model.parameters()}
        owned = any(id(p) in ours for group in optimizer.param_groups for p in group["params"])
        attachment._owned[optimizer] = owned
        levels = hooked_step_levels(optimizer) if owned else 1
        if levels > 1:  # seen first in the innermost post-hook: the outer ones of this step follow
            attachment._step_depth = levels
            attachment._hooks.append(optimizer.register_step_pre_hook(attachment._on_nested_step_start))
    if owned:
        attachment._last_owned = optimizer
    return owned


def hooked_step_levels(optimizer: torch.optim.Optimizer) -> int:
    """How many times one ``optimizer.step()`` runs torch's step hooks: torch wraps the ``step`` of
    each optimizer class it builds, so a subclass whose ``step`` calls its base's runs them twice."""
    return sum(getattr(c.__dict__.get("step"), "hooked", False) for c in type(optimizer).__mro__) or 1
