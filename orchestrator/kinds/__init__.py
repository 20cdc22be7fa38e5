"""Sweep kinds: how a sweep chooses its trials, behind one protocol (:class:`SweepKind`).

A kind is named by the block of the spec that selects it (``search:``, ``design:``); a spec
with neither is a grid. The core (spec loading, the store, the driver loop, reports, commands)
asks :func:`kind_of` and never imports a kind's module nor compares a kind's name. The table
:data:`KINDS` names each kind's module, imported when a spec of that kind is first met (a kind's
module needs a loaded spec, and Optuna's import is paid by searches only); the spec loader
reads the kinds' blocks through :mod:`orchestrator.kinds.blocks`. Adding a kind:
docs/architecture.md, "Adding a sweep kind".
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from orchestrator.driving.destinations import Destinations
    from orchestrator.spec.grid import TrialSpec
    from orchestrator.spec.sweep import SweepSpec
    from orchestrator.store.results import ResultsStore

__all__ = ["DEFAULT", "KINDS", "DryRun", "SweepKind", "kind_named", "kind_of"]

KINDS: dict[str, str] = {
    "grid": "orchestrator.kinds.grid",
    "search": "orchestrator.kinds.search.kind",
    "design": "orchestrator.kinds.design.kind",
}
"""kind name (the spec block that selects it) -> the module whose ``KIND`` implements it"""
DEFAULT = "grid"
"""the kind of a spec that holds no other kind's block"""


@dataclass(frozen=True)
class DryRun:
    """What ``submit --dry-run`` shows of a kind before the trials' count line."""

    table: tuple[str, list[str], list[list[str]]] | None = None
    """(title, column names, rows) of a table printed first (a search's space)"""
    lines: list[str] = field(default_factory=list)
    """plain text lines printed after it"""
    cost: bool = False
    """whether the trials' predicted cost table follows (a grid)"""
    final: bool = False
    """whether the dry run ends after these lines and the resources line (no trial list)"""


class SweepKind(Protocol):
    """One sweep kind: its trials, refusals, proposals for the driver loop, resubmit identity,
    console lines and page section. Every method takes the loaded spec of that kind."""

    name: str
    """the kind's name, the spec block that selects it (``grid``: none)"""
    priced_at_submit: bool
    """whether its trials are known and priced at submit (a grid); a search and a design
    propose them as they go"""
    fixed_configs: bool
    """whether its trial configs are the spec's base and grid (not sampled from a space)"""
    reruns_failed: bool
    """whether ``retry`` reruns its failed trials (a search's failures count in its study)"""

    def count(self, spec: SweepSpec) -> int:
        """Trials the spec expands to before it runs (0: proposed as it runs)."""

    def expand(self, spec: SweepSpec) -> list[TrialSpec]:
        """The trials registered at submit ([]: proposed as it runs)."""

    def n_trials(self, spec: SweepSpec, trials: list[TrialSpec]) -> int:
        """Trials a submit runs at most (``trials``: :meth:`expand`'s)."""

    def planned_configs(self, spec: SweepSpec, trials: list[TrialSpec]) -> list[BaseModel]:
        """The configs the submit's resource checks see (a design: one per candidate)."""

    def preflight_configs(self, spec: SweepSpec, planned: list[BaseModel]) -> list[BaseModel]:
        """The configs the workload's preflight checks see (a search: its base and choices)."""

    def describe(self, spec: SweepSpec, trials: list[TrialSpec]) -> str:
        """What a submit runs, for the opening line (e.g. ``12 trials``)."""

    def dry_run(
        self,
        path: Path,
        spec: SweepSpec,
        dest: Destinations,
        *,
        hardware: str | None = None,
        devices: int | None = None,
    ) -> DryRun:
        """What ``--dry-run`` shows (on ``hardware``, ``devices`` of it, else this machine).

        Raises:
            SpecError: as :meth:`check_submit`.
        """

    def check_submit(self, path: Path, spec: SweepSpec, dest: Destinations) -> None:
        """The kind's own refusals at submit on this machine (a design's budget against its
        initial design's cost).

        Raises:
            SpecError: ``file:line`` and a fix.
        """

    def open(self, spec: SweepSpec, dest: Destinations) -> Any:
        """The kind's state a submit opens before it registers the sweep (a search: its study
        in the results DB); None when it has none."""

    def check_retry(self, name: str, spec_path: str) -> None:
        """Refuse ``retry`` of a sweep of this kind (:class:`~orchestrator.errors.
        OrchestratorError` with the fix), or pass."""

    def proposals(
        self,
        run: Any,
        state: Any,
        *,
        states: set[str] | None,
        configs: dict[str, BaseModel],
    ) -> Any:
        """The driver loop's source of trials, a :class:`~orchestrator.driving.sweep_run.
        Proposals` over ``run`` (a :class:`~orchestrator.driving.sweep_run.SweepRun`): a
        submit's (``states`` None; ``state``: :meth:`open`'s) or a retry's of the trials in
        ``states``. (Typed loosely: the driver loop's module imports the kinds' table.)"""

    def same_experiment(self, old: SweepSpec, new: SweepSpec) -> bool:
        """Whether a resubmitted spec of this kind runs the same trials as the stored one."""

    def identity(self, block: Any) -> Any:
        """The part of the kind's block a resubmit may not change, comparable with ``==``."""

    def status_metric(self, spec: SweepSpec) -> str | None:
        """The one metric ``status`` and the progress lines show (a search's), else None."""

    def status_lines(self, spec: SweepSpec, db_url: str | None, run_root: Path) -> list[str]:
        """Lines ``status`` prints after the trial table (a search: its study)."""

    def page_section(self, store: ResultsStore, sweep_name: str) -> Any:
        """The kind's section of the sweep's page (a design's decisions), or None."""


def kind_named(name: str) -> SweepKind:
    """The kind ``name`` of :data:`KINDS`.

    Raises:
        KeyError: no such kind.
    """
    kind: SweepKind = importlib.import_module(KINDS[name]).KIND
    return kind


def kind_of(spec: SweepSpec | Mapping[str, Any]) -> SweepKind:
    """The kind of a loaded spec, or of a spec's raw mapping (as stored): the first kind of
    :data:`KINDS` whose block the spec holds, else :data:`DEFAULT`."""
    for name in KINDS:
        if name == DEFAULT:
            continue
        block = spec.get(name) if isinstance(spec, Mapping) else getattr(spec, name, None)
        if block is not None:
            return kind_named(name)
    return kind_named(DEFAULT)


def same_base(old: SweepSpec, new: SweepSpec) -> bool:
    """Whether two specs' base configs are the same config (defaults written out or not)."""
    try:
        return old.config_model.model_validate(old.base) == new.config_model.model_validate(
            new.base
        )
    except ValueError:
        return old.base == new.base
