"""JSON-safe plain data from the analysis dataclasses (for the results store and MLflow)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np


def json_safe(value: Any) -> Any:
    """``value`` with tuples as lists, NaN and infinities as None, numpy scalars as Python."""
    if isinstance(value, tuple | list):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def dataclass_dict(obj: Any) -> dict[str, Any]:
    """A dataclass instance as a JSON-safe dict (see :func:`json_safe`)."""
    return {k: json_safe(v) for k, v in asdict(obj).items()}


class JsonRecord:
    """A result dataclass with plain JSON-safe data: :meth:`to_dict`."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe data: tuples become lists, NaN and infinities become None."""
        return dataclass_dict(self)
