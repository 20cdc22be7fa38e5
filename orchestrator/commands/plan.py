"""The ``plan`` command: from the results DB's finished sweeps to what to train and how to serve
it (:mod:`orchestrator.planning`)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.commands.options import DbUrl, RunRoot, TrackingUri, flag
from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from orchestrator.planning.inputs import PlanOptions

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MIN_RESAMPLES = 100
"""fewest bootstrap replicates the CLI accepts"""


Sweeps = Annotated[
    list[str] | None,
    typer.Argument(
        help="sweeps to plan from: a token sweep, a decode sweep and optionally a depth sweep "
        "(default: every sweep of the DB, each kind found once)"
    ),
]
BatchMix = Annotated[
    str,
    typer.Option(
        "--batch-mix",
        help="serving batch sizes and their shares of decoding steps, e.g. 1:0.2,8:0.5,32:0.3 "
        "(shares sum to 1)",
    ),
]
BudgetHours = Annotated[
    float | None,
    typer.Option(
        "--budget-hours",
        help="training hours the recommended draft may take at most, e.g. 2 (default: no "
        "budget; the plan stops at --min-gain)",
    ),
]
MinGain = Annotated[
    float,
    typer.Option(
        "--min-gain",
        help="the least acceptance-length gain per added training hour worth training for",
    ),
]
Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="target shape of the serving roofline (llama-3-8b, qwen2.5-72b, ...; default: the "
        "measured target's)",
    ),
]
Hardware = Annotated[
    str | None,
    typer.Option(
        "--hardware",
        help="hardware of training cost and serving roofline: local-cpu (default) or a "
        "datasheet GPU (a100, h100, h200, h800)",
    ),
]
Prefix = Annotated[
    int, typer.Option("--prefix", help="prefix length s of the serving roofline (tokens)")
]
Holdout = Annotated[
    float | None,
    typer.Option(
        "--holdout",
        help="plan from the token trials at budgets <= this and score the prediction on the "
        "larger ones (e.g. 32768)",
    ),
]
AllowMixedTargets = Annotated[
    bool, flag("--allow-mixed-targets", help="plan from sweeps of different targets (labelled)")
]
Name = Annotated[
    str | None,
    typer.Option(
        "--name",
        help="the plan's folder under the run root and its MLflow run (default: plan-<token "
        "sweep>); decode.k_law: sweep:<name> then reads its k_law.json",
    ),
]
Draft = Annotated[
    str | None,
    typer.Option(
        "--draft",
        help="draft path or hub id the serving snippets name (an `orchestrator export`; "
        "default: <run-root>/<name>/draft, where to export the draft trained to the plan)",
    ),
]
Resamples = Annotated[
    int, typer.Option("--resamples", help="bootstrap replicates of the intervals")
]


def plan(
    sweeps: Sweeps = None,
    *,
    batch_mix: BatchMix = "1:1",
    budget_hours: BudgetHours = None,
    min_gain: MinGain = 0.05,
    model: Model = None,
    hardware: Hardware = None,
    prefix: Prefix = 1024,
    holdout: Holdout = None,
    allow_mixed_targets: AllowMixedTargets = False,
    name: Name = None,
    draft: Draft = None,
    resamples: Resamples = 1000,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Plan what to train and how to serve it from the measured laws, with intervals.

    Reads the token law (and a depth law, when a depth sweep exists) and a decode sweep's
    acceptance-versus-k data; recommends the pretraining tokens and draft depth where the
    predicted acceptance gain per training hour falls below --min-gain (or the best within
    --budget-hours), and the verified tokens k per batch size of --batch-mix from the roofline
    of --model on --hardware. Every figure has a 95% interval; one beyond the measured range
    (tokens, layers, batch sizes, another target or hardware) is labelled as extrapolated.

    Writes <run-root>/<name>/: plan.html (linked from the index), plan.json,
    vllm_speculative_config.json, sglang_launch.sh and k_law.json; and one MLflow run.

    Example: orchestrator plan --batch-mix 1:0.2,8:0.5,32:0.3 --budget-hours 2
    """
    from orchestrator.cost.hardware import check_hardware_name
    from orchestrator.planning.inputs import (
        check_budget,
        parse_batch_mix,
        resolve_shape_name,
    )

    mix = parse_batch_mix(batch_mix)
    check_budget(budget_hours)
    _check_numbers(min_gain=min_gain, prefix=prefix, holdout=holdout, resamples=resamples)
    if draft is not None and not draft.strip():
        raise OrchestratorError(
            "--draft must name the draft the snippets serve (a path or hub id). Fix: --draft "
            "exported/draft (after orchestrator export)"
        )
    if model is not None:
        resolve_shape_name(model)
    check_hardware_name(hardware or "local-cpu")
    if name is not None:
        _check_name(name)
    from orchestrator.planning.inputs import PlanOptions

    run_root = run_root.resolve()
    opts = PlanOptions(
        sweeps=tuple(sweeps or ()),
        model=model,
        hardware=hardware,
        batch_mix=mix,
        budget_hours=budget_hours,
        min_gain=min_gain,
        prefix=prefix,
        holdout=holdout,
        allow_mixed_targets=allow_mixed_targets,
        n_resamples=resamples,
        cache_dir=run_root / "cache",
    )
    _run(opts, name=name, draft=draft, run_root=run_root, db_url=db_url, tracking_uri=tracking_uri)


def _check_numbers(*, min_gain: float, prefix: int, holdout: float | None, resamples: int) -> None:
    """Refuse a numeric option out of its range before anything is opened.

    Raises:
        OrchestratorError: the option, its rule and a fix.
    """
    if not (min_gain >= 0):
        raise OrchestratorError(f"--min-gain {min_gain:g} must be >= 0. Fix: e.g. --min-gain 0.05")
    if prefix < 0:
        raise OrchestratorError(f"--prefix {prefix} must be >= 0 (tokens). Fix: --prefix 1024")
    if holdout is not None and not (math.isfinite(holdout) and holdout > 0):
        raise OrchestratorError(
            f"--holdout {holdout:g} must be a positive pretraining-token budget (the plan fits "
            "the token trials at or below it and scores the rest). Fix: e.g. --holdout 32768"
        )
    if resamples < MIN_RESAMPLES:
        raise OrchestratorError(
            f"--resamples {resamples} is too few for a 95% interval (at least {MIN_RESAMPLES}: "
            "its ends are the 2.5th and 97.5th percentiles). Fix: --resamples 1000 (the default)"
        )


def _check_name(name: str) -> None:
    """Refuse a ``--name`` that is not a plain folder name.

    Raises:
        OrchestratorError: the rule (a letter or digit first, then letters, digits, '.', '_'
            and '-') and a fix.
    """
    if not _NAME.fullmatch(name):
        raise OrchestratorError(
            f"--name {name!r} must start with a letter or digit and use only letters, digits, "
            "'.', '_' and '-' (a folder under the run root). Fix: e.g. --name plan-1"
        )


def _run(
    opts: PlanOptions,
    *,
    name: str | None,
    draft: str | None,
    run_root: Path,
    db_url: str | None,
    tracking_uri: str | None,
) -> None:
    from orchestrator.planning.outputs import log_plan, open_tracker, write_plan
    from orchestrator.planning.plan import make_plan
    from orchestrator.planning.view import print_plan
    from orchestrator.reports.index import write_run_index
    from orchestrator.store.access import open_store
    from orchestrator.tracking.tracker import default_tracking_uri

    store = open_store(run_root, db_url, must_exist=True)
    try:
        result = make_plan(store, opts)
        plan_name = name or f"plan-{result['sweeps']['tokens']}"
        if store.get_sweep(plan_name) is not None:
            raise OrchestratorError(
                f"--name {plan_name!r} is a sweep of this DB; its folder is the sweep's. Fix: "
                f"--name {plan_name}-plan"
            )
        _check_folder(run_root / plan_name, plan_name)
        tracker = open_tracker(tracking_uri or default_tracking_uri(run_root))
        served = draft or str(run_root / plan_name / "draft")
        files = write_plan(run_root / plan_name, result, name=plan_name, draft=served)
        run_id, replaced = log_plan(tracker, result, files, name=plan_name)
        index = write_run_index(store, run_root)
    finally:
        store.close()
    print_plan(
        result,
        name=plan_name,
        files=files,
        index=index,
        mlflow_run=run_id,
        replaced=replaced,
        export_to=None if draft else served,
    )


def _check_folder(folder: Path, name: str) -> None:
    """A plan's folder is new or an earlier plan's (its plan.json): never the DB, the cache,
    MLflow's store or another sweep's files."""
    if folder.exists() and not (folder.is_dir() and (folder / "plan.json").is_file()):
        raise OrchestratorError(
            f"--name {name!r}: {folder} exists and is not a plan's folder (no plan.json). Fix: "
            f"--name plan-{name.split('.')[0]}"
        )
