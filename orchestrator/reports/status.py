"""``orchestrator status``: a sweep's trial table, its driver and its study, as data.

The columns come from the workload's registry entry (``status_columns``), or the sweep kind's
one metric (a search's). A trial recorded ``running`` while no live driver holds the sweep is shown
as ``running (driver gone)``: its driver crashed, and the next submit reruns it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.driving.runner import STALE_AFTER_S
from orchestrator.kinds import kind_of
from orchestrator.spec.sweep import SweepSpec, stored_spec
from orchestrator.store.results import ResultsStore, SweepInfo, TrialState, lease_alive
from workloads.registry import WORKLOADS

Row = tuple[str, str, dict[str, Any], dict[str, Any] | None]
"""(trial key, state and error, overrides, metrics of a completed trial)"""


@dataclass
class StatusView:
    """What ``status`` shows of one sweep."""

    name: str
    columns: tuple[str, ...]
    rows: list[Row]
    counts: dict[str, int]
    driver_line: str | None = None
    cancel_line: str | None = None
    spec: SweepSpec | None = None
    """the stored spec (None: an old one that no longer validates)"""
    formats: dict[str, str] | None = None
    """metric -> format of the workload's progress line"""


def _columns(spec: SweepSpec | None, info: SweepInfo) -> tuple[str, ...]:
    metric = kind_of(spec).status_metric(spec) if spec is not None else None
    if metric is not None:  # e.g. a search's metric
        return (metric,)
    entry = WORKLOADS.get(info.workload)
    return entry.status_columns if entry is not None else ()


def sweep_status(store: ResultsStore, info: SweepInfo) -> StatusView:
    """The trial table of ``info``'s sweep, its state counts, and its driver's lease."""
    try:
        spec: SweepSpec | None = stored_spec(info)
    except Exception:  # noqa: BLE001 - an old stored spec: the table still shows
        spec = None
    columns = _columns(spec, info)
    alive = lease_alive(info, stale_after_s=STALE_AFTER_S)
    df = store.metrics_frame(info.id).set_index("trial_key")
    rows: list[Row] = []
    counts: dict[str, int] = {}
    for t in store.trials(info.id):
        state = str(t.state)
        if t.state == TrialState.RUNNING and not alive:
            state = "running (driver gone)"
        counts[state] = counts.get(state, 0) + 1
        metrics = (
            {c: df.loc[t.key, c] for c in columns if c in df}
            if t.state == TrialState.COMPLETED and t.key in df.index
            else None
        )
        error = f": {t.error.splitlines()[0][:80]}" if t.error else ""
        rows.append((t.key, state + error, t.overrides, metrics))
    entry = WORKLOADS.get(info.workload)
    formats = dict(entry.progress) if entry is not None else {}
    view = StatusView(info.name, columns, rows, counts, formats=formats, spec=spec)
    if info.driver and info.heartbeat_at:
        age = (datetime.now(UTC) - info.heartbeat_at).total_seconds()
        gone = "" if alive else " (gone: the next submit or retry takes the sweep over)"
        view.driver_line = f"driver {info.driver}, last heartbeat {age:.0f} s ago{gone}"
    elif counts.get("running (driver gone)"):
        view.driver_line = (
            "no driver holds the sweep: its running trials are left from a driver that "
            "stopped; `orchestrator submit` (or `retry`) runs them again"
        )
    if info.cancel_requested_at:
        view.cancel_line = _cancel_line(info, counts, alive=alive)
    return view


def _cancel_line(info: SweepInfo, counts: dict[str, int], *, alive: bool) -> str:
    """A cancel request as it stands: still being carried out by a live driver, or done (no
    driver, nothing pending or running): then the sweep's final state, not the request."""
    at = f"{info.cancel_requested_at:%Y-%m-%d %H:%M:%S} UTC"
    unfinished = sum(counts.get(s, 0) for s in ("pending", "running", "running (driver gone)"))
    if alive:
        return f"cancel requested at {at}: the driver is stopping its trials"
    if unfinished:
        return f"cancel requested at {at}; {unfinished} trials not finished and no driver"
    total = sum(counts.values())
    if not counts.get("cancelled"):
        return f"cancel requested at {at}: nothing was left to cancel; the sweep ended"
    return (
        f"cancelled at {at}: the sweep ended with {counts.get('cancelled', 0)} of {total} "
        f"trials cancelled (completed ones kept); `orchestrator retry {info.name} --cancelled` "
        "or the same submit runs them again"
    )


def kind_lines(view: StatusView, db_url: str | None, run_root: Path) -> list[str]:
    """The lines the sweep's kind adds below the table (a search: its study's finished trials
    and best trial); none for an old stored spec."""
    if view.spec is None:
        return []
    return kind_of(view.spec).status_lines(view.spec, db_url, run_root)
