"""The ``design:`` block of a sweep spec: an adaptive design over one law axis, instead of a grid.

The rule: :mod:`analysis.design`; the driver: :mod:`orchestrator.kinds.design.driver`; the block
with an example: docs/design.md. A spec with ``design:`` has no ``grid:``, ``search:`` or
``variants:``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import SpecError
from orchestrator.kinds.lines import SpecLines
from workloads.config import NoBoolNumbers
from workloads.protocol import Workload
from workloads.registry import WORKLOADS

__all__ = [
    "EXAMPLE",
    "DesignSpec",
    "check_beside",
    "check_blocks",
    "check_layout",
    "check_loaded",
    "check_raw",
    "default_metric",
    "design_seeds",
    "is_law_metric",
]

MAX_SEEDS = 100
"""repeats per value at most"""


_POSITIVE = {
    "goal": "a positive half-width (the slope's 95% CI, metric units per decade). Fix: e.g. "
    "goal: 0.05",
    "budget_hours": "a positive number of trial hours. Fix: e.g. budget_hours: 0.5",
}
"""what ``goal`` and ``budget_hours`` must be, with the fix, for their one refusal"""


class DesignSpec(NoBoolNumbers):
    """An adaptive design over one law axis: an initial design, then each next trial (value,
    seed) where it narrows the slope's CI most per predicted cost, until ``goal``, the budget
    or the candidates run out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    axis: str = Field(min_length=1, max_length=250)
    """the law axis the design varies: a dotted config field of the workload's ``law_axes``
    (``draft_train``: pretrain.tokens or draft.layers)"""
    values: list[int | float] = Field(min_length=1, max_length=10_000)
    """candidate values of the axis (> 0: the law is in log10 of them), at least 3 distinct"""
    goal: float
    """the slope's 95% CI half-width to reach, in metric units per decade of the axis"""
    budget_hours: float
    """compute budget, hours of trial wall time (GPU trials: GPU-hours), spent plus committed"""
    max_seeds: int | None = Field(default=None, ge=1, le=MAX_SEEDS)
    """repeats per value at most, seeds 0..max_seeds-1 (None: the spec's ``seeds:``)"""
    initial: int = Field(default=3, ge=3)
    """distinct values of the initial design, spread in log space (at least 3)"""
    min_distinct: int = Field(default=4, ge=3)
    """distinct values the design keeps, so the log-linear form itself can be checked (lack of
    fit, the saturating alternative)"""
    metric: str = Field(default="acceptance_length", min_length=1, max_length=250)
    """the metric of the law: one of the workload's ``law_metrics`` (default: its first, e.g.
    acceptance_length for draft_train, sleep.law_y for sleep)"""

    @field_validator("values")
    @classmethod
    def _positive(cls, v: list[int | float]) -> list[int | float]:
        for x in v:
            if not (math.isfinite(x) and x > 0):
                raise ValueError(
                    f"candidate value {x!r} is not a positive number: the law is in log10 of the "
                    "axis. Fix: list values > 0 (an x = 0 baseline is a grid trial of its own)"
                )
        distinct = sorted(set(v))
        if len(distinct) < 3:
            raise ValueError(
                f"{len(distinct)} distinct candidate value(s) {distinct}: a slope and its check "
                "need at least 3. Fix: list at least 3 distinct values, e.g. [8192, 32768, 131072]"
            )
        return v

    @field_validator("goal", "budget_hours")
    @classmethod
    def _positive_number(cls, v: float, info: Any) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{info.field_name} {v!r} must be {_POSITIVE[info.field_name]}")
        return v

    @field_validator("initial", "min_distinct")
    @classmethod
    def _at_most_values(cls, v: int, info: Any) -> int:
        values = info.data.get("values")
        if values is None:  # refused on its own line
            return v
        n = len(set(values))
        if v > n:
            fix = f"initial: {min(3, n)}" if info.field_name == "initial" else f"min_distinct: {n}"
            raise ValueError(
                f"{info.field_name} {v} is more than the {n} distinct candidate values. "
                f"Fix: {fix}, or list more values"
            )
        return v

    @property
    def kept_distinct(self) -> int:
        """Distinct values the design keeps: ``min_distinct``, at most the candidates'."""
        return min(self.min_distinct, len(set(self.values)))

    @property
    def budget_s(self) -> float:
        """The budget in trial seconds (GPU trials: GPU-seconds)."""
        return self.budget_hours * 3600.0

    def describe(self) -> str:
        """Short text, e.g. ``design over pretrain.tokens: 9 values, goal 0.05, budget 0.45 h``."""
        return (
            f"adaptive design over {self.axis}: {len(set(self.values))} values, goal half-width "
            f"{self.goal:g} ({self.metric} per decade), budget {self.budget_hours:g} h"
        )


def design_seeds(design: DesignSpec, seeds: Sequence[int]) -> list[int]:
    """The seeds a design may repeat a value with: ``0..max_seeds-1``, else the spec's."""
    return list(range(design.max_seeds)) if design.max_seeds is not None else list(seeds)


def is_law_metric(metric: str, law_metrics: Sequence[str]) -> bool:
    """Whether ``metric`` is one of ``law_metrics`` or one's per-set ``m/<set>``."""
    return any(metric == m or metric.startswith(f"{m}/") for m in law_metrics)


def default_metric(design: Any, workload: Workload | None) -> Any:
    """A raw ``design:`` mapping with its metric filled in from the workload's first law metric
    when the spec gives none (anything else is returned as it is)."""
    if not isinstance(design, dict) or "metric" in design or workload is None:
        return design
    return {**design, "metric": workload.law_metrics[0]} if workload.law_metrics else design


def check_blocks(data: dict[str, Any], line_of: Callable[..., int], path: object) -> None:
    """Refuse a ``grid:`` (on the design's axis or another), a ``search:`` or ``variants:``
    beside a ``design:`` block. ``data`` is the spec's raw mapping; ``line_of(loc)`` the line of
    the key path ``loc``.

    Raises:
        SpecError: ``file:line`` and a fix.
    """
    grid = data.get("grid") or {}
    axis = (data.get("design") or {}).get("axis")
    if isinstance(grid, dict) and isinstance(axis, str) and axis in grid:
        raise SpecError(
            f"{path}:{line_of(('grid', axis))}: grid axis {axis!r} is also the "
            "design's axis: the design chooses its values. Fix: remove it from grid: (the "
            "design's values are the candidates), or remove design: to run the grid"
        )
    for block, what in (("grid", "a grid"), ("search", "an Optuna search"), ("variants", "")):
        if not data.get(block):
            continue
        what = what or "variants"
        raise SpecError(
            f"{path}:{line_of((block,))}: a spec has either design: (one adaptive law) or "
            f"{what}, not both. Fix: remove {block}: (fix those fields in base:), or write one "
            "spec per setting"
        )


def check_layout(
    design: DesignSpec,
    workload: Workload,
    data: dict[str, Any],
    line_of: Callable[..., int],
    path: object,
) -> None:
    """Refuse a design the workload cannot run: the axis is not one of its ``law_axes``, or
    both ``seeds:`` and ``max_seeds`` are given (``data``, ``line_of``: as :func:`check_blocks`).

    Raises:
        SpecError: ``file:line`` and a fix.
    """
    if design.axis not in workload.law_axes:
        axes = ", ".join(workload.law_axes)
        has = f"its law axes are {axes}" if axes else "it declares no law axis"
        first = workload.law_axes[0] if workload.law_axes else ""
        raise SpecError(
            f"{path}:{line_of(('design', 'axis'))}: design.axis {design.axis!r} is not a law "
            f"axis of {workload.name} ({has}; workloads/{workload.name}/workload.py law_axes). "
            + (f"Fix: axis: {first}" if first else "Fix: remove design:, or use a grid:")
        )
    given = data.get("design") or {}
    metrics = workload.law_metrics
    if "metric" in given and metrics and not is_law_metric(design.metric, metrics):
        raise SpecError(
            f"{path}:{line_of(('design', 'metric'))}: design.metric {design.metric!r} is not a "
            f"law metric of {workload.name} (its law metrics are {', '.join(metrics)}, each also "
            f"per prompt set as <metric>/<set>; workloads/{workload.name}/workload.py "
            "law_metrics). "
            f"Fix: metric: {metrics[0]}"
        )
    _check_metric_set(design, workload, data, line_of, path)
    if design.max_seeds is not None and "seeds" in data:
        raise SpecError(
            f"{path}:{line_of(('design', 'max_seeds'))}: design.max_seeds and seeds: both say "
            "which seeds the design repeats a value with. Fix: keep one of them"
        )


def _check_metric_set(
    design: DesignSpec,
    workload: Workload,
    data: dict[str, Any],
    line_of: Callable[..., int],
    path: object,
) -> None:
    """Refuse a per-set ``design.metric`` (``<law metric>/<set>``) whose set is not one the
    trials evaluate (the ``base:`` config's ``eval.prompt_sets`` or ``prompts.prompt_sets``,
    as :func:`workloads.data.prompts.prompt_set_sources` names them). A metric without a set
    passes, and so does a base or set list refused on its own line.

    Raises:
        SpecError: ``file:line`` of design.metric, the valid choices and a fix.
    """
    from workloads.data.prompts import prompt_set_sources

    law = next((m for m in workload.law_metrics if design.metric.startswith(f"{m}/")), None)
    if law is None:
        return
    try:
        config = workload.config_model.model_validate(data.get("base") or {})
    except ValidationError:
        return
    field, sets = next(
        (
            (f"{block}.prompt_sets", getattr(config, block).prompt_sets)
            for block in ("eval", "prompts")
            if hasattr(getattr(config, block, None), "prompt_sets")
        ),
        ("", None),
    )
    try:
        names = [name for name, _ in prompt_set_sources(sets)] if sets is not None else []
    except ValueError:
        return
    wanted = design.metric[len(law) + 1 :]
    if not names or wanted in names:
        return
    close = difflib.get_close_matches(wanted, names, n=1)
    raise SpecError(
        f"{path}:{line_of(('design', 'metric'))}: design.metric {design.metric!r}: no trial "
        f"evaluates a prompt set {wanted!r} (base {field} gives "
        f"{', '.join(f'{law}/{n}' for n in names)}). Fix: metric: {law}/{(close or names)[0]}, "
        f"or metric: {law} (all sets pooled)"
    )


EXAMPLE = "sweeps/tokens-adaptive.yaml"
"""the commented example a refusal of the block names"""


def check_raw(lines: SpecLines) -> None:
    """A ``design:`` block's refusals that need the workload (its law axes) and the blocks
    beside it, before the spec is validated as a whole (so they name their own lines): an
    empty block, :func:`check_blocks`, the block's own fields, :func:`check_layout`.

    Raises:
        SpecError: ``file:line`` and a fix.
    """
    data, path = lines.data, lines.path
    if "design" in data and not data["design"]:
        raise SpecError(
            f"{path}:{lines.line(('design',))}: design: is empty: an adaptive design needs "
            "axis, values, goal and budget_hours. Fix: fill it in (e.g. as in "
            "sweeps/tokens-adaptive.yaml), or remove design: to run a grid"
        )
    if not isinstance(data.get("design"), dict):
        return
    check_blocks(data, lines.line, path)
    try:
        design = DesignSpec.model_validate(data["design"])
    except ValidationError as err:
        raise lines.explain(err, prefix=("design",), model=DesignSpec) from None
    workload = WORKLOADS.get(str(data.get("workload", "draft_train")))
    if workload is None:
        return  # refused below, with the registered names
    check_layout(design, workload, data, lines.line, path)


def check_beside(spec: Any) -> None:
    """The blocks a design excludes (``spec``: the sweep spec being validated).

    Raises:
        ValueError: the rule.
    """
    if spec.search or spec.grid or spec.variants:
        raise ValueError("a spec with design: has no grid:, search: or variants:")


def check_loaded(lines: SpecLines, design: DesignSpec) -> None:
    """Every candidate value is one the axis's config field accepts (the value's own line).

    Raises:
        SpecError: ``file:line`` of the value and a fix.
    """
    for i, value in enumerate(design.values):
        at = ("design", "values", i)
        try:
            point = lines.config({design.axis: value})
        except ValidationError as err:
            first = err.errors()[0]
            if lines.field_path(first["loc"]) == design.axis:
                said = first["msg"].removeprefix("Value error, ").rstrip(".")
                raise SpecError(
                    f"{lines.path}:{lines.value_line(at)}: design.values[{i}] {value!r} is "
                    f"not a value of {design.axis} ({said}). Fix: list only values "
                    f"{design.axis} accepts (see sweeps/tokens-adaptive.yaml)"
                ) from None
            raise lines.explain(err, at=at) from None
        lines.check_workers(point, at)
