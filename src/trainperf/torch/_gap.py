"""How much of the gap before a forward pass the loop spent inside its own iterable.

Without a DataLoader (a generator, an iterator class), the time between one optimizer step and the
next forward pass holds both the wait for the next batch and the loop's host work (logging,
evaluation, a checkpoint). From the step's end to the next forward pass only, a profile function
on the training thread times the frames of the iterable the loop resumes: a generator frame, or an
iterator's ``__next__``, called from the loop's own frames (a generator expression only when a
``for`` statement resumes it, not when the loop's host work consumes one). That time is the data wait; the rest
of the gap is host time. Nothing runs outside the gap, and nothing at all when a profiler
(``cProfile``, a tracer) already holds the thread's profile function.
"""

from __future__ import annotations

import dis
import inspect
import os
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

__all__ = ["GapSplitter"]

_ITERATOR_CODE = inspect.CO_GENERATOR
_OWN_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
_FOR_ITER = dis.opmap["FOR_ITER"]
#: Frames above the forward pass that may hold the training loop.
_LOOP_FRAMES = 8


def _is_library(code: CodeType) -> bool:
    name = code.co_filename
    return name.startswith(_OWN_DIRS) or f"{os.sep}torch{os.sep}" in name


def _resumed_by_loop(caller: FrameType) -> bool:
    """Whether ``caller`` is at a ``for`` statement's next item (a generator expression in the loop's
    own host work, consumed by ``sum()`` or ``list()``, is not the loop's iterable)."""
    code = caller.f_code.co_code
    return 0 <= caller.f_lasti < len(code) and code[caller.f_lasti] == _FOR_ITER


class GapSplitter:
    """Times the loop's iterable between :meth:`open` (a step ended) and :meth:`close` (the next
    forward pass began) on the training thread.

    Args:
        clock: the listener's clock.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.loop_codes: frozenset[CodeType] = frozenset()
        self._inside: FrameType | None = None
        self._entered = 0.0
        self._data = 0.0
        self._active = False
        self._hook = self._profile  # one bound method: ``sys.getprofile() is self._hook`` holds

    def learn_loop(self, frame: FrameType | None) -> None:
        """Remember the loop's frames above ``frame`` (the forward pass's caller)."""
        codes: list[CodeType] = []
        while frame is not None and len(codes) < _LOOP_FRAMES:
            if not _is_library(frame.f_code):
                codes.append(frame.f_code)
            frame = frame.f_back
        self.loop_codes = frozenset(codes)

    def open(self) -> None:
        """A step ended: time the iterable until :meth:`close`."""
        if self._active or not self.loop_codes or sys.getprofile() is not None:
            return
        self._data = 0.0
        self._inside = None
        self._active = True
        sys.setprofile(self._hook)

    def close(self) -> float | None:
        """The next forward pass began: the seconds spent inside the iterable, ``None`` when not timed."""
        if not self._active:
            return None
        self._active = False
        if sys.getprofile() is self._hook:
            sys.setprofile(None)
        inside = self._inside
        if inside is not None:  # the iterable handed its batch back without a return seen: count it
            self._data += self.clock() - self._entered
            self._inside = None
        return self._data

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            if self._inside is None:
                caller = frame.f_back
                code = frame.f_code
                if (caller is not None and caller.f_code in self.loop_codes
                        and (code.co_flags & _ITERATOR_CODE or code.co_name == "__next__")
                        and (code.co_name != "<genexpr>" or _resumed_by_loop(caller))):
                    self._inside = frame
                    self._entered = self.clock()
        elif event == "return" and frame is self._inside:
            self._data += self.clock() - self._entered
            self._inside = None
