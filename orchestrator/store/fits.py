"""Law fits of a sweep: one row per (sweep, law), replaced when the law is fitted again.

The functions taking a :class:`~sqlalchemy.orm.Session` run inside one unit of work of
:class:`~orchestrator.store.results.ResultsStore`; saving a fit moves the sweep's
``updated_at``. Coefficients that are NaN are stored as NULL and read back as NaN.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.store.engine import dialect_insert
from orchestrator.store.rows import FitRow, as_utc, now_utc, touch_sweep

__all__ = ["FIT_FLOATS", "FIT_STRINGS", "fit_values", "save", "sweep_fits"]

FIT_FLOATS = ("a", "b", "a_lo", "a_hi", "b_lo", "b_hi", "r2")
"""the float keys of a fit (NaN allowed, stored as NULL)"""
FIT_STRINGS = ("law", "x_name", "y_name", "form")
"""the text keys of a fit"""


def fit_values(sweep_id: int, fit: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`FitRow` columns of a fit given as in ``ResultsStore.save_fit``, created now.

    Raises:
        ValueError: a required key is missing.
    """
    missing = [k for k in (*FIT_STRINGS, *FIT_FLOATS, "n") if k not in fit]
    if missing:
        raise ValueError(f"fit is missing key(s) {', '.join(missing)}")
    values: dict[str, Any] = {"sweep_id": sweep_id, "n": int(fit["n"]), "created_at": now_utc()}
    values.update({k: str(fit[k]) for k in FIT_STRINGS})
    for k in FIT_FLOATS:
        v = fit[k]
        values[k] = None if v is None or math.isnan(float(v)) else float(v)
    values["details_json"] = json.dumps(
        fit.get("details") or {}, sort_keys=True, default=str, allow_nan=True
    )
    return values


def save(s: Session, dialect: str, values: Mapping[str, Any]) -> None:
    """Insert the fit ``values`` (from :func:`fit_values`), replacing the sweep's fit of the
    same law. An unknown sweep fails on its foreign key."""
    touch_sweep(s, values["sweep_id"])
    stmt = dialect_insert(dialect, FitRow).values(**values)
    stmt = stmt.on_conflict_do_update(
        index_elements=[FitRow.sweep_id, FitRow.law],
        set_={k: getattr(stmt.excluded, k) for k in values if k not in ("sweep_id", "law")},
    )
    s.execute(stmt)


def sweep_fits(s: Session, sweep_id: int) -> list[dict[str, Any]]:
    """The sweep's fits ordered by law: the ``save_fit`` keys (NULL floats as NaN) plus
    ``created_at`` (UTC)."""
    rows = s.scalars(select(FitRow).where(FitRow.sweep_id == sweep_id).order_by(FitRow.law))
    out = []
    for row in rows:
        item: dict[str, Any] = {k: getattr(row, k) for k in FIT_STRINGS}
        for k in FIT_FLOATS:
            v = getattr(row, k)
            item[k] = math.nan if v is None else float(v)
        item["n"] = row.n
        item["details"] = json.loads(row.details_json)
        item["created_at"] = as_utc(row.created_at)
        out.append(item)
    return out
