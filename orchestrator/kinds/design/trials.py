"""A design's trials: the base config with the design's axis set to a candidate value, at a
seed (:func:`design_trial`), and one per candidate for the checks at submit."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator.kinds.design.spec import DesignSpec, design_seeds
from orchestrator.spec.grid import TrialSpec, trial_key
from orchestrator.spec.sweep import SweepSpec, merge_overrides

__all__ = ["design_configs", "design_of", "design_trial"]


def design_of(spec: SweepSpec) -> DesignSpec:
    """The spec's ``design:`` block (a programmer's error without one)."""
    assert spec.design is not None, "a design needs a spec with a design block"
    return spec.design


def design_trial(spec: SweepSpec, value: Any, seed: int) -> TrialSpec:
    """The trial of a design (``design:``) at axis ``value`` and ``seed``: the base config with
    both set; its grid point is ``{axis: value, seed: seed}``.

    Raises:
        pydantic.ValidationError: the config model refuses the value (checked at load for
            every candidate value, so only a programmer's error).
    """
    overrides = {design_of(spec).axis: value, "seed": seed}
    config = spec.config_model.model_validate(merge_overrides(spec.base, overrides))
    return TrialSpec(key=trial_key(spec.workload, config), config=config, overrides=overrides)


def design_configs(spec: SweepSpec) -> list[BaseModel]:
    """One config per candidate value of a design (at its first seed), for the checks at
    submit (the workload's preflight)."""
    design = design_of(spec)
    seed = design_seeds(design, spec.seeds)[0]
    return [design_trial(spec, v, seed).config for v in dict.fromkeys(design.values)]
