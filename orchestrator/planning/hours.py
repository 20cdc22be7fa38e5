"""The training hours of a plan: one trial of the token sweep's config at a budget and depth,
costed by :mod:`orchestrator.cost.model` for the planned target and hardware (used by
:mod:`orchestrator.planning.plan`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.planning.inputs import LAYERS, TOKENS, PlanOptions, PlanSweeps
from orchestrator.store.results import ResultsStore

__all__ = ["costed_for", "hours_fn"]


def costed_for(sw: PlanSweeps, model: str, measured: str | None, hw_name: str) -> dict[str, str]:
    """The target and dtype the training hours are costed for: the token sweep's own config,
    with ``--model``'s shape as the target when it names another one, and bfloat16 on a GPU
    when the sweep trained in float32."""
    from workloads.roofline.hardware import LOCAL_CPU

    target = sw.tokens.trials[0].config.get("target") or {}
    out = {"target": str(target.get("model", "")), "dtype": str(target.get("dtype", "float32"))}
    if model != measured:
        out["target"] = model
    if hw_name != LOCAL_CPU and out["dtype"] == "float32":
        out["dtype"] = "bfloat16"
    return out


def hours_fn(
    store: ResultsStore,
    sw: PlanSweeps,
    opts: PlanOptions,
    costed_as: Mapping[str, str] | None = None,
) -> tuple[Callable[[float, int], float], str]:
    """(tokens, layers) -> predicted training hours on one device (every stage but the
    evaluation) of one trial of the token sweep's config at that budget and depth, costed for
    ``costed_as`` (:func:`costed_for`), and the figures' basis (another target or dtype than
    the trials ran: modelled). On this CPU the profile is the one cached under
    ``opts.cache_dir`` (measured and cached when there is none); nothing else cached counts."""
    from orchestrator.cost import model as costing
    from orchestrator.cost.hardware import check_hardware_name
    from orchestrator.spec.sweep import merge_overrides, parse_spec
    from workloads.roofline.hardware import LOCAL_CPU, get_profile

    info = store.get_sweep(sw.tokens.sweep)
    assert info is not None
    spec = parse_spec(info.spec_yaml, Path(f"<results DB: sweep {info.name}>"))

    hardware = opts.hardware
    local = hardware is None or check_hardware_name(hardware) == LOCAL_CPU
    profile = opts.profile if local else None
    if local and profile is None:
        dtype = (costed_as or {}).get("dtype", "float32")
        threads = max(1, int(spec.resources.num_cpus))
        profile = get_profile(LOCAL_CPU, dtype=dtype, threads=threads, cache_dir=opts.cache_dir)
    predict = costing.predictor(store, spec, hardware=hardware, profile=profile)
    bases: set[str] = set()
    extra: dict[str, Any] = {}
    if costed_as:
        extra = {"target.model": costed_as["target"], "target.dtype": costed_as["dtype"]}

    def hours(t: float, d: int) -> float:
        over = {**extra, TOKENS: int(round(t)), LAYERS: int(d), "seed": 0}
        cfg = spec.config_model.model_validate(merge_overrides(spec.base, over))
        cost = predict(cfg)
        stages = [s for s in cost.stages if s.stage != "eval"]
        if any(s.seconds is None for s in stages):
            raise OrchestratorError(
                f"the training cost of {t:,.0f} tokens is unknown to the cost model "
                f"({cost.basis}). Fix: run the token sweep on this hardware first, or name a "
                "hardware the cost model knows (--hardware h200)"
            )
        bases.update(s.basis for s in stages)
        return sum(s.seconds or 0.0 for s in stages) / 3600.0

    hours(min(sw.tokens.x), 1)  # refuse an unknown cost before planning
    return hours, "+".join(sorted(bases)) or "unknown"
