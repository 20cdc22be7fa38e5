"""Completed trials of a workload across every sweep of the results DB, with their scalar
metrics: what predicted trial costs are calibrated on (``orchestrator.cost.model``).

The function takes a :class:`~sqlalchemy.orm.Session` and runs inside one unit of work of
:class:`~orchestrator.store.results.ResultsStore` (two queries, whatever the number of trials).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.store.metrics import decode_metric
from orchestrator.store.rows import MetricRow, SweepRow, TrialRow, TrialState, as_utc

__all__ = ["CompletedTrial", "completed_trials"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CompletedTrial:
    """One completed trial: where it ran, its config, wall seconds and step-0 metrics."""

    sweep: str
    """the sweep's name"""
    key: str
    """its trial key"""
    config: dict[str, Any]
    """its trial config as stored (JSON)"""
    wall_s: float | None
    """wall-clock seconds of its last attempt as the driver saw it (None: not recorded)"""
    started_at: datetime | None
    """when its last attempt started (UTC)"""
    finished_at: datetime | None
    """when it completed (UTC)"""
    metrics: dict[str, float]
    """its metrics logged at step 0 (scalars; NaN and inf as such)"""


def completed_trials(s: Session, workload: str) -> list[CompletedTrial]:
    """Every completed trial of every sweep of ``workload``, oldest first, each with its
    step-0 metrics."""
    rows = s.execute(
        select(
            TrialRow.id,
            SweepRow.name,
            TrialRow.trial_key,
            TrialRow.config_json,
            TrialRow.wall_s,
            TrialRow.started_at,
            TrialRow.finished_at,
        )
        .join(SweepRow, SweepRow.id == TrialRow.sweep_id)
        .where(SweepRow.workload == workload, TrialRow.state == TrialState.COMPLETED.value)
        .order_by(TrialRow.finished_at, TrialRow.id)
    ).all()
    metrics: dict[int, dict[str, float]] = {row[0]: {} for row in rows}
    ids_all = list(metrics)
    for start in range(0, len(ids_all), 500):  # SQLite limits the bound parameters
        ids = ids_all[start : start + 500]
        found = s.execute(
            select(MetricRow.trial_id, MetricRow.name, MetricRow.value, MetricRow.nonfinite).where(
                MetricRow.trial_id.in_(ids), MetricRow.step == 0
            )
        ).all()
        for trial_id, name, value, nonfinite in found:
            metrics[trial_id][name] = decode_metric(value, nonfinite)
    return [
        CompletedTrial(
            sweep=name,
            key=key,
            config=json.loads(config_json),
            wall_s=wall_s,
            started_at=as_utc(started_at),
            finished_at=as_utc(finished_at),
            metrics=metrics[trial_id],
        )
        for trial_id, name, key, config_json, wall_s, started_at, finished_at in rows
    ]
