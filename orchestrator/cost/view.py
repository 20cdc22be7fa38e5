"""The console's view of a sweep's predicted cost: the dry run's per-trial table of stage seconds
with their basis, and the totals (serial, wall at the sweep's parallelism, GPU-hours) that the
dry run and the submit banner print (:mod:`orchestrator.cost.model`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table

from analysis.numbers import duration
from orchestrator.commands.render import out
from orchestrator.cost.report import total_lines
from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from orchestrator.cost.model import Predictor
    from orchestrator.cost.totals import SweepCost
    from orchestrator.driving.destinations import Destinations
    from orchestrator.driving.service import Plan

SHORT = {"features_pretrain": "feat.pre", "features_sft": "feat.sft", "regenerate": "regen"}
"""column titles of the long stage names"""

MARK = {"calibrated": "c", "modelled": "m", "unknown": "?"}
"""a basis in one letter"""


def print_cost_table(
    name: str,
    cost: SweepCost,
    overrides: dict[str, dict[str, Any]],
    order: tuple[str, ...] = (),
) -> None:
    """The planned trials, one row each: grid point, predicted seconds per stage (in
    ``order``, then any other), total and basis (``c`` calibrated, ``m`` modelled, ``?``
    unknown; a stage of a mixed trial carries its own letter)."""
    seen = list(dict.fromkeys(s.stage for _, c in cost.trials for s in c.stages))
    stages = [s for s in order if s in seen] + [s for s in seen if s not in order]
    axes = sorted({k for o in overrides.values() for k in o})
    table = Table(
        title=f"sweep {name}: predicted seconds (c calibrated, m modelled, ? unknown)",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("trial_key", no_wrap=True)
    for col in [*axes, *(SHORT.get(s, s) for s in stages), "total", "basis"]:
        table.add_column(col, no_wrap=True)
    for key, c in cost.trials:
        point = overrides.get(key, {})
        mixed = "+" in c.basis
        cells = []
        for s in stages:
            found = c.stage(s)
            if found is None:
                cells.append("-")
            else:
                mark = f" {MARK[found.basis]}" if mixed and found.seconds is not None else ""
                cells.append(duration(found.seconds, narrow=True) + mark)
        basis = "+".join(MARK.get(b, b) for b in c.basis.split("+"))
        total = duration(c.total_s, narrow=True)
        table.add_row(key, *[str(point.get(a, "")) for a in axes], *cells, total, basis)
    wide = out if out.is_terminal else Console(width=200, soft_wrap=True)  # a pipe, a log
    wide.print(table)


def calibration_lines(pred: Predictor, sample: Any) -> list[str]:
    """What the figures rest on: the fits used (stage, method, trials, R²), the utilisation of
    the modelled ones and the notes (trials not used, assumptions)."""
    if pred.model is None:
        return [
            f"cost: workload {pred.spec.workload} has no cost model; its trials' cost is unknown"
        ]
    lines = []
    fits = pred.fits()
    if pred.matched() and fits:
        parts = [
            f"{stage}: {f.detail()}"
            for group in fits.values()
            for stage, f in sorted(group.items())
        ]
        lines.append(
            f"calibrated on {pred.matched()} completed trials on this hardware "
            f"({pred.hardware.fingerprint}): " + "; ".join(parts)
        )
    else:
        lines.append(
            f"calibration: no completed trial of this workload on {pred.hardware.fingerprint} "
            "in the results DB"
        )
    if sample is not None:
        prof, util = pred.profile(sample), pred.utilisation(sample)
        if prof is not None and util is not None:
            lines.append(
                f"modelled: FLOPs or roofline seconds over {prof.name} "
                f"({prof.peak_flops / 1e12:.3g} TFLOP/s {prof.dtype}, "
                f"{prof.bandwidth / 1e9:.3g} GB/s; {prof.source}) x "
                f"utilisation ({util.source})"
            )
    lines += [f"note: {n}" for n in pred.notes]
    return lines


def print_lines(lines: list[str]) -> None:
    """Each line as plain text (no rich markup: ``[...]`` stays as written)."""
    for line in lines:
        out.print(line, markup=False, highlight=False)


def check_planning(hardware: str | None, devices: int | None, *, dry_run: bool) -> None:
    """Refuse ``--hardware``/``--devices`` outside a dry run, ``--devices`` without a GPU
    ``--hardware``, and an unknown hardware name (with the closest one).

    Raises:
        OrchestratorError: naming the flag and the fix.
    """
    from orchestrator.cost.hardware import check_hardware_name
    from workloads.roofline.hardware import LOCAL_CPU

    if hardware is None and devices is None:
        return
    if devices is not None and devices < 1:
        raise OrchestratorError(
            f"--devices {devices}: a sweep needs at least one GPU. Fix: --devices 1 (or more)"
        )
    if not dry_run:
        raise OrchestratorError(
            "--hardware and --devices cost a sweep without running it. Fix: add --dry-run "
            "(e.g. --dry-run --hardware h200 --devices 8)"
        )
    if hardware is None:
        raise OrchestratorError(
            "--devices counts GPUs of a named hardware. Fix: add --hardware, e.g. "
            "--hardware h200 --devices 8"
        )
    if check_hardware_name(hardware) == LOCAL_CPU and devices is not None:
        raise OrchestratorError(
            "--devices counts GPUs; local-cpu is this machine, whose cores are counted as they "
            "are. Fix: leave out --devices, or name a GPU (--hardware h200 --devices 8)"
        )


def costs_here(hardware: str | None) -> bool:
    """Whether the dry run costs the sweep on this machine (no ``--hardware``, or local-cpu):
    then every check of a submit runs; else those only this machine decides are skipped."""
    from orchestrator.cost.hardware import check_hardware_name
    from workloads.roofline.hardware import LOCAL_CPU

    return hardware is None or check_hardware_name(hardware) == LOCAL_CPU


def print_dry_run_cost(
    plan: Plan, dest: Destinations, hardware: str | None, devices: int | None
) -> None:
    """The dry run's trial table with predicted seconds per stage, the totals and what they
    rest on (calibrated from the results DB under ``dest`` when it exists; nothing is
    created)."""
    from orchestrator.cost import model as costing
    from orchestrator.store.access import open_store

    try:
        store = open_store(dest.run_root, dest.db_url, must_exist=True)
    except OrchestratorError:
        store = None  # no results DB yet: modelled figures
    try:
        pred = costing.predictor(
            store, plan.spec, cache_dir=dest.paths.cache_dir, hardware=hardware,
            devices=devices or 1,
        )  # fmt: skip
        cost = pred.sweep([(t.key, t.config) for t in plan.trials])
    finally:
        if store is not None:
            store.close()
    if not costs_here(hardware):
        print_lines(
            [
                f"planning on {cost.hardware.devices} {cost.hardware.label}: the checks only "
                "this machine decides (the workload's preflight: targets, corpora, prompt "
                "sets, devices, disk; and what fits here) were skipped; a submit where the "
                "sweep runs makes them"
            ]
        )
    order = (*pred.model.stages, costing.SETUP) if pred.model is not None else ()
    print_cost_table(plan.spec.name, cost, {t.key: t.overrides for t in plan.trials}, order)
    sample = plan.trials[0].config if plan.trials else None
    print_lines(total_lines(cost) + calibration_lines(pred, sample))
