"""Metric values of trials: writing them (scalars and step series) and reading them back,
per trial, per sweep, and as the wide analysis frame.

The functions taking a :class:`~sqlalchemy.orm.Session` run inside one unit of work of
:class:`~orchestrator.store.results.ResultsStore`; writing metrics moves the sweep's
``updated_at``.

Non-finite values: SQLite stores NaN as NULL, so a metric row keeps finite values in ``value``
and non-finite ones as text (``"nan"``, ``"inf"``, ``"-inf"``) in ``nonfinite``, with ``value``
NULL (:func:`encode_metric`, :func:`decode_metric`); both dialects then behave alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.store.engine import chunks, dialect_insert
from orchestrator.store.rows import (
    METRIC_NAME_LEN,
    MetricRow,
    TrialRow,
    touch_sweep_of_trial,
)

__all__ = [
    "decode_metric",
    "encode_metric",
    "metric_row",
    "series",
    "series_names",
    "sweep_frame",
    "sweep_series",
    "upsert",
]


def encode_metric(value: float) -> tuple[float | None, str | None]:
    """The ``(value, nonfinite)`` columns of a metric value: ``(x, None)`` when finite, else
    ``(None, "nan" | "inf" | "-inf")``.

    Raises:
        TypeError, ValueError: ``value`` is not a number.
    """
    value = float(value)
    if math.isfinite(value):
        return value, None
    return None, "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def decode_metric(value: float | None, nonfinite: str | None) -> float:
    """The metric value stored as ``(value, nonfinite)``; NULL without text reads as NaN."""
    if nonfinite is not None:
        return float(nonfinite)
    return math.nan if value is None else float(value)


def metric_row(trial_id: int, name: str, value: float, step: int) -> dict[str, Any]:
    """The :class:`MetricRow` columns of one value of metric ``name`` at ``step``.

    Raises:
        ValueError: ``name`` is longer than 250 characters or ``value`` is not a number.
    """
    if len(name) > METRIC_NAME_LEN:
        raise ValueError(f"metric name {name[:40]!r}... is longer than {METRIC_NAME_LEN}")
    try:
        stored, nonfinite = encode_metric(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metric {name!r} has a non-numeric value {value!r}") from exc
    return {
        "trial_id": trial_id,
        "name": name,
        "step": int(step),
        "value": stored,
        "nonfinite": nonfinite,
    }


def upsert(s: Session, dialect: str, trial_id: int, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (from :func:`metric_row`, all of trial ``trial_id``), replacing values
    already logged at the same (name, step). An unknown trial fails on its foreign key."""
    if not rows:
        return
    touch_sweep_of_trial(s, trial_id)
    for chunk in chunks(rows):
        stmt = dialect_insert(dialect, MetricRow).values(list(chunk))
        stmt = stmt.on_conflict_do_update(
            index_elements=[MetricRow.trial_id, MetricRow.name, MetricRow.step],
            set_={"value": stmt.excluded.value, "nonfinite": stmt.excluded.nonfinite},
        )
        s.execute(stmt)


def series(s: Session, trial_id: int, name: str) -> list[float]:
    """Metric ``name`` of a trial ordered by step (all steps)."""
    stmt = (
        select(MetricRow.value, MetricRow.nonfinite)
        .where(MetricRow.trial_id == trial_id, MetricRow.name == name)
        .order_by(MetricRow.step)
    )
    return [decode_metric(v, nf) for v, nf in s.execute(stmt).all()]


def trial_metrics(s: Session, trial_id: int) -> dict[str, list[float]]:
    """Every metric of a trial: name -> values ordered by step (one value: a scalar metric)."""
    stmt = (
        select(MetricRow.name, MetricRow.value, MetricRow.nonfinite)
        .where(MetricRow.trial_id == trial_id)
        .order_by(MetricRow.name, MetricRow.step)
    )
    out: dict[str, list[float]] = {}
    for name, value, nonfinite in s.execute(stmt).all():
        out.setdefault(name, []).append(decode_metric(value, nonfinite))
    return out


def series_names(s: Session, sweep_id: int) -> set[str]:
    """Names of the metrics logged at a step > 0 by any trial of the sweep."""
    stmt = (
        select(MetricRow.name)
        .join(TrialRow, TrialRow.id == MetricRow.trial_id)
        .where(TrialRow.sweep_id == sweep_id, MetricRow.step > 0)
        .distinct()
    )
    return set(s.scalars(stmt).all())


def sweep_series(
    s: Session, sweep_id: int, names: Sequence[str]
) -> dict[str, dict[str, list[float]]]:
    """Series ``names`` of every trial of a sweep: trial key -> name -> values by step."""
    stmt = (
        select(TrialRow.trial_key, MetricRow.name, MetricRow.value, MetricRow.nonfinite)
        .join(TrialRow, TrialRow.id == MetricRow.trial_id)
        .where(TrialRow.sweep_id == sweep_id, MetricRow.name.in_(list(names)))
        .order_by(TrialRow.id, MetricRow.name, MetricRow.step)
    )
    out: dict[str, dict[str, list[float]]] = {}
    for key, name, value, nonfinite in s.execute(stmt).all():
        out.setdefault(key, {}).setdefault(name, []).append(decode_metric(value, nonfinite))
    return out


def sweep_frame(s: Session, sweep_id: int) -> pd.DataFrame:
    """One row per trial of the sweep, wide (see ``ResultsStore.metrics_frame``)."""
    trial_rows = s.execute(
        select(TrialRow.id, TrialRow.trial_key, TrialRow.state, TrialRow.overrides_json)
        .where(TrialRow.sweep_id == sweep_id)
        .order_by(TrialRow.id)
    ).all()
    metric_rows = s.execute(
        select(MetricRow.trial_id, MetricRow.name, MetricRow.value, MetricRow.nonfinite)
        .join(TrialRow, TrialRow.id == MetricRow.trial_id)
        .where(TrialRow.sweep_id == sweep_id, MetricRow.step == 0)
    ).all()
    records: list[dict[str, Any]] = []
    index: dict[int, dict[str, Any]] = {}
    override_names: dict[str, None] = {}
    for trial_id, key, state, overrides_json in trial_rows:
        record: dict[str, Any] = {"trial_key": key, "state": state}
        for name, value in _flatten_overrides(json.loads(overrides_json)).items():
            override_names.setdefault(name, None)
            record[name] = value
        records.append(record)
        index[trial_id] = record
    metric_names: set[str] = set()
    for trial_id, name, value, nonfinite in metric_rows:
        reserved = name in override_names or name in ("trial_key", "state")
        column = f"metric.{name}" if reserved else name
        metric_names.add(column)
        index[trial_id][column] = decode_metric(value, nonfinite)
    columns = ["trial_key", "state", *sorted(override_names), *sorted(metric_names)]
    frame = pd.DataFrame.from_records(records, columns=columns)
    for column in metric_names:
        frame[column] = frame[column].astype("float64")
    return frame


def _flatten_overrides(overrides: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten_overrides(value, prefix=f"{name}."))
        else:
            out[name] = value
    return out
