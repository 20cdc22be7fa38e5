"""Trial rows: inserting a sweep's grid, reading it back, and moving trials between states.

The functions take a :class:`~sqlalchemy.orm.Session` and run inside one unit of work of
:class:`~orchestrator.store.results.ResultsStore` (which commits, retries and maps errors). Every
write that changes a trial also moves its sweep's ``updated_at``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from orchestrator.errors import StoreError
from orchestrator.store.engine import chunks, dialect_insert
from orchestrator.store.rows import (
    TRIAL_KEY_LEN,
    TrialInfo,
    TrialRow,
    TrialState,
    touch_sweep,
    touch_sweep_of_trial,
    trial_info,
)

__all__ = [
    "find_trial",
    "insert_trials",
    "reset_to_pending",
    "set_mlflow_run",
    "set_trial_state",
    "sweep_trials",
]


def insert_trials(
    s: Session,
    dialect: str,
    sweep_id: int,
    trials: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]],
) -> int:
    """Insert the missing ``(trial_key, config, overrides)`` as pending; return how many.

    Existing keys are left untouched; the sweep's ``updated_at`` moves only when one was new.

    Raises:
        ValueError: a trial key is longer than 64 characters.
    """
    rows = []
    for key, config, overrides in trials:
        if len(key) > TRIAL_KEY_LEN:
            raise ValueError(f"trial key {key!r} is longer than {TRIAL_KEY_LEN} characters")
        rows.append(
            {
                "sweep_id": sweep_id,
                "trial_key": key,
                "config_json": _canonical_json(config),
                "overrides_json": _canonical_json(overrides),
                "state": TrialState.PENDING.value,
                "attempts": 0,
            }
        )
    inserted = 0
    for chunk in chunks(rows):
        stmt = dialect_insert(dialect, TrialRow).values(list(chunk))
        stmt = stmt.on_conflict_do_nothing(
            index_elements=[TrialRow.sweep_id, TrialRow.trial_key]
        ).returning(TrialRow.id)
        inserted += len(s.execute(stmt).all())
    if inserted:
        touch_sweep(s, sweep_id)
    return inserted


def sweep_trials(s: Session, sweep_id: int, states: set[str] | None) -> list[TrialInfo]:
    """The sweep's trials in insertion order, only those in ``states`` unless it is None.

    Raises:
        ValueError: ``states`` names an unknown state.
    """
    stmt = select(TrialRow).where(TrialRow.sweep_id == sweep_id).order_by(TrialRow.id)
    if states is not None:
        wanted = {TrialState(x).value for x in states}
        stmt = stmt.where(TrialRow.state.in_(sorted(wanted)))
    return [trial_info(r) for r in s.scalars(stmt).all()]


def find_trial(s: Session, sweep_id: int, key: str) -> TrialInfo | None:
    """The trial ``key`` of a sweep, or None."""
    stmt = select(TrialRow).where(TrialRow.sweep_id == sweep_id, TrialRow.trial_key == key)
    row = s.scalars(stmt).first()
    return None if row is None else trial_info(row)


def set_trial_state(
    s: Session, trial_id: int, state: TrialState, *, url_text: str, **values: Any
) -> None:
    """Put a trial in ``state``, setting the other columns in ``values``.

    Raises:
        StoreError: no trial ``trial_id`` (``url_text`` names the database).
    """
    touch_sweep_of_trial(s, trial_id)
    result = s.execute(
        update(TrialRow).where(TrialRow.id == trial_id).values(state=state.value, **values)
    )
    if result.rowcount == 0:  # type: ignore[attr-defined]
        raise StoreError(f"no trial with id {trial_id} in {url_text}")


def set_mlflow_run(s: Session, trial_id: int, run_id: str, *, url_text: str) -> None:
    """Record ``run_id`` as the trial's MLflow child run, its state left as it is (a run
    recreated after MLflow lost the first one).

    Raises:
        StoreError: no trial ``trial_id`` (``url_text`` names the database).
    """
    result = s.execute(update(TrialRow).where(TrialRow.id == trial_id).values(mlflow_run_id=run_id))
    if result.rowcount == 0:  # type: ignore[attr-defined]
        raise StoreError(f"no trial with id {trial_id} in {url_text}")


def reset_to_pending(s: Session, sweep_id: int, states: Sequence[str]) -> int:
    """Turn the sweep's trials in ``states`` back into pending; return how many."""
    in_states = (TrialRow.sweep_id == sweep_id) & TrialRow.state.in_(list(states))
    touched = touch_sweep(s, sweep_id, when=exists().where(in_states))  # the sweep row first
    result = s.execute(update(TrialRow).where(in_states).values(state=TrialState.PENDING.value))
    count = int(result.rowcount)  # type: ignore[attr-defined]
    if count and not touched:  # a trial entered ``states`` since the check above
        touch_sweep(s, sweep_id)
    return count


def _canonical_json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
