"""A sweep's predicted cost beside its measured one: the prediction a submit records, and the
dashboard's section comparing it with the trials' wall seconds.

``orchestrator submit`` writes ``<run root>/<sweep>/cost_prediction.json`` once its checks
pass (:func:`write_prediction`: each trial's predicted seconds per stage with its basis, made
before the trial ran; a resubmit adds the trials it runs and keeps the earlier predictions).
After the sweep, :func:`cost_section` gathers predicted against measured seconds (per trial and
stage, the error in %, and the total) for the sweep's dashboard, which is rendered with it.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.numbers import duration, fmt, gpu_hours
from orchestrator.store.results import ResultsStore
from workloads.files import atomic_json

if TYPE_CHECKING:
    from dashboards.cost_section import CostSection
    from orchestrator.cost.totals import SweepCost

PREDICTION_FILE = "cost_prediction.json"
"""the prediction's file in the sweep's folder under the run root"""


def total_lines(cost: SweepCost) -> list[str]:
    """The totals: serial time, wall time at the hardware's parallelism, GPU-hours (GPU
    trials), with their basis; unknown trials named."""
    hw = cost.hardware
    n = len(cost.trials)
    lines = []
    if cost.unknown:
        lines.append(
            f"predicted cost: {cost.unknown} of {n} trials unknown (see the table); no total"
        )
        return lines
    at_once = f"{hw.slots} trial{'s' if hw.slots != 1 else ''} at once"
    if hw.kind == "gpu":
        per = f"{hw.gpus_per_trial:g} GPU{'s' if hw.gpus_per_trial != 1 else ''} a trial"
        one = cost.one_slot_wall_s if cost.one_slot_wall_s is not None else cost.wall_s
        on_all = (
            f", {duration(cost.wall_s)} on {hw.devices} {hw.label} ({at_once})"
            if hw.devices > 1
            else ""
        )
        lines.append(
            f"predicted cost on {hw.label}: {gpu_hours(cost.gpu_hours)} ({per}); "
            f"wall {duration(one)} on one {hw.label}{on_all}; basis {cost.basis}"
        )
    else:
        lines.append(
            f"predicted cost on {hw.label}: serial {duration(cost.serial_s)}, wall "
            f"{duration(cost.wall_s)} at {at_once} ({n} trials); basis {cost.basis}"
        )
    return lines


def prediction_record(cost: SweepCost) -> dict[str, Any]:
    """The prediction as JSON-able data: the hardware and, per trial, its total, basis and
    stages (seconds, basis, detail)."""
    return {
        "hardware": cost.hardware.label,
        "made_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "trials": {
            key: {
                "total_s": c.total_s,
                "basis": c.basis,
                "stages": {
                    s.stage: {"seconds": s.seconds, "basis": s.basis, "detail": s.detail}
                    for s in c.stages
                },
            }
            for key, c in cost.trials
        },
    }


def write_prediction(folder: Path, cost: SweepCost) -> Path:
    """Write (or extend) ``folder/cost_prediction.json`` with ``cost``'s trials; trials already
    recorded keep their earlier prediction (the one made before they ran). Atomic (temporary
    file, then rename)."""
    path = folder / PREDICTION_FILE
    new = prediction_record(cost)
    old = read_prediction(path)
    if old:
        new["trials"] = {**new["trials"], **old.get("trials", {})}
    folder.mkdir(parents=True, exist_ok=True)
    return atomic_json(path, new)


def read_prediction(path: Path) -> dict[str, Any]:
    """The recorded prediction, or ``{}`` when there is none (or it cannot be read)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _error(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas > 0:
        return None
    return 100.0 * (pred - meas) / meas


def cost_rows(
    store: ResultsStore, sweep_id: int, prediction: dict[str, Any]
) -> tuple[list[str], list[list[Any]], tuple[float, float, int]]:
    """Headers and rows of the predicted-against-measured table (one row per trial with a
    prediction, in the sweep's order), and (predicted, measured, trials) summed over the
    completed trials with both numbers."""
    trials = {t.key: t for t in store.trials(sweep_id)}
    frame = store.metrics_frame(sweep_id)
    measured = frame.set_index("trial_key") if len(frame) else frame
    predicted: dict[str, Any] = prediction.get("trials", {})
    stages = list(dict.fromkeys(s for p in predicted.values() for s in p.get("stages", {})))
    headers = ["trial_key", "state", "predicted", "measured", "error %", "basis"]
    headers += [f"{s} predicted / measured" for s in stages]
    rows: list[list[Any]] = []
    sums = [0.0, 0.0, 0]
    for key, t in trials.items():
        p = predicted.get(key)
        if p is None:
            continue
        meas = t.wall_s if t.state == "completed" else None
        pred = p.get("total_s")
        if pred is not None and meas is not None:
            sums = [sums[0] + pred, sums[1] + meas, int(sums[2]) + 1]
        err = _error(pred, meas)
        row: list[Any] = [key, t.state, duration(pred), duration(meas), fmt(err, "+.1f"),
                          p.get("basis", "")]  # fmt: skip
        for s in stages:
            sp = p.get("stages", {}).get(s, {}).get("seconds")
            col = f"wall_s/{s}"
            sm = None
            if t.state == "completed" and col in measured.columns and key in measured.index:
                value = float(measured.loc[key, col])
                sm = value if math.isfinite(value) else None
            row.append(f"{duration(sp)} / {duration(sm)}")
        rows.append(row)
    return headers, rows, (sums[0], sums[1], int(sums[2]))


def cost_section(folder: Path, store: ResultsStore, sweep_id: int) -> CostSection | None:
    """The page's Cost section: predicted against measured seconds per trial and stage, from
    ``folder``'s prediction (:data:`PREDICTION_FILE`); None when the folder holds none."""
    from dashboards._html import Table  # the pages' modules (plotly) only when a page is made
    from dashboards.cost_section import CostSection

    prediction = read_prediction(folder / PREDICTION_FILE)
    if not prediction:
        return None
    headers, rows, (pred, meas, n) = cost_rows(store, sweep_id, prediction)
    err = _error(pred, meas) if n else None
    total = (
        f"Over the {n} completed trials with a prediction: predicted {duration(pred)}, measured "
        f"{duration(meas)} (error {fmt(err, '+.1f')}%)."
        if n
        else "No completed trial with a prediction yet."
    )
    return CostSection(
        hardware=str(prediction.get("hardware", "?")),
        made_at=str(prediction.get("made_at", "?")),
        total=total,
        table=Table(headers, rows, sortable=True, table_id="cost-table"),
    )
