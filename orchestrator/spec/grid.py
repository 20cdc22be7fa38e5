"""Grid expansion: a sweep spec -> trials, each with a stable trial key."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from orchestrator.spec.sweep import SweepSpec, merge_overrides


@dataclass(frozen=True)
class TrialSpec:
    """One trial: its key, the full validated config and the grid point (with the seed)."""

    key: str
    config: BaseModel
    overrides: dict[str, Any]


def _key_dump(config: BaseModel) -> dict[str, Any]:
    """The config as JSON, minus fields marked ``key_omits_default`` that hold their default,
    and fields marked ``key_omits: <value>`` that hold that value (docs/sweep-spec.md, "Trial
    keys and key_omits")."""
    out = config.model_dump(mode="json")
    for name, info in type(config).model_fields.items():
        value = getattr(config, name)
        extra = info.json_schema_extra
        omitted = isinstance(extra, dict) and (
            (extra.get("key_omits_default") and value == info.default)
            or ("key_omits" in extra and value == extra["key_omits"])
        )
        if omitted:
            del out[name]
        elif isinstance(value, BaseModel):
            out[name] = _key_dump(value)
    return out


def trial_key(workload: str, config: BaseModel) -> str:
    """16 hex chars of SHA-256 over the canonical JSON of (workload, full trial config).

    Equal configs give equal keys whatever the YAML's key order or defaults spelled out.
    """
    canonical = json.dumps(
        {"workload": workload, "config": _key_dump(config)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def count_trials(spec: SweepSpec) -> int:
    """Number of trials the grid expands to (grid points x seeds x variants)."""
    n = len(spec.seeds) * max(1, len(spec.variants))
    for values in spec.grid.values():
        n *= len(values)
    return n


def expand(spec: SweepSpec) -> list[TrialSpec]:
    """All trials of the spec: variants outermost (in file order), then grid axes in file order,
    seeds innermost; duplicates dropped. A variant's trials record ``variant: <name>``. (A search
    or a design proposes its trials as it runs: :mod:`orchestrator.kinds`.)"""
    axes = list(spec.grid)
    trials: dict[str, TrialSpec] = {}
    variants: list[tuple[str | None, dict[str, Any]]] = list(spec.variants.items()) or [(None, {})]
    for name, recipe in variants:
        base = merge_overrides(spec.base, recipe)
        for point in itertools.product(*(spec.grid[a] for a in axes)):
            for seed in spec.seeds:
                overrides = dict(zip(axes, point, strict=True)) | {"seed": seed}
                config = spec.config_model.model_validate(merge_overrides(base, overrides))
                key = trial_key(spec.workload, config)
                shown = overrides if name is None else {"variant": name} | overrides
                trials.setdefault(key, TrialSpec(key=key, config=config, overrides=shown))
    return list(trials.values())
