"""Optuna search: a spec's ``search:`` block -> a study in the results DB -> trials on Ray.

The study lives in the same SQL database as the results (Optuna's ``RDBStorage`` on the store's
URL, a PostgreSQL ``?options=-csearch_path%3D...`` schema included; study name = sweep name),
so a resubmitted search resumes it: finished trials stay finished, a trial that was running when
the driver died is told FAIL, marked void (it does not count) and its params are enqueued again,
and new trials are asked until ``n_trials`` counted trials exist. One driver per sweep at a time,
as for a grid (the store resets stale ``running`` trials the same way).

Each Optuna trial is an ordinary trial of the store and MLflow: trial key = hash of the full
config (:func:`orchestrator.grid.trial_key`), overrides = the sampled params plus ``seed`` and
``optuna_trial`` (the number of the Optuna trial that first proposed the config). A proposal
whose key is completed in the store is told the stored metric without running; one whose key is
in flight is told when that trial ends. A proposal the config model refuses, a failed trial and
a non-finite metric are told FAIL, so the search goes on; a metric the workload does not report
stops the search (no new trials) with an error naming the metrics it does report.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import ray
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState as OptunaState
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from orchestrator import runner
from orchestrator.errors import OrchestratorError, StoreError
from orchestrator.grid import trial_key
from orchestrator.spec import SearchSpec, SweepSpec, merge_overrides
from orchestrator.store import (
    ResultsStore,
    TrialInfo,
    TrialState,
    mask_url,
    normalize_db_url,
)
from orchestrator.tracking import Tracker

__all__ = [
    "Best",
    "SearchSummary",
    "counted",
    "distributions",
    "load_best",
    "open_study",
    "run_search",
    "storage_url",
]

log = logging.getLogger(__name__)

NUMBER = "optuna_trial"
"""override (and metrics-table column) holding the Optuna trial number"""
_VOID = "specscale.void"
"""study user attr: numbers of finished trials that do not count (stale, metric missing)"""
_METRIC = "specscale.metric"
"""study user attr: the metric the study optimises"""
_KEY = "specscale.trial_key"
"""trial user attr: the store's trial key"""
_ERROR = "specscale.error"
"""trial user attr: why the trial was told FAIL"""


@dataclass(frozen=True)
class Best:
    """The best trial of a study: its Optuna number, metric value, sampled params, trial key."""

    number: int
    value: float
    params: dict[str, Any]
    trial_key: str | None


@dataclass
class SearchSummary:
    """One submit of a search: trials run (completed, failed), reused, counted before and after.

    ``counted`` is the study's finished trials that count towards ``n_trials``; ``error`` is set
    when the search stopped early (the metric is not reported).
    """

    n_trials: int
    before: int
    completed: int = 0
    failed: int = 0
    reused: int = 0
    counted: int = 0
    best: Best | None = None
    error: str | None = None
    cancelled: int = 0


@dataclass
class _Flight:
    trial: TrialInfo
    run_id: str
    t0: float
    numbers: list[int] = field(default_factory=list)


def storage_url(db_url: str | None, run_root: Path) -> str:
    """The SQLAlchemy URL of the results DB (password included) for Optuna's storage.

    Raises:
        StoreError: ``db_url`` is not a SQLite or PostgreSQL URL.
    """
    if db_url:
        return normalize_db_url(db_url).render_as_string(hide_password=False)
    return f"sqlite:///{Path(run_root).expanduser().resolve() / 'results.db'}"


def _storage(url: str) -> optuna.storages.RDBStorage:
    sqlite = url.startswith("sqlite")
    connect_args: dict[str, Any] = {"timeout": 30.0} if sqlite else {}
    if not sqlite and "connect_timeout=" not in url:
        connect_args["connect_timeout"] = 10
    try:
        return optuna.storages.RDBStorage(
            url, engine_kwargs={"connect_args": connect_args, "pool_pre_ping": True}
        )
    except (SQLAlchemyError, ImportError) as exc:
        first = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"])[0]
        raise StoreError(
            f"cannot open the Optuna study storage in {mask_url(url)}: {first}. Check that the "
            "results database is reachable (the same URL as --db-url)"
        ) from exc


def distributions(search: SearchSpec) -> dict[str, BaseDistribution]:
    """The space as Optuna distributions, field by field."""
    out: dict[str, BaseDistribution] = {}
    for name, p in search.space.items():
        if p.choice is not None:
            out[name] = CategoricalDistribution(p.choice)
        elif p.int_range is not None:
            low, high = p.int_range
            out[name] = IntDistribution(low, high, log=p.log, step=int(p.step or 1))
        else:
            low_f, high_f = p.bounds
            out[name] = FloatDistribution(low_f, high_f, log=p.log, step=p.step)
    return out


def _sampler(search: SearchSpec, seed: int) -> optuna.samplers.BaseSampler:
    if search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def _void(study: optuna.Study) -> set[int]:
    return set(study.user_attrs.get(_VOID, []))


def _add_void(study: optuna.Study, numbers: list[int]) -> None:
    study.set_user_attr(_VOID, sorted(_void(study) | set(numbers)))


def counted(study: optuna.Study) -> int:
    """Finished trials of the study that count towards ``n_trials`` (void ones do not)."""
    void = _void(study)
    finished = (OptunaState.COMPLETE, OptunaState.FAIL, OptunaState.PRUNED)
    return sum(1 for t in study.get_trials(deepcopy=False, states=finished) if t.number not in void)


def open_study(spec: SweepSpec, url: str) -> optuna.Study:
    """Create the sweep's study, or resume it: stale running trials are told FAIL, marked void
    and their params enqueued again.

    The sampler is seeded with the sweep's seed plus the number of trials already in the study,
    so a resumed search does not replay the proposals of the first submit.

    Raises:
        OrchestratorError: the stored study optimises another direction or metric.
        StoreError: the database cannot be reached.
    """
    search = spec.search
    assert search is not None, "open_study needs a spec with a search block"
    storage = _storage(url)
    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        direction=search.direction,
        load_if_exists=True,
        sampler=optuna.samplers.RandomSampler(),
    )
    stored_direction = study.direction.name.lower()
    if stored_direction != search.direction:
        raise OrchestratorError(
            f"the study {spec.name!r} in {mask_url(url)} was created to {stored_direction}; "
            f"search.direction is {search.direction}. Fix: set direction: {stored_direction}, "
            "or give the sweep a new name for a new study"
        )
    metric = study.user_attrs.get(_METRIC)
    completed = study.get_trials(deepcopy=False, states=(OptunaState.COMPLETE,))
    if metric not in (None, search.metric) and completed:
        raise OrchestratorError(
            f"the study {spec.name!r} in {mask_url(url)} optimises {metric!r}; search.metric is "
            f"{search.metric!r}. Fix: set metric: {metric}, or give the sweep a new name"
        )
    if metric != search.metric:
        study.set_user_attr(_METRIC, search.metric)
    stale = study.get_trials(deepcopy=False, states=(OptunaState.RUNNING,))
    for t in stale:
        log.warning("Optuna trial %d was running when its driver stopped: retrying it", t.number)
        study.tell(t.number, state=OptunaState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"specscale.retry_of": t.number})
    if stale:
        _add_void(study, [t.number for t in stale])
    study.sampler = _sampler(search, spec.seeds[0] + len(study.get_trials(deepcopy=False)))
    return study


def best_of(study: optuna.Study) -> Best | None:
    """The study's best completed trial, or None."""
    if not study.get_trials(deepcopy=False, states=(OptunaState.COMPLETE,)):
        return None
    t = study.best_trial
    assert t.value is not None
    return Best(
        number=t.number,
        value=float(t.value),
        params=dict(t.params),
        trial_key=t.user_attrs.get(_KEY),
    )


def load_best(url: str, study_name: str) -> tuple[Best | None, int] | None:
    """(best trial, counted trials) of a stored study, or None when there is no such study.

    Raises:
        StoreError: the database cannot be reached.
    """
    storage = _storage(url)
    try:
        study = optuna.load_study(
            study_name=study_name, storage=storage, sampler=optuna.samplers.RandomSampler()
        )
        return best_of(study), counted(study)
    except KeyError:
        return None
    finally:
        storage.engine.dispose()


def _raw_key(workload: str, config: Mapping[str, Any]) -> str:
    """Key of a config the model refuses (the same hash as trial_key, over the raw dict)."""
    canonical = json.dumps(
        {"workload": workload, "config": config}, sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _refusal(err: ValidationError, workload: str, search: SearchSpec) -> str:
    e = err.errors()[0]
    where = ".".join(str(p) for p in e["loc"]) or "<config>"
    fix = (
        f"narrow search.space.{where}"
        if where in search.space
        else "narrow the search space (or change base) so every sampled config is valid"
    )
    got = "" if isinstance(e.get("input"), dict | list) else f" (got {e.get('input')!r})"
    return f"sampled config refused by {workload}: {where}: {e['msg']}{got}. Fix: {fix}"


def _trial_row(store: ResultsStore, sweep_id: int, key: str) -> TrialInfo | None:
    return next((t for t in store.trials(sweep_id) if t.key == key), None)


def _stored_value(store: ResultsStore, sweep_id: int, key: str, metric: str) -> float | None:
    df = store.metrics_frame(sweep_id)
    column = metric if metric in df else f"metric.{metric}"
    if column not in df:
        return None
    values = df.loc[df["trial_key"] == key, column]
    return float(values.iloc[0]) if len(values) else None


def run_search(
    store: ResultsStore,
    tracker: Tracker,
    spec: SweepSpec,
    sweep_id: int,
    parent_run: str,
    paths: runner.RunPaths,
    study: optuna.Study,
    on_event: runner.Events | None = None,
) -> SearchSummary:
    """Ask, run and tell until ``n_trials`` counted trials exist; record every trial.

    At most as many trials run at once as the Ray cluster has room for (as :func:`run_trials`).
    Ray must be initialised and ``study`` opened by :func:`open_study`.

    The driver holds the sweep's lease as :func:`orchestrator.runner.run_trials` does; a cancel
    request stops the running trials (their Optuna trials are void, so a resubmit asks again).

    Raises:
        StoreError, TrackingError: the DB or MLflow failed, or another driver runs the sweep.
    """
    with runner.sweep_lease(store, sweep_id) as me:
        return _run_claimed(store, tracker, spec, sweep_id, parent_run, paths, study, on_event, me)


def _run_claimed(
    store: ResultsStore,
    tracker: Tracker,
    spec: SweepSpec,
    sweep_id: int,
    parent_run: str,
    paths: runner.RunPaths,
    study: optuna.Study,
    on_event: runner.Events | None,
    me: str,
) -> SearchSummary:
    search = spec.search
    assert search is not None, "run_search needs a spec with a search block"
    emit = on_event or (lambda *_: None)
    beat = time.monotonic()
    store.reset_stale_running(sweep_id)
    space = distributions(search)
    seed = spec.seeds[0]
    remote = runner.trial_task(spec)
    limit = runner.in_flight_limit(spec)
    summary = SearchSummary(n_trials=search.n_trials, before=counted(study))
    told = 0  # counted trials told in this call
    running: dict[ray.ObjectRef, _Flight] = {}
    by_key: dict[str, ray.ObjectRef] = {}
    asked: dict[int, optuna.Trial] = {}

    def fail(number: int, error: str, *, void: bool = False) -> None:
        nonlocal told
        asked[number].set_user_attr(_ERROR, error[:1000])
        study.tell(number, state=OptunaState.FAIL)
        if void:
            _add_void(study, [number])
        else:
            told += 1

    def in_flight() -> int:
        return sum(len(f.numbers) for f in running.values())

    while True:
        while (
            summary.error is None
            and len(running) < limit
            and summary.before + told + in_flight() < search.n_trials
        ):
            # 1. ask: a proposal over the whole space (an enqueued retry comes first)
            trial = study.ask(space)
            asked[trial.number] = trial
            params = dict(trial.params)
            overrides = {**params, "seed": seed, NUMBER: trial.number}
            raw = merge_overrides(spec.base, {**params, "seed": seed})
            # 2. the config model must accept it, else the trial fails (recorded) and is told
            try:
                config = spec.config_model.model_validate(raw)
            except ValidationError as err:
                error = _refusal(err, spec.workload, search)
                key = _raw_key(spec.workload, raw)
                trial.set_user_attr(_KEY, key)
                store.add_trials(sweep_id, [(key, raw, overrides)])
                info = _trial_row(store, sweep_id, key)
                assert info is not None
                run_id = tracker.start_trial_run(
                    parent_run, spec.name, key, raw, info.mlflow_run_id, overrides=overrides
                )
                store.mark_running(info.id, run_id)
                store.mark_failed(info.id, error, 0.0)
                tracker.set_state(run_id, TrialState.FAILED, error)
                fail(trial.number, error)
                summary.failed += 1
                emit("failed", info, None)
                continue
            key = trial_key(spec.workload, config)
            trial.set_user_attr(_KEY, key)
            # 3. the same config in flight: told when it ends
            if key in by_key:
                running[by_key[key]].numbers.append(trial.number)
                continue
            # 4. the same config completed in the store: tell its metric, run nothing
            info = _trial_row(store, sweep_id, key)
            if info is not None and info.state == TrialState.COMPLETED:
                value = _stored_value(store, sweep_id, key, search.metric)
                summary.reused += 1
                if value is None or not math.isfinite(value):
                    fail(trial.number, f"stored trial {key} has no finite {search.metric!r}")
                else:
                    study.tell(trial.number, value)
                    told += 1
                emit("reused", info, None if value is None else {search.metric: value})
                continue
            # 5. run it on Ray
            if info is None:
                store.add_trials(sweep_id, [(key, config.model_dump(mode="json"), overrides)])
                info = _trial_row(store, sweep_id, key)
                assert info is not None
            ref, run_id = runner.start_trial(store, tracker, remote, spec, info, parent_run, paths)
            running[ref] = _Flight(info, run_id, time.perf_counter(), [trial.number])
            by_key[key] = ref
            emit("started", info, None)
        if not running:
            break
        # 6. one trial ended: record it, tell every Optuna trial waiting on it
        done, _ = ray.wait(list(running), num_returns=1, timeout=runner.HEARTBEAT_S)
        if not done or time.monotonic() - beat >= runner.HEARTBEAT_S:
            beat = time.monotonic()
            if store.heartbeat(sweep_id, me):  # cancel requested
                for ref, flight in running.items():
                    ray.cancel(ref, force=True)
                    store.mark_cancelled(flight.trial.id)
                    tracker.set_state(flight.run_id, TrialState.CANCELLED, "cancelled by the user")
                    for number in flight.numbers:
                        fail(number, "cancelled by the user", void=True)
                    summary.cancelled += 1
                    emit("cancelled", flight.trial, None)
                running.clear()
                break
        if not done:
            continue
        flight = running.pop(done[0])
        del by_key[flight.trial.key]
        outcome = runner.finish_trial(
            store,
            tracker,
            flight.trial,
            flight.run_id,
            done[0],
            time.perf_counter() - flight.t0,
        )
        if not outcome.ok:
            summary.failed += 1
            error = (outcome.error or "unknown error").splitlines()[0][:1000]
            for number in flight.numbers:
                fail(number, error)
            emit("failed", flight.trial, None)
            continue
        summary.completed += 1
        value = outcome.metrics.get(search.metric)
        if search.metric not in outcome.metrics:
            reported = ", ".join(sorted(outcome.metrics)[:30])
            summary.error = (
                f"search.metric {search.metric!r} is not a metric of {spec.workload}: trial "
                f"{flight.trial.key} reported {reported}. Fix: set search.metric to one of them "
                "and resubmit (the search stopped; its completed trials are kept)"
            )
            for number in flight.numbers:
                fail(number, summary.error, void=True)
        elif value is None or not math.isfinite(value):
            for number in flight.numbers:
                fail(number, f"{search.metric} is {value}")
        else:
            for number in flight.numbers:
                study.tell(number, value)
                told += 1
        emit("completed", flight.trial, outcome.metrics)
    summary.counted = counted(study)
    summary.best = best_of(study)
    return summary
