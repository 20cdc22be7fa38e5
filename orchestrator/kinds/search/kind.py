"""The Optuna search as a sweep kind (``search:``): :class:`SearchKind`.

Its trials are asked of the study as the driver loop runs (:class:`~orchestrator.kinds.search.
study.SearchProposals`); the study lives in the results DB, so a resubmit resumes it and a
retry is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from pydantic import BaseModel

from orchestrator.driving.destinations import Destinations
from orchestrator.driving.sweep_run import Proposals, SweepRun
from orchestrator.errors import OrchestratorError
from orchestrator.kinds import DryRun, SweepKind, same_base
from orchestrator.kinds.grid import GridKind
from orchestrator.kinds.search.spec import SearchSpec
from orchestrator.kinds.search.study import (
    SearchProposals,
    best_line,
    load_best,
    open_study,
    storage_url,
)
from orchestrator.spec.grid import TrialSpec
from orchestrator.spec.sweep import SweepSpec, merge_overrides

__all__ = ["KIND", "SearchKind", "search_configs"]


def search_configs(sweep: SweepSpec) -> list[BaseModel]:
    """The configs a search's preflight checks: its base, and the base with each ``choice``
    of a searched field that holds a model or path (e.g. ``target.model``)."""
    search = _search(sweep)
    base = sweep.config_model.model_validate(sweep.base)
    configs = [base]
    for name, param in search.space.items():
        for value in param.choice or []:
            try:
                raw = merge_overrides(sweep.base, {name: value})
                configs.append(sweep.config_model.model_validate(raw))
            except ValueError:  # refused at ask time, recorded as a failed trial
                continue
    return configs


def _search(spec: SweepSpec) -> SearchSpec:
    assert spec.search is not None, "a search needs a spec with a search block"
    return spec.search


class SearchKind(GridKind):
    """An Optuna search (``search:``): its trials are asked of the study as it runs."""

    name = "search"
    priced_at_submit = False
    fixed_configs = False
    reruns_failed = False

    def count(self, spec: SweepSpec) -> int:
        return 0

    def expand(self, spec: SweepSpec) -> list[TrialSpec]:
        return []

    def n_trials(self, spec: SweepSpec, trials: list[TrialSpec]) -> int:
        return _search(spec).n_trials

    def planned_configs(self, spec: SweepSpec, trials: list[TrialSpec]) -> list[BaseModel]:
        return []

    def preflight_configs(self, spec: SweepSpec, planned: list[BaseModel]) -> list[BaseModel]:
        return search_configs(spec)

    def describe(self, spec: SweepSpec, trials: list[TrialSpec]) -> str:
        s = _search(spec)
        return (
            f"Optuna search of {s.n_trials} trials ({s.direction} {s.metric}, sampler {s.sampler})"
        )

    def dry_run(
        self,
        path: Path,
        spec: SweepSpec,
        dest: Destinations,
        *,
        hardware: str | None = None,
        devices: int | None = None,
    ) -> DryRun:
        """The space, one row per searched field, and the study's settings."""
        s = _search(spec)
        rows = [[name, param.describe()] for name, param in s.space.items()]
        line = (
            f"search: {s.n_trials} trials, {s.direction} {s.metric}, sampler {s.sampler} "
            f"(seed {spec.seeds[0]})"
        )
        return DryRun(
            table=(f"sweep {spec.name}: search space", ["field", "distribution"], rows),
            lines=[line],
        )

    def open(self, spec: SweepSpec, dest: Destinations) -> optuna.Study:
        """The study lives in the results DB; a resubmit resumes it (:func:`open_study`)."""
        return open_study(spec, storage_url(dest.db_url, dest.run_root))

    def check_retry(self, name: str, spec_path: str) -> None:
        raise OrchestratorError(
            f"sweep {name!r} is an Optuna search: resume it with `orchestrator submit "
            f"{spec_path}`, which re-asks the study for its unfinished trials"
        )

    def proposals(
        self,
        run: SweepRun,
        state: Any,
        *,
        states: set[str] | None,
        configs: dict[str, BaseModel],
    ) -> Proposals:
        return SearchProposals(run.spec, state)

    def same_experiment(self, old: SweepSpec, new: SweepSpec) -> bool:
        """The same workload, seed, base config and space (direction and sampler included);
        ``n_trials`` and ``metric`` may change."""
        return (
            same_base(old, new)
            and old.seeds == new.seeds
            and self.identity(old.search) == self.identity(new.search)
        )

    def identity(self, block: Any) -> Any:
        return block.model_dump(mode="json", exclude={"n_trials", "metric"})

    def status_metric(self, spec: SweepSpec) -> str | None:
        return _search(spec).metric

    def status_lines(self, spec: SweepSpec, db_url: str | None, run_root: Path) -> list[str]:
        """The study's finished trials and its best one."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        found = load_best(storage_url(db_url, run_root), spec.name)
        if found is None:
            return [f"study {spec.name!r}: not in the results DB yet"]
        best, finished = found
        s = _search(spec)
        return [
            f"study {spec.name!r}: {finished}/{s.n_trials} trials finished",
            best_line(s.metric, best),
        ]


KIND: SweepKind = SearchKind()
