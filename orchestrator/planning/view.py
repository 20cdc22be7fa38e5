"""The console's view of a plan: the recommendation, k per batch size with intervals, the
extrapolation labels, the holdout score and where the files went."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from analysis.numbers import fmt, fmt_interval
from dashboards.plan_page import costed_for, k_text, share_text
from orchestrator.commands.render import out


def _say(line: str) -> None:
    out.print(line, markup=False, highlight=False, soft_wrap=True)


def print_plan(
    plan: Mapping[str, Any],
    *,
    name: str,
    files: Mapping[str, Path],
    index: Path,
    mlflow_run: str,
    replaced: Sequence[str] = (),
    export_to: str | None = None,
) -> None:
    """Print the plan ``name`` (:func:`orchestrator.planning.plan.make_plan`'s data);
    ``export_to``: the default draft path the snippets name, said where the plan speculates."""
    t, s, law = plan["training"], plan["serving"], plan["laws"]["tokens"]
    kinds = {"tokens": "token law", "depth": "depth law", "decode": "decode"}
    sweeps = ", ".join(f"{kinds.get(k, k)} sweep {v}" for k, v in plan["sweeps"].items() if v)
    _say(f"plan {name}: from {sweeps}; {plan['targets']['shape']} on {plan['hardware']}")
    _say(
        f"token law: a = {fmt(law['a'], '.4f')} {fmt_interval(law['a_ci'], '.4f')} per decade, "
        f"R^2 {fmt(law['r2'], '.3f')}, n = {law['n']}"
    )
    _say(
        f"train: {t['tokens']:,.0f} pretraining tokens {fmt_interval(t['tokens_ci'], ',.0f')}, "
        f"{t['layers']} draft layer(s) {fmt_interval(t['layers_ci'], 'g')}, "
        f"{fmt(t['hours'], '.3g')} h on one device ({costed_for(plan)}); stop: {t['stop']}"
    )
    _say(
        f"acceptance length at the eval tree: {fmt(t['acceptance_length'], '.3f')} "
        f"{fmt_interval(t['acceptance_ci'])} (95%, the law's value; intervals from "
        f"{law.get('intervals', 'trials (OLS)')})"
    )
    table = Table(title="serving: k per batch size (roofline, 95% intervals)", box=box.SIMPLE_HEAD)
    for col in ("b", "share", "k", "k 95%", "accept", "tokens/s", "speedup", "speedup 95%", "ext"):
        table.add_column(col, no_wrap=True)
    for r in s["rows"]:
        table.add_row(
            str(r["batch_size"]),
            fmt(r["share"], ".2f"),
            str(r["k"]),
            fmt_interval(r["k_ci"], "g"),
            fmt(r["acceptance_length"], ".3f"),
            fmt(r["tokens_per_s"], ".4g"),
            fmt(r["speedup"], ".3f"),
            fmt_interval(r["speedup_ci"]),
            "yes" if r["labels"] else "",
        )
    out.print(table)
    _say(f"mix speedup over AR: {fmt(s['mix_speedup'], '.3f')} {fmt_interval(s['mix_speedup_ci'])}")
    _say(
        f"acceptance vs k: {plan['laws']['tau_k']['chosen']} form chosen by AICc; "
        f"{s['rescale_note']}"
    )
    if plan.get("measured_k"):
        _say(
            "the rule checked on what the decode sweep measured (its target and draft, this "
            f"CPU; {plan['targets']['measured_shape']}, not rescaled):"
        )
    for m in plan.get("measured_k") or []:
        _say(
            f"measured b={m['batch_size']}: planned k {k_text(m['planned_k'])}, best measured "
            f"k {k_text(m['best_measured_k'])}; planned k gives {share_text(m)}"
        )
    ratios = [
        m["roofline_ar_tokens_per_s"] / m["ar_tokens_per_s"]
        for m in plan.get("measured_k") or []
        if m.get("ar_tokens_per_s") and m.get("roofline_ar_tokens_per_s")
    ]
    if ratios:
        _say(
            f"the roofline's tokens/s are ideal (no per-step overhead): its AR is "
            f"{min(ratios):.2g}-{max(ratios):.2g}x what the decode sweep measured on this CPU; "
            "k is chosen by the ratios, the speedups are the roofline's"
        )
    h = plan.get("holdout")
    if h:
        _say(
            f"holdout: fitted on budgets <= {h['cut']:,.0f}; {h['inside']} of {len(h['rows'])} "
            f"held-out trials inside their 95% intervals, mean |error| "
            f"{fmt(h['mean_abs_error'], '.4f')}"
        )
    for label in plan["labels"]:
        _say(_label_line(label))
    _say(f"wrote {files['plan.html'].parent}/ ({', '.join(files)}); index {index}")
    if export_to and any(r["k"] > 1 for r in s["rows"]):
        _say(
            f"the snippets serve the draft from {export_to}: train it to the plan, then "
            f"orchestrator export {plan['sweeps']['tokens']} <trial> --format vllm "
            f"--out {export_to}"
        )
    if replaced:
        _say(
            f"replaced the earlier plan {name} (its MLflow run {', '.join(replaced)} deleted; "
            "mlflow runs restore --run-id brings it back)"
        )
    _say(f"MLflow run {mlflow_run}; {_k_law_text(files, name)}")


def _label_line(label: str) -> str:
    """A label for the console: ``EXTRAPOLATED: batch size 32 ...``, ``CAPPED: k = 64 ...``,
    ``UNCERTAIN: ...``; a label without such a head (another target, hardware) is an
    extrapolation."""
    head, _, rest = label.partition(": ")
    if head in ("extrapolated", "capped", "uncertain") and rest:
        return f"{head.upper()}: {rest}"
    return f"EXTRAPOLATED: {label}"


def _k_law_text(files: Mapping[str, Path], name: str) -> str:
    """How to serve the plan's k in this project's engine: the k_law file when Eq. 4 fits the
    planned k, else why not and what to use instead."""
    import json

    try:
        eq4 = json.loads(files["k_law.json"].read_text()).get("eq4") or {}
    except (KeyError, OSError, ValueError):
        eq4 = {}
    if eq4.get("status") == "ok":
        return f"serve with decode.k_law: sweep:{name}"
    return (
        f"k_law.json not usable ({eq4.get('status', 'missing')}: Eq. 4 does not fit the planned "
        "k per b); serve with the vLLM/SGLang snippets, or decode.num_draft_tokens set to the "
        "planned k"
    )
