"""The report as strict JSON text."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["report_json"]


def report_json(report: dict[str, Any], *, indent: int | None = 1) -> str:
    """``report`` as strict JSON (no NaN or Infinity: the analysis holds none). Its keys are
    :func:`~trainperf.build_report`'s, under ``schema`` 2; keys added within it (``goodput``, the job's
    time account, and ``goodput_missing``) leave the number as it is.

    Args:
        report: what :func:`trainperf.build_report` returned.
        indent: indentation, ``None`` for one line.
    """
    return json.dumps(report, indent=indent, allow_nan=False) + "\n"
