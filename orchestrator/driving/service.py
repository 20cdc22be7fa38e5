"""The sweep services the CLI calls: plan and submit a spec, retry a sweep's trials.

A service opens the sinks, claims the sweep, runs :func:`~orchestrator.driving.sweep_run.drive`
with the proposals of the spec's kind (:mod:`orchestrator.kinds`: the grid's queue, an
Optuna study, an adaptive design), fits and reports, and tells
its listener what happens (:mod:`orchestrator.driving.events`); it never prints. Every refusal
comes before anything is written (:mod:`orchestrator.driving.preflight`, :mod:`.guards`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from analysis.numbers import plural
from orchestrator.driving import guards, preflight, runner
from orchestrator.driving.destinations import Destinations
from orchestrator.driving.events import CostPredicted, Listener, SweepFinished, SweepOpened
from orchestrator.errors import NoResultsTables, OrchestratorError, SpecError, StoreError
from orchestrator.kinds import kind_of
from orchestrator.spec.grid import TrialSpec
from orchestrator.spec.limits import MAX_TRIALS
from orchestrator.spec.sweep import SweepSpec, read_spec, stored_spec
from orchestrator.store.access import find_sweep, open_store
from orchestrator.store.results import ResultsStore, TrialState
from orchestrator.tracking.tracker import Tracker

if TYPE_CHECKING:
    from orchestrator.driving.sweep_run import SweepRun

log = logging.getLogger(__name__)

__all__ = ["Destinations", "Plan", "check_size", "open_sinks", "plan", "retry", "submit"]


@dataclass(frozen=True)
class Plan:
    """A validated spec and its trials (a grid expanded once; a search or a design has none
    yet)."""

    path: Path
    spec: SweepSpec
    trials: list[TrialSpec]
    n_grid: int
    """grid points x seeds x variants (0 for a search or a design)"""
    text: str
    """the YAML as validated (stored with the sweep)"""

    @property
    def too_big(self) -> bool:
        """More trials than :data:`MAX_TRIALS` (a real submit needs ``--yes``)."""
        return self.n_grid > MAX_TRIALS

    @property
    def n_trials(self) -> int:
        """Trials the plan runs (a search: its ``n_trials``)."""
        return kind_of(self.spec).n_trials(self.spec, self.trials)


def plan(path: Path, *, expand_all: bool = True) -> Plan:
    """Load and validate ``path``; expand its grid unless it is too big to list and
    ``expand_all`` is False.

    Raises:
        SpecError: the spec is invalid (file:line and a fix).
    """
    spec, text = read_spec(path)
    kind = kind_of(spec)
    n_grid = kind.count(spec)
    big = n_grid > MAX_TRIALS and not expand_all
    trials = [] if big else kind.expand(spec)
    return Plan(path, spec, trials, n_grid, text)


def open_sinks(dest: Destinations, *, must_exist: bool = False) -> tuple[ResultsStore, Tracker]:
    """The results store and the MLflow tracker, remote ones first (a bad one leaves no local
    files).

    Raises:
        OrchestratorError: no results DB under the run root (``must_exist``), or the DB and
            MLflow would share one database.
        StoreError, TrackingError: either cannot be reached.
    """
    guards.check_sinks_apart(dest.run_root, dest.db_url, dest.tracking_uri)
    if dest.tracking_uri and not dest.db_url:
        tracker = Tracker(dest.tracking)
        store = open_store(dest.run_root, dest.db_url, must_exist=must_exist)
    else:
        store = open_store(dest.run_root, dest.db_url, must_exist=must_exist)
        tracker = Tracker(dest.tracking)
    return store, tracker


def check(the_plan: Plan, dest: Destinations, *, dry_run: bool = False, here: bool = True) -> None:
    """Every refusal of a submit before it writes (a dry run runs the same and writes
    nothing): the workload's preflight checks, the folders, the Ray address and cluster storage
    or what this machine can hold, the results DB and MLflow kept apart, and (``dry_run``, where
    a results DB exists) a changed grid or search space on resubmit. ``here=False``
    (``--hardware``) skips the workload's preflight checks and what this machine can hold.

    Raises:
        SpecError, OrchestratorError: the first refusal, ``file:line`` and a fix where a spec
            line is to blame.
    """
    spec, path = the_plan.spec, the_plan.path
    kind = kind_of(spec)
    planned = kind.planned_configs(spec, the_plan.trials)
    cache_dir = dest.paths.cache_dir
    if here:
        checked = kind.preflight_configs(spec, planned)
        preflight.preflight(
            path, spec, checked, dest.run_root, cache_dir=cache_dir, dry_run=dry_run
        )
    preflight.check_folder("--run-root", dest.run_root)
    if dest.cache_dir is not None:
        preflight.check_folder("--cache-dir", dest.cache_dir)
    if dest.address:  # fail fast, before any DB or MLflow file is written
        runner.check_ray_address(dest.address)
        runner.init_ray(dest.address)
        guards.check_cluster_storage(dest)
    elif here:
        guards.check_fits_locally(spec, path, extra_gpus=runner.extra_gpus(spec, planned))
    guards.check_sinks_apart(dest.run_root, dest.db_url, dest.tracking_uri)
    if here:  # e.g. a design's budget against its initial design's cost
        kind.check_submit(path, spec, dest)
    if dry_run:  # the resubmit check reads an existing results DB, never creates one
        try:
            store = open_store(dest.run_root, dest.db_url, must_exist=True)
        except NoResultsTables:
            return  # a database with no sweep yet: nothing to compare with
        except StoreError:
            raise  # unreachable: the submit would stop here too
        except OrchestratorError:
            return  # no SQLite results DB under the run root yet
        try:
            guards.check_resubmit(store, spec, path)
        finally:
            store.close()


def submit(the_plan: Plan, dest: Destinations, listener: Listener) -> SweepFinished:
    """Run a planned sweep: register its trials, drive them, fit, report.

    Resubmitting the same spec skips completed trials and reruns the rest; a search resumes its
    study. A spec that changes what an existing sweep of that name runs is refused.

    Raises:
        SpecError, OrchestratorError: a refusal, before anything is written.
        StoreError, TrackingError: the DB or MLflow failed.
    """
    spec, path = the_plan.spec, the_plan.path
    check(the_plan, dest)
    store, tracker = open_sinks(dest)
    guards.check_resubmit(store, spec, path)
    kind = kind_of(spec)
    state = kind.open(spec, dest)  # e.g. a search's study: in the results DB, resumed
    runner.init_ray(dest.address)  # a local Ray: started once the input is accepted
    sweep_id, _ = runner.register(store, spec, path, the_plan.text, the_plan.trials)
    _predict_cost(store, spec, sweep_id, dest, the_plan.trials, listener)
    what = kind.describe(spec, the_plan.trials)
    configs = {t.key: t.config for t in the_plan.trials}
    return _drive(store, tracker, spec, sweep_id, dest, listener, what, str(path), state, configs)


def _predict_cost(
    store: ResultsStore,
    spec: SweepSpec,
    sweep_id: int,
    dest: Destinations,
    trials: list[TrialSpec],
    listener: Listener,
) -> None:
    """The predicted cost of the grid's trials this submit runs (those not completed yet), to
    the listener (the banner's totals) and to ``<run root>/<sweep>/cost_prediction.json``
    (the dashboard sets it beside the measured seconds); a workload without a cost model, or a
    prediction that fails, is left out (logged)."""
    if not trials or spec.workload_info.cost is None or not kind_of(spec).priced_at_submit:
        return  # a search or a design proposes its trials as it goes (a design prices its own)
    from orchestrator.cost import model as costing
    from orchestrator.cost.report import write_prediction

    done = {t.key for t in store.trials(sweep_id, {"completed"})}
    todo = [(t.key, t.config) for t in trials if t.key not in done]
    if not todo:
        return
    try:
        cost = costing.predictor(store, spec, cache_dir=dest.paths.cache_dir).sweep(todo)
        write_prediction(dest.paths.dashboard(spec.name).parent, cost)
    except (OrchestratorError, ValueError, OSError) as exc:
        log.warning("no cost prediction for sweep %s: %s", spec.name, exc)
        return
    listener(CostPredicted(cost))


def retry(
    name: str,
    states: set[str],
    dest: Destinations,
    listener: Listener,
    *,
    store: ResultsStore | None = None,
) -> SweepFinished | None:
    """Re-run sweep ``name``'s trials in ``states`` (failed and/or cancelled) with the spec
    stored in the results DB; None when there are none. ``store``: the results DB the caller
    already opened at ``dest`` (else it is opened here), so it is opened once.

    Raises:
        OrchestratorError: no such sweep, or it is a search (resubmit it instead).
    """
    if store is None:
        store = open_store(dest.run_root, dest.db_url, must_exist=True)
    info = find_sweep(store, name)
    spec = stored_spec(info)
    kind_of(spec).check_retry(name, info.spec_path)
    chosen = store.trials(info.id, states)
    if not chosen:
        return None
    if dest.address:
        runner.check_ray_address(dest.address)
    guards.check_sinks_apart(dest.run_root, dest.db_url, dest.tracking_uri)
    tracker = Tracker(dest.tracking)
    runner.init_ray(dest.address)
    guards.check_cluster_storage(dest)  # before the lease and the parent run
    what = "re-running " + plural(len(chosen), f"{' and '.join(sorted(states))} trial")
    return _drive(
        store, tracker, spec, info.id, dest, listener, what, info.spec_path, None, {}, states
    )


def _drive(
    store: ResultsStore,
    tracker: Tracker,
    spec: SweepSpec,
    sweep_id: int,
    dest: Destinations,
    listener: Listener,
    what: str,
    spec_label: str,
    state: Any,
    configs: dict[str, BaseModel],
    states: set[str] | None = None,
) -> SweepFinished:
    """Claim the sweep, open its parent run, drive the trials (the kind's proposals; ``state``:
    what the kind opened), fit and report; release."""
    from orchestrator.driving.sweep_run import drive
    from orchestrator.reports import fit as report

    with runner.sweep_lease(store, sweep_id) as me:  # before any output
        info = store.get_sweep(spec.name)
        old_parent = info.mlflow_run_id if info else None
        run = _parent_run(store, tracker, spec, sweep_id, spec_label, old_parent, dest, me)
        parent, paths = run.parent_run, dest.paths
        restored = run.mirror.sync()  # MLflow lost runs the DB names (`mlflow gc`)
        proposals = kind_of(spec).proposals(run, state, states=states, configs=configs)
        listener(
            SweepOpened(
                spec.name,
                what,
                store.url,
                tracker.masked_uri,
                parent,
                proposals.todo,
                proposals.skipped,
                lost_parent=old_parent if old_parent and old_parent != parent else None,
                restored=restored,
            )
        )
        tally = drive(run, proposals, listener)
        summary = proposals.close(run)
    rep = report.fit_sweep(store, sweep_id, spec.name, paths.dashboard(spec.name), tracker, parent)
    error = summary.error if summary is not None else None
    ok = tally.bad == 0 and error is None
    tracker.set_state(
        parent,
        "completed" if ok else ("cancelled" if tally.cancelled else "failed"),
        error or (None if ok else f"{tally.failed} trials failed, {tally.cancelled} cancelled"),
    )
    return SweepFinished(spec.name, tally, rep, tracker.masked_uri, tracker.experiment_id, summary)


def mirror(name: str, dest: Destinations, *, store: ResultsStore) -> tuple[str, int, Any, Tracker]:
    """Rebuild sweep ``name``'s MLflow runs from the results DB: the parent run (made and
    recorded when missing), a child run for each completed trial MLflow lost
    (:meth:`~orchestrator.tracking.mirror.Mirror.sync`), the law refitted and logged, the
    parent's state from the trials'. Idempotent; runs no trial.

    Returns:
        The parent run id, the child runs recreated, the fit's report, the tracker.

    Raises:
        OrchestratorError: no such sweep; the results DB used as the MLflow store.
        StoreError: a live driver holds the sweep (it mirrors as it goes).
        TrackingError: MLflow failed.
    """
    from orchestrator.reports import fit as report

    info = find_sweep(store, name)
    spec = stored_spec(info)
    guards.check_sinks_apart(dest.run_root, dest.db_url, dest.tracking_uri)
    with runner.sweep_lease(store, info.id) as me:  # refused: no tracking store made
        tracker = Tracker(dest.tracking)
        run = _parent_run(
            store, tracker, spec, info.id, info.spec_path, info.mlflow_run_id, dest, me
        )
        parent = run.parent_run
        restored = run.mirror.sync()
        rep = report.fit_sweep(
            store, info.id, spec.name, dest.paths.dashboard(spec.name), tracker, parent
        )
        states = {t.state for t in store.trials(info.id)}
        done = states <= {TrialState.COMPLETED.value}
        tracker.set_state(parent, "completed" if done else "failed",
                          None if done else f"trials {sorted(states)}")  # fmt: skip
    return parent, restored, rep, tracker


def _parent_run(
    store: ResultsStore,
    tracker: Tracker,
    spec: SweepSpec,
    sweep_id: int,
    spec_label: str,
    existing: str | None,
    dest: Destinations,
    me: str,
) -> SweepRun:
    """The sweep's parent MLflow run started (``existing``, else the one tagged with this
    results DB, reused when MLflow has it), its id recorded in the DB; the
    :class:`~orchestrator.driving.sweep_run.SweepRun` over it."""
    from orchestrator.driving.sweep_run import SweepRun

    params = {"spec": spec_label, **spec.model_dump(mode="json")}
    parent = tracker.start_sweep_run(spec.name, params, existing, record=store.url)
    store.set_sweep_mlflow_run(sweep_id, parent)
    return SweepRun(store, tracker, spec, sweep_id, parent, dest.paths, me)


def check_size(the_plan: Plan, *, yes: bool) -> None:
    """Refuse a grid of more than :data:`MAX_TRIALS` trials without ``--yes``.

    Raises:
        SpecError: with the count and the fix.
    """
    if the_plan.too_big and not yes:
        raise SpecError(
            f"{the_plan.path}: the grid expands to {the_plan.n_grid:,} trials, more than "
            f"{MAX_TRIALS:,}. Fix: pass --yes to run them all, or shrink the grid (count it "
            "with --dry-run)"
        )
