"""The grid kind's answers, which the other kinds inherit."""

from __future__ import annotations

from pathlib import Path

from orchestrator.kinds import kind_of
from orchestrator.kinds.grid import GridKind
from orchestrator.spec.grid import TrialSpec
from orchestrator.spec.sweep import SweepSpec, load_spec


def _spec(tmp_path: Path, name: str, values: list[int]) -> SweepSpec:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: s\nworkload: sleep\ngrid: {{value: {values}}}\nbase: {{seconds: 0}}\n")
    return load_spec(path)


class FirstOnly(GridKind):
    """A kind that runs only the grid's first point."""

    def expand(self, spec: SweepSpec) -> list[TrialSpec]:
        return super().expand(spec)[:1]


def test_a_resubmit_is_compared_by_the_kinds_own_trials(tmp_path: Path) -> None:
    old, new = _spec(tmp_path, "old", [1, 2]), _spec(tmp_path, "new", [1, 3])
    assert isinstance(kind_of(old), GridKind)
    assert not kind_of(old).same_experiment(old, new)  # the grid runs value 2, then 3
    assert FirstOnly().same_experiment(old, new)  # both run value 1 alone
    assert not FirstOnly().same_experiment(old, _spec(tmp_path, "other", [3, 1]))
