"""Benchmark report: predicted against measured trial seconds (cost before running).

Calibrates the cost model on one run root's results DB (``--calibrate``, e.g. a smoke sweep's
root), predicts every trial of a sweep spec as a submit would before running it (on this
machine's CPU or GPUs, with the cache of ``--cache-dir``; default: an empty cache, as a cold
run; in the sweep's schedule, so trials running at once split or wait for the shared work
another is building: ``orchestrator.cost.model.simulate``), and compares with the trials
of that sweep measured in another run root (``--measured``).
Prints per trial the measured seconds (the trial's wall seconds), the calibrated prediction and
the modelled-only prediction (no results DB: FLOPs over the hardware's throughput times the
stated utilisation) with their errors in %, each under two rules: the sweep's schedule
(``simulate``: trials running at once split or wait for shared work) and the simpler rule
(``*_apart``: each trial priced alone after the ones before it, packed on the slots). Then the
totals (serial seconds, the sweep's wall time from its first start to its last finish against
each predicted wall time, the mean absolute error per trial), and the goals: per trial within
25% and the total within 15% when calibrated.

    python -m benchmarks.cost_bench --calibrate /tmp/costroot --spec sweeps/tokens.yaml \
        --measured runs [--sweep tokens] [--cache-dir DIR] [--any-hardware] [--json out.json]

``--any-hardware`` calibrates on trials that recorded no hardware (older trials) or other
hardware too; by default only trials with this machine's ``hardware.id`` count.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from analysis.numbers import duration
from benchmarks import harness
from orchestrator.cost.model import Predictor, predictor
from orchestrator.cost.totals import SweepCost
from orchestrator.spec.grid import expand
from orchestrator.spec.sweep import load_spec
from orchestrator.store.results import ResultsStore

PER_TRIAL_GOAL = 25.0
"""% error per trial the issue asks of the calibrated prediction"""
TOTAL_GOAL = 15.0
"""% error of the whole sweep the issue asks of the calibrated prediction"""


def _store(root: Path) -> ResultsStore:
    db = root / "results.db"
    if not db.exists():
        sys.exit(f"no results DB at {db}; run `orchestrator submit ... --run-root {root}` first")
    return ResultsStore(f"sqlite:///{db.resolve()}", create=False)


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or not meas > 0:
        return None
    return 100.0 * (pred - meas) / meas


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def measured(store: ResultsStore, sweep: str) -> tuple[dict[str, float], float | None]:
    """Wall seconds of the sweep's completed trials by key, and the sweep's wall time (first
    start to last finish)."""
    info = store.get_sweep(sweep)
    if info is None:
        sys.exit(f"no sweep {sweep!r} in the measured results DB")
    done = [t for t in store.trials(info.id) if t.state == "completed" and t.wall_s is not None]
    starts = [t.started_at for t in done if t.started_at]
    ends = [t.finished_at for t in done if t.finished_at]
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    return {t.key: float(t.wall_s or 0.0) for t in done}, span


def compare(preds: dict[str, SweepCost], meas: dict[str, float]) -> dict[str, Any]:
    """Per trial and in total: measured seconds, and each named prediction's seconds and error."""
    rows: list[dict[str, Any]] = []
    for i, (key, c) in enumerate(preds["calibrated"].trials):
        got = meas.get(key)
        row: dict[str, Any] = {"trial_key": key, "measured_s": got, "calibrated_basis": c.basis}
        for name, pred in preds.items():
            total = pred.trials[i][1].total_s
            row[f"{name}_s"] = total
            row[f"{name}_error_pct"] = _err(total, got)
        rows.append(row)
    both = [r for r in rows if r["measured_s"] is not None]
    totals: dict[str, Any] = {"trials_measured": len(both), "trials_predicted": len(rows)}
    for name in preds:
        known = [r for r in both if r[f"{name}_s"] is not None]
        if len(known) == len(both) and both:
            pred_sum = sum(r[f"{name}_s"] for r in known)
            meas_sum = sum(r["measured_s"] for r in known)
            totals[f"{name}_s"] = pred_sum
            totals["measured_s"] = meas_sum
            totals[f"{name}_error_pct"] = _err(pred_sum, meas_sum)
            errors = [abs(r[f"{name}_error_pct"]) for r in known]
            totals[f"{name}_trials_within_{PER_TRIAL_GOAL:g}pct"] = sum(
                e <= PER_TRIAL_GOAL for e in errors
            )
            totals[f"{name}_mean_abs_error_pct"] = sum(errors) / len(errors)
    return {"trials": rows, "totals": totals}


def report(
    out: dict[str, Any], preds: dict[str, SweepCost], pred: Predictor, span: float | None
) -> None:
    """Print the comparison: per trial, the totals, the sweep's wall time under each rule."""
    names = list(preds)
    print(f"{'trial_key':<18} {'measured':>10}" + "".join(f" {n:>17} {'err':>7}" for n in names))
    for r in out["trials"]:
        cells = "".join(
            f" {duration(r[f'{n}_s']):>17} {_pct(r[f'{n}_error_pct']):>7}" for n in names
        )
        print(f"{r['trial_key']:<18} {duration(r['measured_s']):>10}{cells}")
    t = out["totals"]
    print(
        f"total of {t['trials_measured']} measured trials: measured {duration(t.get('measured_s'))}"
    )
    for n in names:
        print(
            f"  {n:<17} serial {duration(t.get(f'{n}_s'))} ({_pct(t.get(f'{n}_error_pct'))}), "
            f"wall {duration(preds[n].wall_s)} ({_pct(_err(preds[n].wall_s, span))} against "
            f"{duration(span)}), mean |error| per trial "
            + ("n/a" if t.get(f"{n}_mean_abs_error_pct") is None
               else f"{t[f'{n}_mean_abs_error_pct']:.1f}%")
        )  # fmt: skip
    print(f"({preds['calibrated'].hardware.slots} trials at once; *_apart: the simpler rule, each "
          "trial priced alone after the ones before it and packed on the slots)")  # fmt: skip
    within = t.get(f"calibrated_trials_within_{PER_TRIAL_GOAL:g}pct")
    total_err = t.get("calibrated_error_pct")
    print(
        f"goals (calibrated): per trial within {PER_TRIAL_GOAL:g}%: {within} of "
        f"{t['trials_measured']}; total within {TOTAL_GOAL:g}%: "
        + ("n/a" if total_err is None else ("met" if abs(total_err) <= TOTAL_GOAL else "not met"))
    )
    for group in pred.fits().values():
        for stage, f in sorted(group.items()):
            print(f"  fit {stage}: {f.detail()} (a = {f.a:.3g} s, b = {f.b:.3g})")
    for note in pred.notes:
        print(f"  note: {note}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--calibrate", type=Path, required=True, help="run root to calibrate on")
    ap.add_argument("--spec", type=Path, required=True, help="the sweep spec to predict")
    ap.add_argument("--measured", type=Path, required=True, help="run root where it ran")
    ap.add_argument("--sweep", help="the sweep's name there (default: the spec's name)")
    ap.add_argument("--cache-dir", type=Path, help="cache the prediction sees (default: empty)")
    ap.add_argument("--any-hardware", action="store_true", help="do not match hardware.id")
    harness.add_json(ap)
    args = ap.parse_args(argv)
    spec = load_spec(args.spec)
    trials = [(t.key, t.config) for t in expand(spec)]
    with tempfile.TemporaryDirectory() as empty:
        cache = args.cache_dir or Path(empty)
        cal_store = _store(args.calibrate)
        pred = predictor(cal_store, spec, cache_dir=cache, match_hardware=not args.any_hardware)
        modelled = predictor(None, spec, cache_dir=cache)
        preds = {
            "calibrated": pred.sweep(trials),
            "modelled": modelled.sweep(trials),
            "calibrated_apart": pred.sweep_apart(trials),
            "modelled_apart": modelled.sweep_apart(trials),
        }
        cal_store.close()
    meas_store = _store(args.measured)
    meas, span = measured(meas_store, args.sweep or spec.name)
    meas_store.close()
    out = compare(preds, meas)
    out["totals"]["measured_wall_s"] = span
    for name, p in preds.items():
        out["totals"][f"{name}_wall_s"] = p.wall_s
    report(out, preds, pred, span)
    if args.json:
        harness.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
