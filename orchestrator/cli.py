"""``orchestrator``: submit sweeps, show their trials, refit their laws, export drafts.

Every user mistake ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from orchestrator._secrets import redact
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.export_cmd import export
from orchestrator.roofline_cmd import roofline

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # a traceback's locals would show --db-url passwords
    help="Scaling-law sweeps for speculative decoding (draft training on Ray, "
    "tracked in MLflow and SQL, laws fitted, dashboards written).",
)
out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])

RunRoot = Annotated[
    Path,
    typer.Option(
        "--run-root", help="folder for the SQLite DB, MLflow, cache, trial artifacts and dashboards"
    ),
]
DbUrl = Annotated[
    str | None,
    typer.Option(
        "--db-url",
        envvar="SPECSCALE_DB_URL",
        help="results DB URL (default: SQLite under the run "
        "root), e.g. postgresql://user@host:5432/db",
    ),
]
TrackingUri = Annotated[
    str | None,
    typer.Option(
        "--tracking-uri",
        envvar="MLFLOW_TRACKING_URI",
        help="MLflow tracking URI (default: SQLite under the run root), e.g. http://host:5000",
    ),
]


def _one_line_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (OrchestratorError, ValueError) as e:
            message = redact(str(e), kwargs.get("db_url"), kwargs.get("tracking_uri"))
            err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
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


def _store(run_root: Path, db_url: str | None, *, must_exist: bool = False) -> Any:
    from orchestrator.store import ResultsStore

    if db_url:
        return ResultsStore(db_url)
    if must_exist and not (run_root / "results.db").exists():
        raise OrchestratorError(
            f"no results DB at {run_root / 'results.db'}. Fix: pass the --run-root (or --db-url) "
            "the sweep was submitted with"
        )
    return ResultsStore.sqlite_under(run_root)


def _find_sweep(store: Any, name: str) -> Any:
    info = store.get_sweep(name)
    if info is None:
        names = ", ".join(s.name for s in store.list_sweeps()) or "none"
        raise OrchestratorError(f"no sweep named {name!r} in {store.url}; sweeps: {names}")
    return info


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
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            envvar="RAY_ADDRESS",
            help="Ray cluster address (default: a local Ray on 127.0.0.1)",
        ),
    ] = None,
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
) -> None:
    """Expand SPEC into trials, run them on Ray, record them, fit the law, write the dashboard.

    Resubmitting the same spec skips completed trials and reruns the rest. A spec with a
    ``search:`` block runs an Optuna study instead of a grid and resumes it when resubmitted.
    """
    _env()
    _loopback_ray(address)
    from orchestrator.grid import expand
    from orchestrator.spec import load_spec

    sweep = load_spec(spec)
    trials = [] if sweep.search else expand(sweep)
    if dry_run:
        if sweep.search:
            _print_space(sweep)
        else:
            _print_trials(sweep.name, [(t.key, "planned", t.overrides, None) for t in trials])
        if sweep.workload == "decode_bench":
            try:
                _preflight_decode(spec, sweep, [t.config for t in trials], run_root.resolve())
            except SpecError as exc:
                out.print(f"[yellow]warning[/]: a real submit would stop here: {exc}")
        n = sweep.search.n_trials if sweep.search else len(trials)
        out.print(
            f"{n} trials; resources per trial: "
            f"{sweep.resources.model_dump()}. Nothing was run or written."
        )
        return
    from orchestrator import report, runner

    run_root = run_root.resolve()
    if sweep.workload == "decode_bench":  # a missing draft fails here, before anything is written
        _preflight_decode(spec, sweep, [t.config for t in trials], run_root)
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
    info = store.get_sweep(sweep.name)
    parent = tracker.start_sweep_run(
        sweep.name,
        {"spec": str(spec), **sweep.model_dump(mode="json")},
        info.mlflow_run_id if info else None,
    )
    store.set_sweep_mlflow_run(sweep_id, parent)
    what = f"{len(trials)} trials"
    if sweep.search:
        s = sweep.search
        what = (
            f"Optuna search of {s.n_trials} trials ({s.direction} {s.metric}, sampler {s.sampler})"
        )
    out.print(
        f"sweep [bold]{sweep.name}[/]: {what}; results DB {store.url}; "
        f"MLflow {tracker.masked_uri} (parent run {parent[:8]})"
    )
    summary = _run_with_progress(store, tracker, sweep, sweep_id, parent, paths, study)
    if sweep.search:
        _finish_search(store, tracker, sweep, sweep_id, parent, paths, summary)
        return
    rep = report.fit_sweep(
        store, sweep_id, sweep.name, paths.dashboard(sweep.name), tracker, parent
    )
    tracker.set_state(
        parent,
        "completed" if summary.failed == 0 else "failed",
        None if summary.failed == 0 else f"{summary.failed} trials failed",
    )
    out.print(
        f"{summary.completed} completed, {summary.skipped} already completed (skipped), "
        f"{summary.failed} failed."
    )
    _print_fit(rep)
    out.print(f"dashboard: {rep.dashboard}")
    out.print(f"browse: mlflow ui --backend-store-uri {tracker.masked_uri}")


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
    ok = summary.failed == 0 and summary.error is None
    tracker.set_state(
        parent,
        "completed" if ok else "failed",
        summary.error or (None if ok else f"{summary.failed} trials failed"),
    )
    out.print(
        f"{summary.completed} completed, {summary.failed} failed, {summary.reused} reused from "
        f"the store (not rerun); {summary.counted}/{summary.n_trials} trials finished in the study."
    )
    _print_best(sweep.search.metric, summary.best)
    out.print(f"dashboard: {rep.dashboard}")
    out.print(f"browse: mlflow ui --backend-store-uri {tracker.masked_uri}")
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
) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from orchestrator import runner

    if sweep.search:
        from orchestrator import search

        todo = max(0, sweep.search.n_trials - search.counted(study))
    else:
        todo = len([t for t in store.trials(sweep_id) if t.state != "completed"])
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
            else:
                bar.console.print(f"  [red]failed[/]    {trial.key} {point}")

        if sweep.search:
            from orchestrator import search

            return search.run_search(
                store, tracker, sweep, sweep_id, parent, paths, study, on_event
            )
        return runner.run_trials(store, tracker, sweep, sweep_id, parent, paths, on_event)


def _print_fit(rep: Any) -> None:
    f = rep.fit
    if f is None:
        pass
    elif not f.ok:
        out.print(f"fit: {f.status}")
    else:
        out.print(
            f"fit: {f.form}: a = {f.a:.4f} [{f.a_ci[0]:.4f}, {f.a_ci[1]:.4f}], "
            f"b = {f.b:.4f} [{f.b_ci[0]:.4f}, {f.b_ci[1]:.4f}], R² = {f.r2:.3f}, n = {f.n}"
        )
    for line in rep.lines:
        out.print(line)
    b = rep.baseline
    if b.get("n"):
        out.print(f"SFT-only baseline: acceptance_length = {b['mean']:.4f} (n = {b['n']})")


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


app.command("roofline")(_one_line_errors(roofline))
app.command("export")(_one_line_errors(export))


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
