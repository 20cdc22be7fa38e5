"""Optuna search: a spec's ``search:`` block -> a study in the results DB -> trials on Ray.

The study is Optuna's ``RDBStorage`` on the results DB's URL (PostgreSQL schema included;
study name = sweep name), so a resubmit resumes it. Each Optuna trial is an ordinary trial:
key = :func:`orchestrator.spec.grid.trial_key` of its config, overrides = the sampled params
plus ``seed`` and ``optuna_trial`` (the Optuna trial that first proposed the config). A
proposal completed in the store is told its stored metric; a refused config, a failed trial
and a non-finite metric are told FAIL; a metric the workload does not report stops the search.
Behaviour on resume and failure: docs/sweep-spec.md, "search:".
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState as OptunaState
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from analysis.numbers import fmt
from orchestrator.driving.events import Listener, Tally, TrialEvent
from orchestrator.driving.sweep_run import Flight, SweepRun
from orchestrator.driving.task import TaskOutcome
from orchestrator.errors import OrchestratorError, StoreError
from orchestrator.kinds.search.spec import SearchSpec
from orchestrator.spec.grid import trial_key
from orchestrator.spec.sweep import SweepSpec, merge_overrides
from orchestrator.store.results import (
    ResultsStore,
    TrialInfo,
    TrialState,
    mask_url,
    normalize_db_url,
)

__all__ = [
    "Best",
    "SearchProposals",
    "SearchSummary",
    "best_line",
    "counted",
    "distributions",
    "load_best",
    "open_study",
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

    def counts_line(self, tally: Tally) -> str | None:
        """The loop's counts and the study's finished trials."""
        t = tally
        return (
            f"{t.completed} completed, {t.failed} failed, {t.cancelled} cancelled, "
            f"{t.reused} reused from the store (not rerun); {self.counted}/{self.n_trials} "
            "trials finished in the study."
        )

    def lines(self, metric: str) -> list[str]:
        """The study's best trial."""
        return [best_line(metric, self.best)]

    @property
    def shows_fit(self) -> bool:
        """A search shows the run index, not a fit."""
        return False


def best_line(metric: str, best: Best | None) -> str:
    """The study's best trial, or that there is none yet."""
    if best is None:
        return "best: none yet (no completed trial)"
    params = " ".join(f"{k}={v}" for k, v in best.params.items())
    return (
        f"best: {metric} = {fmt(best.value, '.4f')} at {params} "
        f"(Optuna trial {best.number}, trial {best.trial_key})"
    )


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


def _stored_value(store: ResultsStore, sweep_id: int, key: str, metric: str) -> float | None:
    df = store.metrics_frame(sweep_id)
    column = metric if metric in df else f"metric.{metric}"
    if column not in df:
        return None
    values = df.loc[df["trial_key"] == key, column]
    return float(values.iloc[0]) if len(values) else None


class SearchProposals:
    """Optuna's ask/tell as the driver loop's proposals (:func:`~orchestrator.driving.sweep_run.
    drive`): ask until ``n_trials`` counted trials exist; record the proposals that need no run
    (refused by the config model, or completed in the store); tell each Optuna trial its
    metric, or FAIL, when its store trial ends.

    ``study`` is opened by :func:`open_study`; :meth:`summary` is the study's side afterwards.
    """

    def __init__(self, spec: SweepSpec, study: optuna.Study) -> None:
        assert spec.search is not None, "SearchProposals needs a spec with a search block"
        self.search: SearchSpec = spec.search
        self.study = study
        self.space = distributions(self.search)
        self.seed = spec.seeds[0]
        self.result = SearchSummary(n_trials=self.search.n_trials, before=counted(study))
        self.todo = max(0, self.search.n_trials - self.result.before)
        self.skipped = 0
        self.told = 0  # counted trials told by this driver
        self.asked: dict[int, optuna.Trial] = {}
        self.waiting: dict[str, list[int]] = {}  # trial key in flight -> Optuna numbers

    def _fail(self, number: int, error: str, *, void: bool = False) -> None:
        self.asked[number].set_user_attr(_ERROR, error[:1000])
        self.study.tell(number, state=OptunaState.FAIL)
        if void:
            _add_void(self.study, [number])
        else:
            self.told += 1

    def _room(self) -> bool:
        in_flight = sum(len(n) for n in self.waiting.values())
        return (
            self.result.error is None
            and self.result.before + self.told + in_flight < self.search.n_trials
        )

    def propose(
        self, run: SweepRun, emit: Listener, tally: Tally, *, free: int = 1
    ) -> tuple[TrialInfo, Any] | None:
        spec = run.spec
        while self._room():
            # 1. ask: a proposal over the whole space (an enqueued retry comes first)
            trial = self.study.ask(self.space)
            self.asked[trial.number] = trial
            params = dict(trial.params)
            overrides = {**params, "seed": self.seed, NUMBER: trial.number}
            raw = merge_overrides(spec.base, {**params, "seed": self.seed})
            # 2. the config model must accept it, else the trial fails (recorded) and is told
            try:
                config = spec.config_model.model_validate(raw)
            except ValidationError as err:
                error = _refusal(err, spec.workload, self.search)
                key = _raw_key(spec.workload, raw)
                trial.set_user_attr(_KEY, key)
                run.store.add_trials(run.sweep_id, [(key, raw, overrides)])
                info = run.trial(key)
                assert info is not None
                run.fail_unrun(info, error)
                self._fail(trial.number, error)
                self.result.failed += 1
                tally.failed += 1
                emit(TrialEvent("failed", info))
                continue
            key = trial_key(spec.workload, config)
            trial.set_user_attr(_KEY, key)
            # 3. the same config in flight: told when it ends
            if key in self.waiting:
                self.waiting[key].append(trial.number)
                continue
            # 4. the same config completed in the store: tell its metric, run nothing
            info = run.trial(key)
            if info is not None and info.state == TrialState.COMPLETED:
                value = _stored_value(run.store, run.sweep_id, key, self.search.metric)
                self.result.reused += 1
                tally.reused += 1
                if value is None or not math.isfinite(value):
                    missing = f"stored trial {key} has no finite {self.search.metric!r}"
                    self._fail(trial.number, missing)
                else:
                    self.study.tell(trial.number, value)
                    self.told += 1
                metrics = None if value is None else {self.search.metric: value}
                emit(TrialEvent("reused", info, metrics))
                continue
            # 5. run it on Ray
            if info is None:
                run.store.add_trials(
                    run.sweep_id, [(key, config.model_dump(mode="json"), overrides)]
                )
                info = run.trial(key)
                assert info is not None
            self.waiting[key] = [trial.number]
            return info, config
        return None

    def finished(self, run: SweepRun, flight: Flight, outcome: TaskOutcome | None) -> None:
        """Tell every Optuna trial waiting on this store trial how it ended."""
        numbers = self.waiting.pop(flight.trial.key, [])
        metric = self.search.metric
        if outcome is None:  # cancelled: void, so a resubmit asks again
            for number in numbers:
                self._fail(number, "cancelled by the user", void=True)
            self.result.cancelled += 1
            return
        if not outcome.ok:
            self.result.failed += 1
            error = (outcome.error or "unknown error").splitlines()[0][:1000]
            for number in numbers:
                self._fail(number, error)
            return
        self.result.completed += 1
        value = outcome.metrics.get(metric)
        if metric not in outcome.metrics:
            reported = ", ".join(sorted(outcome.metrics)[:30])
            self.result.error = (
                f"search.metric {metric!r} is not a metric of {run.spec.workload}: trial "
                f"{flight.trial.key} reported {reported}. Fix: set search.metric to one of them "
                "and resubmit (the search stopped; its completed trials are kept)"
            )
            for number in numbers:
                self._fail(number, self.result.error, void=True)
        elif value is None or not math.isfinite(value):
            for number in numbers:
                self._fail(number, f"{metric} is {value}")
        else:
            for number in numbers:
                self.study.tell(number, value)
                self.told += 1

    def cancel_rest(self) -> int:
        """Nothing is queued: a search asks only when there is room."""
        return 0

    def close(self, run: SweepRun) -> SearchSummary:
        """The study after this driver (:meth:`summary`)."""
        return self.summary()

    def summary(self) -> SearchSummary:
        """The study after this driver: counted trials and the best one."""
        self.result.counted = counted(self.study)
        self.result.best = best_of(self.study)
        return self.result
