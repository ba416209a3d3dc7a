"""A record's written text, made once for every sink that writes it: the writer thread hands the same
records to each sink in turn, and the JSON-lines sink and a run directory write the same JSON line
(as two logging sinks write the same text line)."""

from __future__ import annotations

from collections.abc import Callable

from ._record import PerformanceRecord

__all__: list[str] = []

#: Records whose text is kept: more than the writer hands over at once (see ``core._emit``).
MEMO_SIZE = 64


class TextMemo:
    """``make(record)``, remembered for the last :data:`MEMO_SIZE` records (by identity: a record
    does not change, and the memo holds it, so its ``id`` is not reused while remembered).

    Args:
        make: the text of a record.
    """

    __slots__ = ("make", "_texts")

    def __init__(self, make: Callable[[PerformanceRecord], str]) -> None:
        self.make = make
        self._texts: dict[int, tuple[PerformanceRecord, str]] = {}

    def __call__(self, record: PerformanceRecord) -> str:
        known = self._texts.get(id(record))
        if known is not None and known[0] is record:
            return known[1]
        text = self.make(record)
        if len(self._texts) >= MEMO_SIZE:
            self._texts.clear()
        self._texts[id(record)] = (record, text)
        return text
