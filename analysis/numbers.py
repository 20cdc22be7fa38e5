"""The one number format of the console and the pages: undefined is ``n/a``.

A value is undefined when it is None, NaN or infinite where a finite number is meant (an R² of
a constant response, a metric a trial does not report, ``mismatches`` when sampling). Integer
formats (``d``) round a float first, so a metric stored as 3.0 prints as 3.
"""

from __future__ import annotations

import math
from typing import Any

NA = "n/a"


def defined(value: Any) -> bool:
    """Whether ``value`` is a finite real number (bools are not numbers here)."""
    if isinstance(value, bool) or value is None:
        return False
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def fmt(value: Any, spec: str = ".4g") -> str:
    """``value`` formatted with ``spec`` (a :func:`format` spec, e.g. ``.3f``, ``d``, ``,.0f``),
    or :data:`NA` when it is undefined (see :func:`defined`)."""
    if not defined(value):
        return NA
    number = float(value)
    if spec.endswith("d"):
        return format(round(number), spec)
    return format(number, spec)


def fmt_interval(pair: Any, spec: str = ".3f") -> str:
    """An interval ``(lo, hi)`` as ``[lo, hi]`` in ``spec``; :data:`NA` when it or an end is
    missing or undefined."""
    if not pair or len(pair) != 2 or not (defined(pair[0]) and defined(pair[1])):
        return NA
    return f"[{fmt(pair[0], spec)}, {fmt(pair[1], spec)}]"
