"""The decisions of a sweep's adaptive design (``design:``): one row per pick or stop.

A decision is written once: its ``(sweep, step, rank)`` is unique and a second write of the same
one is ignored, so a driver that resumes a design never duplicates what an earlier driver
recorded. The functions taking a :class:`~sqlalchemy.orm.Session` run inside one unit of work
of :class:`~orchestrator.store.results.ResultsStore`; writing decisions moves the sweep's
``updated_at``. Floats that are NaN are stored as NULL and read back as None.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.store.engine import dialect_insert
from orchestrator.store.rows import DesignRow, as_utc, now_utc, touch_sweep

__all__ = ["Decision", "insert", "sweep_decisions"]

DecisionKind = Literal["pick", "stop"]


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One decision of a design: a pick (``kind="pick"``: a trial to run and why) or the stop
    (``kind="stop"``: ``stop`` says why). Seconds are trial seconds (GPU trials: GPU-seconds).

    ``half_width`` is the slope's 95% CI half-width before the step (None: not fitted yet),
    ``expected_half_width`` what the rule expects after this pick, ``spent_s`` the compute of
    the trials finished before the step (failed ones included), ``committed_s`` the predicted
    compute of the trials in flight then.
    """

    step: int
    rank: int
    """position in the step's batch (0 first); a stop has the rank after the step's picks"""
    kind: DecisionKind
    reason: str
    spent_s: float
    value: float | None = None
    seed: int | None = None
    trial_key: str | None = None
    predicted_cost_s: float | None = None
    cost_basis: str | None = None
    """where the predicted cost comes from (calibrated, modelled, unknown)"""
    expected_half_width: float | None = None
    half_width: float | None = None
    committed_s: float | None = None
    stop: str | None = None
    """goal | budget | candidates | error, on a stop"""
    created_at: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        """The decision as a JSON-able dict (``created_at`` as ISO text)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["created_at"] = self.created_at.isoformat() if self.created_at else None
        return out


_FLOATS = ("value", "predicted_cost_s", "expected_half_width", "half_width", "committed_s")


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(float(value)) else float(value)


def insert(s: Session, dialect: str, sweep_id: int, decisions: Sequence[Decision]) -> int:
    """Insert ``decisions`` of sweep ``sweep_id``; one already recorded (same step and rank) is
    left as it is. Returns how many rows were new."""
    if not decisions:
        return 0
    touch_sweep(s, sweep_id)
    new = 0
    for d in decisions:
        values: dict[str, Any] = {
            f.name: getattr(d, f.name) for f in fields(d) if f.name != "created_at"
        }
        values |= {k: _number(values[k]) for k in _FLOATS}
        values["spent_s"] = float(d.spent_s)
        values["reason"] = d.reason[:4000]
        values["cost_basis"] = None if d.cost_basis is None else d.cost_basis[:250]
        stmt = dialect_insert(dialect, DesignRow).values(
            sweep_id=sweep_id, created_at=now_utc(), **values
        )
        stmt = stmt.on_conflict_do_nothing(index_elements=["sweep_id", "step", "rank"])
        new += len(s.execute(stmt.returning(DesignRow.id)).all())
    return new


def sweep_decisions(s: Session, sweep_id: int) -> list[Decision]:
    """The sweep's decisions in order (step, then rank)."""
    rows = s.scalars(
        select(DesignRow)
        .where(DesignRow.sweep_id == sweep_id)
        .order_by(DesignRow.step, DesignRow.rank)
    )
    return [
        Decision(
            step=r.step,
            rank=r.rank,
            kind="stop" if r.kind == "stop" else "pick",
            reason=r.reason,
            spent_s=r.spent_s,
            value=r.value,
            seed=r.seed,
            trial_key=r.trial_key,
            predicted_cost_s=r.predicted_cost_s,
            cost_basis=r.cost_basis,
            expected_half_width=r.expected_half_width,
            half_width=r.half_width,
            committed_s=r.committed_s,
            stop=r.stop,
            created_at=as_utc(r.created_at),
        )
        for r in rows
    ]
