"""Where a plan goes: ``<run root>/<plan>/`` holds ``plan.json``, ``plan.html`` (linked from the
run root's index), ``vllm_speculative_config.json``, ``sglang_launch.sh`` and ``k_law.json``
(:mod:`orchestrator.planning.snippets`); MLflow gets one run per plan made (params: the options
and sweeps; metrics: the recommendation with its intervals; the files as artifacts).

Every file is written to a temporary name and renamed, so a failed plan leaves the folder as it
was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.planning.snippets import sglang_lines, vllm_config, write_k_law
from workloads.files import atomic_json, atomic_write

__all__ = ["PLAN_FILES", "log_plan", "write_plan"]

PLAN_FILES = (
    "plan.json",
    "plan.html",
    "vllm_speculative_config.json",
    "sglang_launch.sh",
    "k_law.json",
)
"""the files of a plan's folder"""

TAG_PLAN = "specscale.plan"
"""MLflow tag of a plan's run: the plan's name"""


def write_plan(folder: Path, plan: Mapping[str, Any], *, name: str, draft: str) -> dict[str, Path]:
    """Write the plan's files into ``folder`` and return them by name.

    ``draft`` is the path or hub id the snippets name as the draft model (an exported draft:
    ``orchestrator export``)."""
    from dashboards.plan_page import write_plan_page

    folder.mkdir(parents=True, exist_ok=True)
    rows = plan["serving"]["rows"]
    tree = plan["tree"]
    t = plan["targets"]
    same = t["shape"] == t["measured_shape"]
    target = str(t["measured"]) if same else str(t["shape"])
    where = (
        ""
        if same
        else f"# --model-path {target} is the planned target's shape name: put its checkpoint "
        "(a local path or hub id) there\n"
    )
    out = {
        "plan.json": atomic_json(folder / "plan.json", plan, default=str),
        "vllm_speculative_config.json": atomic_write(
            folder / "vllm_speculative_config.json",
            json.dumps(vllm_config(rows, draft), indent=1) + "\n",
        ),
        "sglang_launch.sh": atomic_write(
            folder / "sglang_launch.sh",
            "#!/bin/sh\n# one SGLang server setting per batch range (orchestrator plan "
            f"{name})\n# UNCHECKED: never run by this project (SGLang's registry build needs "
            "CUDA; docs/serving.md)\n"
            + where
            + "\n".join(
                sglang_lines(
                    rows, target=target, draft=draft, depth=tree["depth"], topk=tree["topk"]
                )
            )
            + "\n",
        ),
    }
    ladder = plan["k_ladder"]
    out["k_law.json"] = write_k_law(
        folder,
        [r["batch_size"] for r in ladder],
        [r["k"] for r in ladder],
        name=name,
        target=target,
    )
    tmp = folder / "plan.html.tmp"
    write_plan_page(tmp, plan, name=name, decode_points=plan["decode_points"])
    tmp.replace(folder / "plan.html")
    out["plan.html"] = folder / "plan.html"
    return out


def plan_metrics(plan: Mapping[str, Any]) -> dict[str, float]:
    """The recommendation as MLflow metrics (finite values only)."""
    t, s = plan["training"], plan["serving"]
    m: dict[str, Any] = {
        "plan.tokens": t["tokens"],
        "plan.layers": t["layers"],
        "plan.training_hours": t["hours"],
        "plan.acceptance_length": t["acceptance_length"],
        "plan.acceptance_length_ci_low": t["acceptance_ci"][0],
        "plan.acceptance_length_ci_high": t["acceptance_ci"][1],
        "plan.mix_speedup": s["mix_speedup"],
        "plan.mix_speedup_ci_low": s["mix_speedup_ci"][0],
        "plan.mix_speedup_ci_high": s["mix_speedup_ci"][1],
        "plan.extrapolated": float(any(not x.startswith("capped") for x in plan["labels"])),
    }
    for r in s["rows"]:
        b = r["batch_size"]
        m[f"plan.k/b{b}"] = r["k"]
        m[f"plan.speedup/b{b}"] = r["speedup"]
        m[f"plan.tokens_per_s/b{b}"] = r["tokens_per_s"]
    if plan.get("holdout"):
        m["plan.holdout_inside"] = plan["holdout"]["inside"]
        m["plan.holdout_coverage"] = plan["holdout"]["coverage"]
    return {
        k: float(v)
        for k, v in m.items()
        if isinstance(v, int | float) and v is not None and math.isfinite(float(v))
    }


def open_tracker(tracking_uri: str) -> Any:
    """The MLflow tracker a plan logs to, connected before anything is written (an unreachable
    server refuses the plan with nothing on disk).

    Raises:
        TrackingError: MLflow cannot be reached.
    """
    from orchestrator.tracking.tracker import Tracker

    return Tracker(tracking_uri)


def log_plan(
    tracker: Any, plan: Mapping[str, Any], files: Mapping[str, Path], *, name: str
) -> tuple[str, list[str]]:
    """One MLflow run for this plan (named ``plan <name>``, tag ``specscale.plan``): params,
    metrics, tags, artifacts. An earlier plan of the same name (its files just replaced) has its
    run deleted (MLflow's soft delete: ``mlflow runs restore --run-id`` brings it back), so one
    run stands for each plan folder. Returns the run id and the ids deleted.

    Raises:
        TrackingError: MLflow failed.
    """
    from orchestrator.store.rows import TrialState

    params = {
        "plan": name,
        "sweeps": plan["sweeps"],
        "target_shape": plan["targets"]["shape"],
        "hardware": plan["hardware"],
        **plan["options"],
    }
    earlier = tracker.runs_tagged(TAG_PLAN, name)
    run = tracker.start_sweep_run(f"plan {name}", params, None)
    tracker.set_tags(run, {TAG_PLAN: name, "specscale.kind": "plan"})
    tracker.log_metrics(run, plan_metrics(plan))
    for path in files.values():
        tracker.log_artifact(run, path, "plan")
    tracker.set_state(run, TrialState.COMPLETED)
    deleted = [r for r in earlier if r != run]
    tracker.delete_runs(deleted)
    return run, deleted
