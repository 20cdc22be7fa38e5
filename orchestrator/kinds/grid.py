"""The grid: every point of the spec's ``grid:`` x ``seeds:`` x ``variants:``, expanded once at
submit (:func:`orchestrator.spec.grid.expand`), run in order; the default sweep kind.

:class:`GridKind` is the base the other kinds build on: its answers are a grid's, and a kind
overrides what it does otherwise. :class:`GridProposals` also reruns a retry's trials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.driving.destinations import Destinations
from orchestrator.driving.events import Listener, Summary, Tally
from orchestrator.driving.sweep_run import Flight, Proposals, SweepRun
from orchestrator.driving.task import TaskOutcome
from orchestrator.kinds import DryRun, SweepKind
from orchestrator.spec.grid import TrialSpec, count_trials, expand
from orchestrator.spec.sweep import SweepSpec
from orchestrator.store.results import ResultsStore, TrialInfo, TrialState

__all__ = ["KIND", "GridKind", "GridProposals"]


class GridProposals:
    """The grid's trials that are not completed (or only those in ``states``), in order.

    ``configs`` holds the typed configs of a fresh expansion by key, so a submit validates each
    config once; a trial row from an earlier submit is validated from the store.
    """

    def __init__(
        self,
        run: SweepRun,
        *,
        states: set[str] | None = None,
        configs: dict[str, BaseModel] | None = None,
    ) -> None:
        trials = run.store.trials(run.sweep_id)
        self.queue = [
            t
            for t in trials
            if t.state != TrialState.COMPLETED and (states is None or t.state in states)
        ]
        self.skipped = len(trials) - len(self.queue)
        self.todo = len(self.queue)
        self.configs = configs or {}

    def propose(
        self, run: SweepRun, emit: Listener, tally: Tally, *, free: int = 1
    ) -> tuple[TrialInfo, Any] | None:
        if not self.queue:
            return None
        trial = self.queue.pop(0)
        config = self.configs.get(trial.key) or run.spec.config_model.model_validate(trial.config)
        return trial, config

    def finished(self, run: SweepRun, flight: Flight, outcome: TaskOutcome | None) -> None:
        """Nothing to tell: the grid is fixed."""

    def cancel_rest(self) -> int:
        left = len(self.queue)
        self.queue.clear()
        return left

    def close(self, run: SweepRun) -> Summary | None:
        """Nothing to say: the tally is the grid's summary."""
        return None


class GridKind:
    """A grid (see the module docstring); the answers of :class:`orchestrator.kinds.SweepKind`
    that the other kinds share."""

    name = "grid"
    priced_at_submit = True
    fixed_configs = True
    reruns_failed = True

    def count(self, spec: SweepSpec) -> int:
        return count_trials(spec)

    def expand(self, spec: SweepSpec) -> list[TrialSpec]:
        return expand(spec)

    def n_trials(self, spec: SweepSpec, trials: list[TrialSpec]) -> int:
        return len(trials)

    def planned_configs(self, spec: SweepSpec, trials: list[TrialSpec]) -> list[BaseModel]:
        return [t.config for t in trials]

    def preflight_configs(self, spec: SweepSpec, planned: list[BaseModel]) -> list[BaseModel]:
        return planned

    def describe(self, spec: SweepSpec, trials: list[TrialSpec]) -> str:
        return f"{len(trials)} trials"

    def check_submit(self, path: Path, spec: SweepSpec, dest: Destinations) -> None:
        """A grid has no refusal of its own at submit."""

    def dry_run(
        self,
        path: Path,
        spec: SweepSpec,
        dest: Destinations,
        *,
        hardware: str | None = None,
        devices: int | None = None,
    ) -> DryRun:
        return DryRun(cost=True)

    def open(self, spec: SweepSpec, dest: Destinations) -> Any:
        return None

    def check_retry(self, name: str, spec_path: str) -> None:
        """Every grid trial can be rerun."""

    def proposals(
        self,
        run: SweepRun,
        state: Any,
        *,
        states: set[str] | None,
        configs: dict[str, BaseModel],
    ) -> Proposals:
        return GridProposals(run, states=states, configs=configs)

    def same_experiment(self, old: SweepSpec, new: SweepSpec) -> bool:
        """The same trial keys (this kind's :meth:`expand`, so a subclass that expands otherwise
        is compared by its own trials)."""
        return {t.key for t in self.expand(old)} == {t.key for t in self.expand(new)}

    def identity(self, block: Any) -> Any:
        return block

    def status_metric(self, spec: SweepSpec) -> str | None:
        return None

    def status_lines(self, spec: SweepSpec, db_url: str | None, run_root: Path) -> list[str]:
        return []

    def page_section(self, store: ResultsStore, sweep_name: str) -> Any:
        return None


KIND: SweepKind = GridKind()
