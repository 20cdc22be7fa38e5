"""The ``search:`` block of a sweep spec: an Optuna search over config fields instead of a grid.

:class:`SearchSpec` and its refusals; the study: :mod:`orchestrator.kinds.search.study`; the
keys: docs/sweep-spec.md, "search:". A spec with ``search:`` has no ``grid:`` or ``variants:``
and one seed.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from orchestrator.errors import SpecError
from orchestrator.kinds.lines import SpecLines
from orchestrator.spec.limits import MAX_TRIALS
from workloads.config import NoBoolNumbers

__all__ = ["EXAMPLE", "SearchParam", "SearchSpec", "check_beside", "check_loaded", "check_raw"]

EXAMPLE = "sweeps/search-batch.yaml"
"""the commented example a refusal of the block names"""

_GRID_AND_SEARCH = (
    "a spec has either grid: (every point) or search: (an Optuna study), not both. "
    "Fix: remove one of the two blocks"
)
_SEARCH_SEEDS = (
    "a search runs with one seed (the sampler's and every trial's). Fix: seeds: [0] (one value)"
)


class SearchParam(NoBoolNumbers):
    """One dimension of a search space: exactly one of ``int``, ``float`` or ``choice``.

    YAML: ``{int: [1, 6]}``, ``{int: [2, 64], log: true}``, ``{float: [1e-4, 1e-2], log: true}``,
    ``{choice: [a, b, c]}``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    int_range: list[int] | None = Field(default=None, alias="int", min_length=2, max_length=2)
    """[low, high] of an integer field, both included"""
    float_range: list[float] | None = Field(default=None, alias="float", min_length=2, max_length=2)
    """[low, high] of a float field, both included"""
    choice: list[str | bool | int | float | None] | None = Field(default=None, min_length=1)
    """the values to choose from (scalars)"""
    log: bool = False
    """sample uniformly in log space (int and float only; low must be > 0)"""
    step: float | None = Field(default=None, gt=0)
    """grid step of an int or float range (not with log)"""

    @model_validator(mode="after")
    def _check(self) -> SearchParam:
        example = "e.g. {int: [1, 6]}, {float: [0.0001, 0.01], log: true} or {choice: [a, b]}"
        given = [r for r in (self.int_range, self.float_range, self.choice) if r is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of int, float or choice ({example})")
        if self.choice is not None:
            if self.log or self.step is not None:
                raise ValueError("log and step apply to int and float ranges, not to choice")
            if len({repr(v) for v in self.choice}) != len(self.choice):
                raise ValueError("choice repeats a value; list each value once")
            return self
        low, high = self.bounds
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"bounds [{low}, {high}] must be finite numbers")
        if low > high:
            raise ValueError(f"low {low} > high {high}; write [low, high], e.g. [{high}, {low}]")
        if self.log and low <= 0:
            raise ValueError(
                f"log needs low > 0 (got low {low}); raise low, e.g. [1, {high}], or drop log"
            )
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined; drop one of them")
        if self.int_range is not None and self.step is not None and self.step != int(self.step):
            raise ValueError(f"step of an int range must be a whole number (got {self.step})")
        return self

    @property
    def bounds(self) -> tuple[float, float]:
        """(low, high) of an int or float range."""
        r = self.int_range if self.int_range is not None else self.float_range
        assert r is not None, "choice has no bounds"
        return r[0], r[1]

    def probes(self) -> list[Any]:
        """Values checked against the config model when the spec is loaded: both bounds (and
        a non-integer midpoint of a float range, so an int field is caught), or every choice."""
        if self.choice is not None:
            return list(self.choice)
        low, high = self.bounds
        if self.int_range is not None:
            return [int(low), int(high)]
        return [low, high] + ([(low + high) / 2] if high - low > 1e-9 else [])

    def describe(self) -> str:
        """Short text, e.g. ``int [2, 64] log``."""
        if self.choice is not None:
            return f"choice {self.choice}"
        kind = "int" if self.int_range is not None else "float"
        low, high = self.bounds
        lo, hi = (int(low), int(high)) if kind == "int" else (low, high)
        extra = (" log" if self.log else "") + (f" step {self.step:g}" if self.step else "")
        return f"{kind} [{lo}, {hi}]{extra}"


class SearchSpec(NoBoolNumbers):
    """An Optuna search instead of a grid: ``n_trials`` trials over ``space``, one metric."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str = Field(min_length=1, max_length=250)
    """metric the workload reports, e.g. acceptance_length or tokens_per_s"""
    direction: Literal["maximize", "minimize"] = "maximize"
    """whether a larger or a smaller metric is better"""
    n_trials: int = Field(ge=1, le=MAX_TRIALS)
    """finished trials the study ends with (a resubmit runs only the missing ones)"""
    sampler: Literal["tpe", "random"] = "tpe"
    """Optuna sampler, seeded by the sweep's seed"""
    space: dict[str, SearchParam] = Field(min_length=1)
    """dotted field path of the trial config -> its distribution"""


def check_raw(lines: SpecLines) -> None:
    """Refuse a ``search:`` beside a ``grid:``, or with more than one seed, on the line at fault
    (before the spec is validated as a whole).

    Raises:
        SpecError: ``file:line`` and a fix.
    """
    data = lines.data
    if data.get("grid") and "search" in data:
        raise SpecError(f"{lines.path}:{lines.line(('search',))}: {_GRID_AND_SEARCH}.")
    seeds = data.get("seeds", [0])
    if "search" in data and isinstance(seeds, list) and len(seeds) > 1:
        raise SpecError(f"{lines.path}:{lines.line(('seeds',))}: {_SEARCH_SEEDS}.")


def check_beside(spec: Any) -> None:
    """The blocks a search excludes (``spec``: the sweep spec being validated).

    Raises:
        ValueError: the rule and its fix.
    """
    if spec.grid:
        raise ValueError(_GRID_AND_SEARCH)
    if len(spec.seeds) != 1:
        raise ValueError(_SEARCH_SEEDS)
    if spec.variants:
        raise ValueError("a spec has either variants or a search, not both; split it in two")


def check_loaded(lines: SpecLines, search: SearchSpec) -> None:
    """Each search field exists, and its bounds (or choices) are values the field accepts.

    Only errors of the field itself are refused here; a sampled config that breaks a rule
    across fields fails as a trial at run time (recorded, the study told FAIL).

    Raises:
        SpecError: ``file:line`` of the field and a fix.
    """
    for field, param in search.space.items():
        loc = ("search", "space", field)
        lines.check_field(loc, "search field")
        field_loc = tuple(field.split("."))
        for value in param.probes():
            try:
                lines.config({field: value})
            except ValidationError as err:
                bad = [e for e in err.errors() if tuple(map(str, e["loc"])) == field_loc]
                if not bad:
                    continue
                raise SpecError(
                    f"{lines.path}:{lines.value_line(loc)}: search field {field!r} "
                    f"({param.describe()}) reaches {value!r}, which the field refuses: "
                    f"{bad[0]['msg'].removeprefix('Value error, ')}. Fix: keep the range "
                    "inside the field's limits (the workload's config.py under workloads/) or "
                    "use the right kind (int for whole numbers)."
                ) from None
