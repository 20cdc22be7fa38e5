"""The adaptive design as a sweep kind (``design:``): :class:`DesignKind`.

Its trials are proposed step by step (:class:`~orchestrator.kinds.design.driver.
DesignProposals`); a retry reruns the chosen trials as a grid would. Its refusal at submit is
the budget against the initial design's predicted cost (:func:`design_lines`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.driving.destinations import Destinations
from orchestrator.driving.sweep_run import Proposals, SweepRun
from orchestrator.errors import OrchestratorError
from orchestrator.kinds import DryRun, SweepKind, same_base
from orchestrator.kinds.design import driver
from orchestrator.kinds.design.report import design_data
from orchestrator.kinds.design.trials import design_configs, design_of
from orchestrator.kinds.grid import GridKind, GridProposals
from orchestrator.spec.grid import TrialSpec
from orchestrator.spec.sweep import SweepSpec
from orchestrator.store.access import open_store
from orchestrator.store.results import ResultsStore

__all__ = ["KIND", "DesignKind", "design_lines"]

RESUBMIT_FREE = {"goal", "budget_hours"}
"""what a resubmitted design may change: it continues until the new goal or budget"""


def design_lines(
    path: Path,
    spec: SweepSpec,
    dest: Destinations,
    *,
    hardware: str | None = None,
    devices: int | None = None,
) -> list[str]:
    """A design's refusal of a budget below its initial design's predicted cost, and the lines
    saying what it will cost (:func:`~orchestrator.kinds.design.driver.check_budget`) on this
    machine or ``hardware`` (``devices`` of it); the cost is calibrated from the results DB
    when one exists (nothing is created).

    Raises:
        SpecError: the budget is too small (``file:line``, both numbers, a fix).
    """
    try:
        store: ResultsStore | None = open_store(dest.run_root, dest.db_url, must_exist=True)
    except OrchestratorError:
        store = None  # no results DB yet: modelled costs
    try:
        costs = driver.cost_model(
            store, spec, dest.paths.cache_dir, hardware=hardware, devices=devices or 1
        )
        done = driver.completed_values(store, spec)
        return driver.check_budget(path, spec, costs(), done=done)
    finally:
        if store is not None:
            store.close()


class DesignKind(GridKind):
    """An adaptive design over one law axis (see the module docstring)."""

    name = "design"
    priced_at_submit = False

    def count(self, spec: SweepSpec) -> int:
        return 0

    def expand(self, spec: SweepSpec) -> list[TrialSpec]:
        return []

    def planned_configs(self, spec: SweepSpec, trials: list[TrialSpec]) -> list[BaseModel]:
        """One config per candidate value, at the design's first seed."""
        return design_configs(spec)

    def describe(self, spec: SweepSpec, trials: list[TrialSpec]) -> str:
        return design_of(spec).describe()

    def check_submit(self, path: Path, spec: SweepSpec, dest: Destinations) -> None:
        """The budget against the initial design's cost (:func:`design_lines`)."""
        design_lines(path, spec, dest)

    def dry_run(
        self,
        path: Path,
        spec: SweepSpec,
        dest: Destinations,
        *,
        hardware: str | None = None,
        devices: int | None = None,
    ) -> DryRun:
        """What the design will cost (:func:`design_lines`); no trial list."""
        lines = design_lines(path, spec, dest, hardware=hardware, devices=devices)
        return DryRun(lines=lines, final=True)

    def proposals(
        self,
        run: SweepRun,
        state: Any,
        *,
        states: set[str] | None,
        configs: dict[str, BaseModel],
    ) -> Proposals:
        """A submit's next steps of the design; a retry's chosen trials, as a grid's."""
        if states is None:
            return driver.DesignProposals(run)
        return GridProposals(run, states=states, configs=configs)

    def same_experiment(self, old: SweepSpec, new: SweepSpec) -> bool:
        """The same base, seeds and design (but goal and budget)."""
        return (
            same_base(old, new)
            and old.seeds == new.seeds
            and self.identity(old.design) == self.identity(new.design)
        )

    def identity(self, block: Any) -> Any:
        return block.model_dump(mode="json", exclude=RESUBMIT_FREE)

    def page_section(self, store: ResultsStore, sweep_name: str) -> Any:
        """The Design section: every decision and the half-width against compute."""
        return design_data(store, sweep_name)


KIND: SweepKind = DesignKind()
