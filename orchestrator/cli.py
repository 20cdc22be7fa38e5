"""``orchestrator``: submit sweeps, show their trials, refit their laws, rebuild and compare
dashboards, export drafts.

Every user mistake ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator._secrets import redact
from orchestrator.cli_options import DbUrl, RunRoot, TrackingUri
from orchestrator.cli_options import find_sweep as _find_sweep
from orchestrator.cli_options import open_store as _store
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.export_cmd import export
from orchestrator.report_cmd import compare, report
from orchestrator.roofline_cmd import roofline
from orchestrator.spec import MAX_TRIALS

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # a traceback's locals would show --db-url passwords
    help="Scaling-law sweeps for speculative decoding (draft training on Ray, "
    "tracked in MLflow and SQL, laws fitted, dashboards written).",
)
out = Console(soft_wrap=True)  # paths and commands stay on one line when piped or logged
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

Address = Annotated[
    str | None,
    typer.Option(
        "--address",
        envvar="RAY_ADDRESS",
        help="Ray cluster address, e.g. ray://head:10001 or head:6379 (default: a local Ray on "
        "127.0.0.1); with --ray-job the job server, e.g. http://head:8265",
    ),
]


def _one_line_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OrchestratorError, ValueError) as e:
            message = redact(
                str(e),
                kwargs.get("db_url"),
                kwargs.get("tracking_uri"),
                kwargs.get("address") or os.environ.get("RAY_ADDRESS"),
            )
            # a Text, not markup: paths and values in the message are printed as they are
            line = Text.assemble(("error:", "bold red"), f" {message}")
            err.print(line, highlight=False, soft_wrap=True, emoji=False)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def _env() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # retries end in one TrackingError


def _loopback_ray(address: str | None) -> None:
    """Keep a local Ray (no ``address``) on 127.0.0.1; call before ``ray`` is imported.

    Ray 2.60 turns ``ray.init(_node_ip_address="127.0.0.1")`` into the machine's address and then
    listens on all interfaces (GCS, raylet, workers, agents), unless multi-node clusters are off,
    which a one-node local Ray does not need. A user's own setting of the variable wins.
    """
    if not address:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _tracker(run_root: Path, tracking_uri: str | None) -> Any:
    from orchestrator.tracking import Tracker, default_tracking_uri

    return Tracker(tracking_uri or default_tracking_uri(run_root))


@app.command()
@_one_line_errors
def submit(
    spec: Annotated[Path, typer.Argument(help="sweep YAML, e.g. sweeps/tokens.yaml")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
    address: Address = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            help="shared cache of the "
            "converted target, target features and greedy "
            "references (default: <run-root>/cache)",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="validate and list the trials; run and write nothing")
    ] = False,
    ray_job: Annotated[
        bool,
        typer.Option(
            "--ray-job",
            help="run this driver as a Ray Job on the cluster whose job server is --address "
            "(e.g. http://head:8265); prints the job id and returns",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option("--yes", help=f"run a grid of more than {MAX_TRIALS:,} trials"),
    ] = False,
) -> None:
    """Expand SPEC into trials, run them on Ray, record them, fit the law, write the dashboard.

    Resubmitting the same spec skips completed trials and reruns the rest. A spec with a
    ``search:`` block runs an Optuna study instead of a grid and resumes it when resubmitted.
    One driver runs a sweep at a time; `orchestrator cancel` stops it. A grid of more than
    10,000 trials needs ``--yes``.
    """
    _env()
    _loopback_ray(address)
    from orchestrator.grid import count_trials, expand
    from orchestrator.spec import load_spec

    sweep = load_spec(spec)
    n_grid = 0 if sweep.search else count_trials(sweep)
    too_big = n_grid > MAX_TRIALS and not yes
    if too_big and not dry_run:
        raise SpecError(
            f"{spec}: the grid expands to {n_grid:,} trials, more than {MAX_TRIALS:,}. Fix: pass "
            "--yes to run them all, or shrink the grid (count it with --dry-run)"
        )
    if dry_run and too_big:  # counted, not expanded: listing that many helps nobody
        out.print(
            f"{n_grid:,} trials (not listed: more than {MAX_TRIALS:,}; a real submit needs "
            f"--yes); resources per trial: {sweep.resources.model_dump()}. "
            "Nothing was run or written."
        )
        return
    trials = [] if sweep.search else expand(sweep)
    configs = [t.config for t in trials]
    if dry_run:
        if sweep.search:
            _print_space(sweep)
        else:
            _print_trials(sweep.name, [(t.key, "planned", t.overrides, None) for t in trials])
        try:
            _preflight(spec, sweep, configs, run_root.resolve())
        except SpecError as exc:
            out.print(
                Text.assemble(("warning", "yellow"), f": a real submit would stop here: {exc}"),
                emoji=False,
            )
        n = sweep.search.n_trials if sweep.search else len(trials)
        out.print(
            f"{n} trials; resources per trial: "
            f"{sweep.resources.model_dump()}. Nothing was run or written."
        )
        return
    if ray_job:
        from orchestrator.ray_job import submit_job

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
        from orchestrator.store import mask_url

        shown = mask_url(address)
        out.print(f"submitted Ray job {job_id} on {shown}")
        out.print(f"follow it: ray job logs --address {shown} --follow {job_id}")
        print(job_id)
        return
    run_root = run_root.resolve()
    _preflight(spec, sweep, configs, run_root)  # a missing target or draft stops here, unwritten
    _check_folder("--run-root", run_root)
    if cache_dir is not None:
        _check_folder("--cache-dir", cache_dir)
    from orchestrator import runner  # Ray and MLflow: imported once the input is valid

    paths = runner.RunPaths(
        run_root=run_root, cache_dir=(cache_dir or run_root / "cache").resolve()
    )
    if address:  # fail fast, before anything is written
        runner.check_ray_address(address)
    if tracking_uri and not db_url:  # open remote sinks first: a bad one leaves no local files
        tracker = _tracker(run_root, tracking_uri)
        store = _store(run_root, db_url)
    else:
        store = _store(run_root, db_url)
        tracker = _tracker(run_root, tracking_uri)
    study = None
    if sweep.search:  # the study lives in the results DB; a resubmit resumes it
        import optuna

        from orchestrator import search

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = search.open_study(sweep, search.storage_url(db_url, run_root))
    runner.init_ray(address)
    sweep_id, _ = runner.register(store, sweep, spec, spec.read_text(encoding="utf-8"))
    what = f"{len(trials)} trials"
    if sweep.search:
        s = sweep.search
        what = (
            f"Optuna search of {s.n_trials} trials ({s.direction} {s.metric}, sampler {s.sampler})"
        )
    _drive(store, tracker, sweep, sweep_id, paths, study, what, str(spec))


def _drive(
    store: Any,
    tracker: Any,
    sweep: Any,
    sweep_id: int,
    paths: Any,
    study: Any,
    what: str,
    spec_label: str,
    states: set[str] | None = None,
) -> None:
    """Open the parent run, run the trials (those in ``states`` only, if given), fit, report."""
    from orchestrator import report
    from orchestrator.runner import STALE_AFTER_S
    from orchestrator.store import driver_id

    store.claim_sweep(sweep_id, driver_id(), stale_after_s=STALE_AFTER_S)  # before any output
    info = store.get_sweep(sweep.name)
    parent = tracker.start_sweep_run(
        sweep.name,
        {"spec": spec_label, **sweep.model_dump(mode="json")},
        info.mlflow_run_id if info else None,
    )
    store.set_sweep_mlflow_run(sweep_id, parent)
    out.print(
        f"sweep [bold]{sweep.name}[/]: {what}; results DB {store.url}; "
        f"MLflow {tracker.masked_uri} (parent run {parent[:8]})"
    )
    done = sum(t.state == "completed" for t in store.trials(sweep_id))
    if done and not sweep.search:
        out.print(f"{done} trials already completed: skipped")
    try:
        summary = _run_with_progress(store, tracker, sweep, sweep_id, parent, paths, study, states)
    except KeyboardInterrupt:
        err.print(
            f"interrupted: completed trials are kept; run the same command to resume "
            f"(`orchestrator status {sweep.name}` shows where it stands)"
        )
        raise typer.Exit(130) from None
    if sweep.search:
        _finish_search(store, tracker, sweep, sweep_id, parent, paths, summary)
        return
    rep = report.fit_sweep(
        store, sweep_id, sweep.name, paths.dashboard(sweep.name), tracker, parent
    )
    bad = summary.failed + summary.cancelled
    tracker.set_state(
        parent,
        "completed" if bad == 0 else ("cancelled" if summary.cancelled else "failed"),
        None if bad == 0 else f"{summary.failed} trials failed, {summary.cancelled} cancelled",
    )
    skipped = "already completed" if states is None else "not selected"
    out.print(
        f"{summary.completed} completed, {summary.skipped} {skipped} (skipped), "
        f"{summary.failed} failed, {summary.cancelled} cancelled."
    )
    _print_fit(rep)
    out.print(f"dashboard: {rep.dashboard}")
    _print_browse(tracker)


def _print_browse(tracker: Any) -> None:
    """How to open the sweep in the MLflow UI (its runs table, not the default overview)."""
    uri = tracker.masked_uri
    if uri.startswith(("http://", "https://")):
        out.print(f"browse: {uri.rstrip('/')}/#/experiments/{tracker.experiment_id}/runs")
    else:
        out.print(
            f"browse: mlflow ui --backend-store-uri {uri} --host 127.0.0.1, then open "
            f"http://127.0.0.1:5000/#/experiments/{tracker.experiment_id}/runs"
        )


def _check_folder(flag: str, folder: Path) -> None:
    """Refuse a folder that cannot be created: it, or the nearest existing folder above it, is a
    file or is not writable."""
    existing = next(p for p in (folder, *folder.resolve().parents) if p.exists())
    if not existing.is_dir():
        raise OrchestratorError(
            f"{flag} {folder}: {existing} is a file, not a folder. Fix: give a folder (it is "
            "created if missing)"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OrchestratorError(
            f"{flag} {folder}: {existing} is not writable. Fix: give a folder you can write to"
        )


def _preflight(spec: Path, sweep: Any, configs: list[Any], run_root: Path) -> None:
    """What would make every trial fail, checked before anything is written: the targets (a hub
    id that cannot be downloaded) and, for decode_bench, the draft, device and prompt sets.

    Raises:
        SpecError: naming the spec and the fix.
    """
    _preflight_targets(spec, sweep, configs)
    if sweep.workload == "draft_train":
        _preflight_chat_template(spec, sweep, configs)
    if sweep.workload == "decode_bench":
        _preflight_decode(spec, sweep, configs, run_root)


def _preflight_targets(spec: Path, sweep: Any, configs: list[Any]) -> None:
    from workloads.target_source import HF_ENDPOINT, check_target_source

    if "target" not in sweep.config_model.model_fields:  # a workload without a target (sleep)
        return
    names = {c.target.model for c in configs}
    if sweep.search:  # the base's target, and any the search may choose
        names.add(sweep.config_model.model_validate(sweep.base).target.model)
        param = sweep.search.space.get("target.model")
        names |= {str(v) for v in (param.choice or [])} if param is not None else set()
    offline = any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
    endpoint = os.environ.get("HF_ENDPOINT") or HF_ENDPOINT
    try:
        for name in sorted(names):
            check_target_source(name, offline=offline, endpoint=endpoint)
    except ValueError as exc:
        raise SpecError(f"{spec}: {exc}") from exc


def _preflight_chat_template(spec: Path, sweep: Any, configs: list[Any]) -> None:
    """SFT renders chats with the target's chat template (and ``sft.responses: target`` asks
    the target for its replies through it): a target without one is refused here."""
    from orchestrator.spec import spec_line
    from workloads.target_source import check_chat_template

    if not configs:  # a search: the base's target
        configs = [sweep.config_model.model_validate(sweep.base)]
    names = {c.target.model for c in configs if c.sft.tokens > 0}
    try:
        for name in sorted(names):
            check_chat_template(name)
    except ValueError as exc:
        line = spec_line(
            spec, ("base", "target", "model"), ("base", "sft", "responses"), ("base", "sft")
        )
        raise SpecError(f"{spec}:{line}: {exc}") from exc


def _preflight_decode(spec: Path, sweep: Any, configs: list[Any], run_root: Path) -> None:
    from workloads.config import DecodeBenchConfig
    from workloads.decode_bench import preflight

    if not configs:  # a search: its sampled axes are tree knobs, the draft is in base
        configs = [DecodeBenchConfig.model_validate(sweep.base)]
    try:
        for cfg in {c.draft.model_dump_json(): c for c in configs}.values():
            preflight(cfg, run_root)
    except ValueError as exc:
        raise SpecError(f"{spec}: {exc}") from exc


def _finish_search(
    store: Any, tracker: Any, sweep: Any, sweep_id: int, parent: str, paths: Any, summary: Any
) -> None:
    """Dashboard, parent run state and the best trial of a search; its stop error, if any."""
    from orchestrator import report

    rep = report.fit_sweep(
        store, sweep_id, sweep.name, paths.dashboard(sweep.name), tracker, parent
    )
    ok = summary.failed == 0 and summary.error is None and summary.cancelled == 0
    tracker.set_state(
        parent,
        "completed" if ok else ("cancelled" if summary.cancelled else "failed"),
        summary.error
        or (None if ok else f"{summary.failed} trials failed, {summary.cancelled} cancelled"),
    )
    out.print(
        f"{summary.completed} completed, {summary.failed} failed, {summary.cancelled} cancelled, "
        f"{summary.reused} reused from the store (not rerun); {summary.counted}/"
        f"{summary.n_trials} trials finished in the study."
    )
    _print_best(sweep.search.metric, summary.best)
    out.print(f"dashboard: {rep.dashboard}")
    _print_browse(tracker)
    if summary.error:
        raise OrchestratorError(summary.error)


def _print_best(metric: str, best: Any) -> None:
    if best is None:
        out.print("best: none yet (no completed trial)")
        return
    params = " ".join(f"{k}={v}" for k, v in best.params.items())
    out.print(
        f"best: {metric} = {best.value:.4f} at {params} "
        f"(Optuna trial {best.number}, trial {best.trial_key})"
    )


def _print_space(sweep: Any) -> None:
    s = sweep.search
    table = Table(title=f"sweep {sweep.name}: search space")
    table.add_column("field")
    table.add_column("distribution")
    for name, param in s.space.items():
        table.add_row(name, param.describe())
    out.print(table)
    out.print(
        f"search: {s.n_trials} trials, {s.direction} {s.metric}, sampler {s.sampler} "
        f"(seed {sweep.seeds[0]})"
    )


def _run_with_progress(
    store: Any,
    tracker: Any,
    sweep: Any,
    sweep_id: int,
    parent: str,
    paths: Any,
    study: Any = None,
    states: set[str] | None = None,
) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from orchestrator import runner

    if sweep.search:
        from orchestrator import search

        todo = max(0, sweep.search.n_trials - search.counted(study))
    else:
        todo = len(
            [
                t
                for t in store.trials(sweep_id)
                if t.state != "completed" and (states is None or t.state in states)
            ]
        )
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    ) as bar:
        task = bar.add_task("trials", total=todo)

        def on_event(event: str, trial: Any, metrics: dict[str, float] | None) -> None:
            point = " ".join(f"{k}={v}" for k, v in trial.overrides.items())
            if event == "started":
                bar.console.print(f"  started   {trial.key} {point}")
                return
            bar.advance(task)
            if sweep.search and event in ("completed", "reused"):
                m = sweep.search.metric
                value = (metrics or {}).get(m, float("nan"))
                bar.console.print(f"  {event:<9} {trial.key} {point} {m}={value:.4g}")
            elif event == "completed" and metrics and sweep.workload == "sleep":
                bar.console.print(
                    f"  completed {trial.key} {point} "
                    f"sleep.seconds={metrics.get('sleep.seconds', float('nan')):.2f} "
                    f"attempt={int(metrics.get('sleep.attempt', 0))}"
                )
            elif event == "completed" and metrics:
                nan = float("nan")
                speed = (
                    f"tokens_per_s={metrics.get('tokens_per_s', nan):.2f} "
                    f"speedup={metrics.get('speedup', nan):.2f}x "
                    if sweep.workload == "decode_bench"
                    else ""
                )
                bar.console.print(
                    f"  completed {trial.key} {point} {speed}acceptance_length="
                    f"{metrics.get('acceptance_length', nan):.3f} "
                    f"mismatches={int(metrics.get('mismatches', 0))}"
                )
            elif event == "cancelled":
                bar.console.print(f"  [yellow]cancelled[/] {trial.key} {point}")
            else:
                bar.console.print(f"  [red]failed[/]    {trial.key} {point}")

        if sweep.search:
            from orchestrator import search

            return search.run_search(
                store, tracker, sweep, sweep_id, parent, paths, study, on_event
            )
        return runner.run_trials(
            store, tracker, sweep, sweep_id, parent, paths, on_event, states=states
        )


def _num(value: float, fmt: str) -> str:
    """``value`` formatted, or "n/a" when it is NaN (e.g. R² of a constant response)."""
    return "n/a" if math.isnan(value) else format(value, fmt)


def _print_fit(rep: Any) -> None:
    f, rv = rep.fit, rep.review
    if f is None:
        pass
    elif not f.ok:
        out.print(f"fit: {f.status}")
    else:
        out.print(
            f"fit: {f.form}: a = {f.a:.4f} [{f.a_ci[0]:.4f}, {f.a_ci[1]:.4f}] (95% CI, "
            f"{f.cov_type}), b = {f.b:.4f} [{f.b_ci[0]:.4f}, {f.b_ci[1]:.4f}], "
            f"R² = {_num(f.r2, '.3f')} (adjusted {_num(f.r2_adj, '.3f')}), n = {f.n}"
        )
    if rv is not None:
        out.print(rv.counts.text())
    if rv is not None and f is not None and f.ok:
        from dashboards.review_tables import review_rows

        for check, value in review_rows(rv)[3:]:
            if not str(check).startswith(("a (95% CI", "b (95% CI", "R²", "n (")):
                out.print(f"  {check}: {value}")
        if rv.paper is not None:
            p = rv.paper
            out.print(
                f"  paper ({p.source}): a = {p.paper_a:g}; ours / paper = {p.slope_ratio:.3g}; "
                f"our CI {'covers' if p.ci_covers_paper else 'does not cover'} the paper's a"
            )
    for line in rep.lines:
        out.print(line)
    b = rep.baseline
    if b.get("n"):
        out.print(f"SFT-only baseline: acceptance_length = {b['mean']:.4f} (n = {b['n']})")
    if getattr(rep, "index", None) is not None:
        out.print(f"index of all sweeps: {rep.index}")


def _print_trials(
    name: str,
    rows: list[tuple[str, str, dict, dict | None]],
    columns: tuple[str, ...] = ("acceptance_length",),
) -> None:
    table = Table(title=f"sweep {name}")
    axes = sorted({k for _, _, o, _ in rows for k in o})
    for col in ["trial_key", *axes, "state", *columns]:
        table.add_column(col)
    for key, state, overrides, metrics in rows:
        values = [(metrics or {}).get(c) for c in columns]
        table.add_row(
            key,
            *[str(overrides.get(a, "")) for a in axes],
            state,
            *["" if v is None else f"{v:.4f}" for v in values],
        )
    out.print(table)


@app.command()
@_one_line_errors
def status(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
) -> None:
    """Print the trial table of SWEEP (state, grid point, acceptance length, error).

    For a search: the searched metric instead of acceptance length, and the study's best trial.
    """
    _env()
    import yaml

    store = _store(run_root.resolve(), db_url, must_exist=True)
    info = _find_sweep(store, sweep)
    stored = yaml.safe_load(info.spec_yaml)
    searched = stored.get("search") if isinstance(stored, dict) else None
    metric = str(searched.get("metric")) if isinstance(searched, dict) else "acceptance_length"
    columns: tuple[str, ...] = (metric,)
    if info.workload == "decode_bench" and not searched:
        columns = ("tokens_per_s", "ar_tokens_per_s", "speedup", "acceptance_length")
    df = store.metrics_frame(info.id).set_index("trial_key")
    rows = []
    for t in store.trials(info.id):
        metrics = (
            {c: df.loc[t.key, c] for c in columns if c in df} if t.state == "completed" else None
        )
        rows.append(
            (
                t.key,
                t.state + (f": {t.error.splitlines()[0][:80]}" if t.error else ""),
                t.overrides,
                metrics,
            )
        )
    _print_trials(sweep, rows, columns)
    counts: dict[str, int] = {}
    for t in store.trials(info.id):
        counts[t.state] = counts.get(t.state, 0) + 1
    out.print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    if info.driver and info.heartbeat_at:
        from datetime import UTC, datetime

        age = (datetime.now(UTC) - info.heartbeat_at).total_seconds()
        out.print(f"driver {info.driver}, last heartbeat {age:.0f} s ago")
    if info.cancel_requested_at:
        out.print(f"cancel requested at {info.cancel_requested_at:%Y-%m-%d %H:%M:%S} UTC")
    if isinstance(searched, dict):
        import optuna

        from orchestrator import search

        optuna.logging.set_verbosity(optuna.logging.WARNING)

        found = search.load_best(search.storage_url(db_url, run_root.resolve()), sweep)
        if found is None:
            out.print(f"study {sweep!r}: not in the results DB yet")
        else:
            best, finished = found
            n = searched.get("n_trials", "?")
            out.print(f"study {sweep!r}: {finished}/{n} trials finished")
            _print_best(metric, best)


@app.command()
@_one_line_errors
def fit(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
) -> None:
    """Refit the law of SWEEP from the DB, store it, update MLflow and the dashboard."""
    _env()
    from orchestrator import report
    from orchestrator.runner import RunPaths

    run_root = run_root.resolve()
    store = _store(run_root, db_url, must_exist=True)
    info = _find_sweep(store, sweep)
    tracker = _tracker(run_root, tracking_uri)
    rep = report.fit_sweep(
        store,
        info.id,
        sweep,
        RunPaths(run_root, run_root / "cache").dashboard(sweep),
        tracker,
        info.mlflow_run_id,
    )
    _print_fit(rep)
    out.print(f"dashboard: {rep.dashboard}")
    _print_browse(tracker)


@app.command()
@_one_line_errors
def retry(
    sweep: Annotated[str, typer.Argument(help="sweep name")],
    *,
    failed: Annotated[bool, typer.Option("--failed", help="re-run the failed trials")] = False,
    cancelled: Annotated[
        bool, typer.Option("--cancelled", help="re-run the cancelled trials")
    ] = False,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
    tracking_uri: TrackingUri = None,
    address: Address = None,
) -> None:
    """Re-run SWEEP's failed (and/or cancelled) trials with the spec stored in the results DB.

    Completed and pending trials are left alone; each re-run keeps its trial row and MLflow
    child run (attempts go up). The sweep's law and dashboard are refreshed afterwards.
    """
    _env()
    _loopback_ray(address)
    from orchestrator import runner
    from orchestrator.spec import parse_spec

    if not (failed or cancelled):
        raise OrchestratorError("say which trials to re-run: --failed and/or --cancelled")
    run_root = run_root.resolve()
    store = _store(run_root, db_url, must_exist=True)
    info = _find_sweep(store, sweep)
    spec = parse_spec(info.spec_yaml, Path(f"{info.spec_path} (as stored in the results DB)"))
    if spec.search:
        raise OrchestratorError(
            f"sweep {sweep!r} is an Optuna search: resume it with `orchestrator submit "
            f"{info.spec_path}`, which re-asks the study for its unfinished trials"
        )
    states = {"failed"} if failed else set()
    states |= {"cancelled"} if cancelled else set()
    chosen = store.trials(info.id, states)
    if not chosen:
        out.print(f"sweep {sweep}: no {' or '.join(sorted(states))} trials; nothing to re-run.")
        return
    if address:
        runner.check_ray_address(address)
    tracker = _tracker(run_root, tracking_uri)
    paths = runner.RunPaths(run_root=run_root, cache_dir=run_root / "cache")
    runner.init_ray(address)
    what = f"re-running {len(chosen)} {' and '.join(sorted(states))} trials"
    _drive(store, tracker, spec, info.id, paths, None, what, info.spec_path, states)


@app.command()
@_one_line_errors
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
    _env()
    import time

    from orchestrator import runner

    run_root = run_root.resolve()
    store = _store(run_root, db_url, must_exist=True)
    info = _find_sweep(store, sweep)
    n_pending, n_running, live = store.request_cancel(info.id, stale_after_s=runner.STALE_AFTER_S)
    out.print(f"sweep {sweep}: {n_pending} pending trials cancelled.")
    if live:
        out.print("the running driver was asked to stop its trials; waiting for it ...")
        deadline = time.monotonic() + wait_s
        while store.trials(info.id, {"running"}) and time.monotonic() < deadline:
            time.sleep(1.0)
        left = len(store.trials(info.id, {"running"}))
        if left:
            raise OrchestratorError(
                f"{left} trials still running after {wait_s:.0f} s; the driver may be busy "
                "(it checks every 5 s) — run `orchestrator status` later"
            )
    else:
        out.print(f"no live driver: {n_running} running trials marked cancelled here.")
        tracker = _tracker(run_root, tracking_uri)
        for t in store.trials(info.id, {"cancelled"}):
            if t.mlflow_run_id:
                tracker.set_state(t.mlflow_run_id, "cancelled", "cancelled by the user")
    counts = store.trials(info.id)
    n_cancelled = sum(t.state == "cancelled" for t in counts)
    out.print(f"{n_cancelled} of {len(counts)} trials are cancelled; completed ones are kept.")


app.command("roofline")(_one_line_errors(roofline))
app.command("export")(_one_line_errors(export))
app.command("report")(_one_line_errors(report))
app.command("compare")(_one_line_errors(compare))


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
