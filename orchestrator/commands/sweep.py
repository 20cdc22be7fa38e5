"""The sweep commands: ``submit``, ``status``, ``fit``, ``retry``, ``cancel``.

Each parses its options, calls a service (:mod:`orchestrator.driving.service`,
:mod:`orchestrator.driving.control`, :mod:`orchestrator.reports`) and renders what it returns
or emits (:mod:`orchestrator.commands.render`). Ray, MLflow and Optuna are imported once the
input is valid, so ``--help`` and a bad spec answer at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analysis.numbers import plural
from orchestrator.commands import render
from orchestrator.commands.options import Address, DbUrl, RunRoot, TrackingUri, flag
from orchestrator.commands.render import err, out
from orchestrator.commands.setup import loopback_ray, quiet_env
from orchestrator.cost import view as cost_view
from orchestrator.errors import OrchestratorError
from orchestrator.kinds import kind_of
from orchestrator.spec.limits import MAX_TRIALS
from orchestrator.store.access import find_sweep, open_store, open_sweep

if TYPE_CHECKING:
    from orchestrator.driving.destinations import Destinations
    from orchestrator.driving.service import Plan

CacheDir = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="shared cache of the converted target, target features, SFT replies regenerated "
        "by the target and greedy references (default: <run-root>/cache)",
    ),
]


def submit(
    spec: Annotated[Path, typer.Argument(help="sweep YAML, e.g. sweeps/tokens.yaml")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
    address: Address = None,
    cache_dir: CacheDir = None,
    dry_run: Annotated[
        bool, flag("--dry-run", help="validate and list the trials; run and write nothing")
    ] = False,
    ray_job: Annotated[
        bool,
        flag(
            "--ray-job",
            help="run this driver as a Ray Job on the cluster whose job server is --address "
            "(e.g. http://head:8265); prints the job id and returns",
        ),
    ] = False,
    yes: Annotated[
        bool, flag("--yes", help=f"run a grid of more than {MAX_TRIALS:,} trials")
    ] = False,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware",
            help="with --dry-run: cost the trials on this hardware instead of this machine: a "
            "datasheet GPU (a100, h100, h200, h800) or local-cpu; a GPU skips the checks only "
            "this machine decides (targets, corpora, devices, disk, what fits here) and prints "
            "GPU-hours",
        ),
    ] = None,
    devices: Annotated[
        int | None,
        typer.Option(
            "--devices",
            help="with --hardware GPU: how many of those GPUs the sweep gets (default 1); "
            "sets the trials at once and the wall time",
        ),
    ] = None,
) -> None:
    """Expand SPEC into trials, run them on Ray, record them, fit the law, write the dashboard.

    Resubmitting the same spec skips completed trials and reruns the rest; a spec that changes
    the grid of an existing sweep is refused (give it a new name).

    A spec has a grid: (every combination), a search: (an Optuna study) or a design: (an
    adaptive design over one law axis that stops at a precision goal or a budget); search and
    design resume when resubmitted.

    --dry-run prints each trial's predicted seconds per stage with its basis (calibrated,
    modelled or unknown) and the totals; --dry-run --hardware h200 --devices 8 plans the
    sweep on 8 H200s instead of this machine.

    One driver runs a sweep at a time (orchestrator cancel stops it). A grid of more than
    10,000 trials needs --yes.

    Exit code 0 when no trial failed (cancelled ones included), 3 when a trial failed (after the
    report), 2 for bad input (nothing written).
    """
    quiet_env()
    loopback_ray(address)
    cost_view.check_planning(hardware, devices, dry_run=dry_run)
    from orchestrator.driving import service

    plan = service.plan(spec, expand_all=not dry_run or yes)
    dest = service.Destinations(
        run_root=run_root.resolve(),
        db_url=db_url,
        tracking_uri=tracking_uri,
        address=address,
        cache_dir=cache_dir,
    )
    if dry_run:
        _dry_run(plan, dest, hardware, devices)
        return
    service.check_size(plan, yes=yes)
    if ray_job:
        _ray_job(spec, run_root, db_url, tracking_uri, address, cache_dir)
        return
    kind = kind_of(plan.spec)
    metric = kind.status_metric(plan.spec)  # e.g. a search's: each trial's line shows it
    console = render.SweepConsole(plan.spec.workload_info, search_metric=metric)
    try:
        with console.live():
            done = service.submit(plan, dest, console)
    except KeyboardInterrupt:
        _interrupted(plan.spec.name)
    render.print_finished(done, metric=metric or "")
    if done.summary is not None and done.summary.error:
        raise OrchestratorError(done.summary.error)
    _exit_if_failed(done.tally.failed, plan.spec.name, run_root, reruns=kind.reruns_failed)


FAILED_TRIALS_EXIT = 3
"""The exit code of ``submit`` and ``retry`` when a trial they ran failed (as Ray Tune's
``raise_on_failed_trial``): a script, CI or a Ray Job sees the failure; the sweep's report was
written. Cancelled trials are not failures (exit 0)."""


def _exit_if_failed(failed: int, name: str, run_root: Path, *, reruns: bool = True) -> None:
    """Exit with :data:`FAILED_TRIALS_EXIT`, saying so and how to look and rerun, when
    ``failed`` trials of this run failed; ``reruns`` False: the kind does not rerun them (a
    search's failed trials were told to its study as failed)."""
    if not failed:
        return
    root = "" if run_root == Path("runs") else f" --run-root {run_root}"
    again = (
        "the study counted them as failed; a search does not rerun them"
        if not reruns
        else f"rerun them: orchestrator retry {name} --failed{root}"
    )
    out.print(
        f"{plural(failed, 'trial')} failed (errors: orchestrator status "
        f"{name}{root}; {again}); exit code {FAILED_TRIALS_EXIT}",
        markup=False,
        highlight=False,
    )
    raise typer.Exit(FAILED_TRIALS_EXIT)


def _dry_run(
    plan: Plan, dest: Destinations, hardware: str | None = None, devices: int | None = None
) -> None:
    """List the trials after the checks a submit runs (:func:`service.check`), with their
    predicted cost (on ``hardware``, else this machine); write nothing."""
    from orchestrator.driving import service

    spec = plan.spec
    resources = spec.resources.model_dump()
    if plan.too_big and not plan.trials:  # counted, not expanded: listing that many helps nobody
        out.print(
            f"{plan.n_grid:,} trials (not listed: more than {MAX_TRIALS:,}; a real submit needs "
            f"--yes); resources per trial: {resources}. Nothing was run or written."
        )
        return
    here = cost_view.costs_here(hardware)
    service.check(plan, dest, dry_run=True, here=here)  # a refusal exits 2, as the submit would
    shown = kind_of(spec).dry_run(plan.path, spec, dest, hardware=hardware, devices=devices)
    if shown.table is not None:  # e.g. a search's space
        render.print_table(*shown.table)
    for line in shown.lines:
        out.print(line, markup=False, highlight=False)
    if shown.final:  # e.g. a design: its cost lines say it all
        out.print(f"resources per trial: {resources}. Nothing was run or written.")
        return
    if shown.cost:
        cost_view.print_dry_run_cost(plan, dest, hardware, devices)
    describe = spec.workload_info.describe
    if describe is not None and plan.trials:
        distinct = {t.config.model_dump_json(): t.config for t in plan.trials}
        for line in describe(list(distinct.values())):
            out.print(line, markup=False, highlight=False)
    out.print(
        f"{plan.n_trials} trials; resources per trial: {resources}. Nothing was run or written."
    )


def _ray_job(
    spec: Path,
    run_root: Path,
    db_url: str | None,
    tracking_uri: str | None,
    address: str | None,
    cache_dir: Path | None,
) -> None:
    from orchestrator.driving.ray_job import submit_job
    from orchestrator.store.results import mask_url

    if not address:
        raise OrchestratorError("--ray-job needs --address http://<head>:8265 (the job server)")
    job_id = submit_job(
        address,
        spec,
        run_root=run_root,
        db_url=db_url,
        tracking_uri=tracking_uri,
        cache_dir=cache_dir,
        working_dir=Path.cwd(),
    )
    shown = mask_url(address)
    out.print(f"submitted Ray job {job_id} on {shown}")
    out.print(f"follow it: ray job logs --address {shown} --follow {job_id}")
    print(job_id)


def _interrupted(name: str) -> None:
    err.print(
        f"interrupted: completed trials are kept; run the same command to resume "
        f"(`orchestrator status {name}` shows where it stands)"
    )
    raise typer.Exit(130) from None


def status(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
) -> None:
    """Print the trial table of SWEEP (state, grid point, the workload's metrics, error).

    For a search: the searched metric, and the study's best trial. A trial left ``running``
    by a driver that stopped is shown as ``running (driver gone)``.
    """
    quiet_env()
    from orchestrator.reports.status import kind_lines, sweep_status

    root = run_root.resolve()
    store, info = open_sweep(root, db_url, sweep)
    view = sweep_status(store, info)
    render.print_trials(sweep, view.rows, view.columns, view.formats)
    out.print(", ".join(f"{v} {k}" for k, v in sorted(view.counts.items())))
    for line in (view.driver_line, view.cancel_line):
        if line:
            out.print(line)
    for line in kind_lines(view, db_url, root):  # e.g. a search's study and best trial
        out.print(line, markup=False, highlight=False)


def fit(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Refit the law of SWEEP from the DB, store it, update MLflow and the dashboard.

    The sweep's parent MLflow run must exist where ``--tracking-uri`` points (default: the run
    root's mlflow.db); otherwise the command refuses before writing anything.
    """
    quiet_env()
    from orchestrator.driving.guards import check_parent_run, check_sinks_apart
    from orchestrator.driving.runner import RunPaths
    from orchestrator.reports import fit as report
    from orchestrator.tracking.tracker import Tracker, default_tracking_uri

    root = run_root.resolve()
    store, info = open_sweep(root, db_url, sweep)
    check_sinks_apart(root, db_url, tracking_uri)
    uri = tracking_uri or default_tracking_uri(root)
    check_parent_run(uri, info, run_root)
    tracker = Tracker(uri)
    dashboard = RunPaths(root, root / "cache").dashboard(sweep)
    rep = report.fit_sweep(store, info.id, sweep, dashboard, tracker, info.mlflow_run_id)
    render.print_fit(rep)
    out.print(f"dashboard: {rep.dashboard}")
    render.print_browse(tracker.masked_uri, tracker.experiment_id)


def mirror(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Rebuild SWEEP's MLflow runs from the results DB (the system of record).

    For a tracking store that lost them (deleted runs or experiment, ``mlflow gc``, a new
    ``--tracking-uri``): the parent run, a child run per completed trial with its config,
    metrics and series, the law's fit. Runs MLflow still has are left alone; nothing runs.
    """
    quiet_env()
    from orchestrator.driving import service

    root = run_root.resolve()
    dest = service.Destinations(run_root=root, db_url=db_url, tracking_uri=tracking_uri)
    store = open_store(root, db_url, must_exist=True)
    try:
        parent, restored, rep, tracker = service.mirror(sweep, dest, store=store)
    finally:
        store.close()
    out.print(f"sweep {sweep}: parent run {parent}, {restored} trial runs recreated from the DB")
    render.print_fit(rep)
    render.print_browse(tracker.masked_uri, tracker.experiment_id)


def retry(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    failed: Annotated[bool, flag("--failed", help="re-run the failed trials")] = False,
    cancelled: Annotated[bool, flag("--cancelled", help="re-run the cancelled trials")] = False,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
    address: Address = None,
) -> None:
    """Re-run SWEEP's failed (and/or cancelled) trials with the spec stored in the results DB.

    Completed and pending trials are left alone; each re-run keeps its trial row and MLflow
    child run (attempts go up). The sweep's law and dashboard are refreshed afterwards.

    Exit code 3 when a re-run trial failed again (0 when none did; 2 for bad input).
    """
    quiet_env()
    loopback_ray(address)
    from orchestrator.driving import service
    from workloads.registry import WORKLOADS

    if not (failed or cancelled):
        raise OrchestratorError(
            "say which trials to re-run. Fix: add --failed and/or --cancelled, e.g. "
            "orchestrator retry SWEEP --failed"
        )
    states = ({"failed"} if failed else set()) | ({"cancelled"} if cancelled else set())
    dest = service.Destinations(
        run_root=run_root.resolve(), db_url=db_url, tracking_uri=tracking_uri, address=address
    )
    store = open_store(dest.run_root, db_url, must_exist=True)
    workload = WORKLOADS[find_sweep(store, sweep).workload]
    console = render.SweepConsole(workload)
    try:
        with console.live():
            done = service.retry(sweep, states, dest, console, store=store)
    except KeyboardInterrupt:
        _interrupted(sweep)
    if done is None:
        out.print(f"sweep {sweep}: no {' or '.join(sorted(states))} trials; nothing to re-run.")
        return
    render.print_finished(done, retried=True)
    _exit_if_failed(done.tally.failed, sweep, run_root)


def cancel(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
    wait_s: Annotated[
        float,
        typer.Option("--wait", help="seconds to wait for the driver to stop its running trials"),
    ] = 60.0,
) -> None:
    """Stop SWEEP: pending trials become cancelled, running ones are stopped and cancelled.

    The driver running the sweep (on any machine that shares the results DB) sees the request
    within a few seconds, cancels its Ray tasks and exits. When no driver is alive (it crashed),
    running trials are marked cancelled here. `orchestrator submit` or `retry --cancelled`
    runs them again.
    """
    quiet_env()
    from orchestrator.driving.control import cancel_sweep
    from orchestrator.driving.guards import check_sinks_apart
    from orchestrator.tracking.tracker import Tracker, default_tracking_uri

    root = run_root.resolve()
    check_sinks_apart(root, db_url, tracking_uri)
    store, info = open_sweep(root, db_url, sweep)

    def told(n_pending: int, n_running: int, live: bool) -> None:
        out.print(f"sweep {sweep}: {n_pending} pending trials cancelled.")
        if live:
            out.print("the running driver was asked to stop its trials; waiting for it ...")
        else:
            out.print(f"no live driver: {n_running} running trials marked cancelled here.")

    result = cancel_sweep(
        store,
        info,
        wait_s=wait_s,
        tracker=lambda: Tracker(tracking_uri or default_tracking_uri(root)),
        on_requested=told,
    )
    out.print(
        f"{result.cancelled} of {result.total} trials are cancelled; completed ones are kept."
    )
