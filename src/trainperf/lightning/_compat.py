"""Find the ``Callback`` classes of the Lightning packages that are installed."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__all__: list[str] = []

_PACKAGES = (("lightning", "lightning.pytorch"), ("pytorch_lightning", "pytorch_lightning"))


def callback_base() -> type[Any]:
    """One class that is the ``Callback`` of every installed Lightning package (see :func:`callback_bases`)."""
    bases = callback_bases()
    if len(bases) == 1:
        return bases[0]
    return type("LightningCallback", bases, {"__module__": __name__})


def callback_bases() -> tuple[type[Any], ...]:
    """``Callback`` of ``lightning.pytorch`` and of ``pytorch_lightning``, each where installed.

    A callback that subclasses both is accepted by a Trainer from either package, whichever of
    the two names the user imported.
    """
    bases: list[type[Any]] = []
    for top, module_name in _PACKAGES:
        if importlib.util.find_spec(top) is None:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if module.Callback not in bases:
            bases.append(module.Callback)
    if not bases:
        raise ImportError(
            "trainperf.lightning needs Lightning: pip install 'trainperf[lightning]' "
            "(pytorch-lightning) or pip install lightning"
        )
    return tuple(bases)
