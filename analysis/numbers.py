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


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, with an ``s`` unless ``n`` is 1: plural(1, "trial") -> "1 trial"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


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


_UNITS = (("d", 86400.0), ("h", 3600.0), ("min", 60.0))


def duration(seconds: Any, *, narrow: bool = False) -> str:
    """Seconds for a reader, in the largest unit it reaches twice: ``41.8 s``, ``12.5 min``,
    ``3.20 h``, ``64.2 d``; ``narrow`` for a table cell: ``18.3s``, ``12min``, ``3.2h``; :data:`NA`
    (``?`` when narrow) when undefined."""
    if not defined(seconds):
        return "?" if narrow else NA
    s = float(seconds)
    for unit, size in _UNITS:
        if s >= 2 * size:
            if narrow:
                return f"{s / size:.2g}{unit}" if s < 10 * size else f"{s / size:.0f}{unit}"
            return f"{s / size:.3g} {unit}"
    return f"{s:.3g}s" if narrow else f"{s:.3g} s"


def gpu_hours(hours: Any) -> str:
    """GPU time with its unit: ``2,902 GPU-hours``, ``0.42 GPU-hours``, ``0.044 GPU-seconds``
    (below 0.01 h), ``unknown GPU-hours``."""
    if not defined(hours):
        return "unknown GPU-hours"
    h = float(hours)
    if h >= 10:
        return f"{h:,.0f} GPU-hours"
    if h >= 0.01:
        return f"{h:.2g} GPU-hours"
    return f"{h * 3600:.2g} GPU-seconds"
