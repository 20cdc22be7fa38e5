"""What a trial measured on besides its grid point: the prompt sets it decoded and the sampling
temperature; the warning lines where the decode report pools trials, or ``orchestrator compare``
sets sweeps side by side, that differ in them.

A trial's prompt sets are its config's ``prompts.prompt_sets`` (decode_bench) or
``eval.prompt_sets`` (draft_train) as written (``humaneval+sharegpt``; a directory is its path);
its temperature is ``decode.temperature`` (0 where the workload has none: draft_train evaluates
greedily). Reads stored trial configs (plain dicts) leniently: a missing field is its default.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import pandas as pd

from analysis.numbers import fmt
from orchestrator.store.results import ResultsStore
from orchestrator.store.rows import SweepInfo

__all__ = ["compare_line", "compared_line", "pooled_sets_line", "prompt_sets", "temperature"]


def prompt_sets(config: Mapping[str, Any]) -> str:
    """The prompt sets of a trial config, e.g. ``humaneval+sharegpt``; "" when it names none."""
    for block in ("prompts", "eval"):
        sets = (config.get(block) or {}).get("prompt_sets")
        if sets is not None:
            return "+".join(map(str, sets)) if isinstance(sets, list) else str(sets)
    return ""


def temperature(config: Mapping[str, Any]) -> float:
    """The sampling temperature of a trial config (``decode.temperature``; 0 when absent)."""
    return float((config.get("decode") or {}).get("temperature") or 0.0)


def pooled_sets_line(trials: pd.DataFrame, sets: Mapping[str, str]) -> str:
    """A warning when the completed trials of a decode table (columns ``trial_key``, ``state``,
    ``batch_size``, ``num_draft_tokens``) differ in prompt sets (``sets``: trial key ->
    :func:`prompt_sets`), which its (b, k) cells, best k per b and fits pool as if seeds; ""
    when they do not."""
    done = trials[trials["state"] == "completed"] if "state" in trials else trials
    named = done.assign(_sets=done["trial_key"].map(lambda k: sets.get(k, "")))
    counts = named["_sets"].value_counts(sort=False)
    if len(counts) < 2:
        return ""
    cells = named.groupby(["batch_size", "num_draft_tokens"], dropna=False)["_sets"].nunique()
    said = "; ".join(f"{s or 'none'}: {n} trial{'s' if n != 1 else ''}" for s, n in counts.items())
    return (
        f"warning: the trials differ in prompt sets ({said}), pooled as if seeds: "
        f"{int((cells > 1).sum())} of {len(cells)} (b, k) cells, the best k per b and the fits "
        "mix them, and acceptance length depends on the prompts. Fix: one prompts.prompt_sets "
        "per sweep (set it in base:), one sweep per set"
    )


def compare_line(
    names: tuple[str, str], configs: tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]]
) -> str:
    """A warning when two sweeps' compared trials (``configs``: each sweep's trial configs)
    differ in prompt sets or temperature, with each sweep's values; "" when they agree."""
    seen = [
        (sorted({prompt_sets(c) for c in cs}), sorted({temperature(c) for c in cs}))
        for cs in (list(configs[0]), list(configs[1]))
    ]
    differ = []
    if seen[0][0] != seen[1][0]:
        a, b = (", ".join(s or "none" for s in sets) for sets, _ in seen)
        differ.append(f"prompt sets {a} ({names[0]}) vs {b} ({names[1]})")
    if seen[0][1] != seen[1][1]:
        a, b = (", ".join(fmt(t, "g") for t in temps) for _, temps in seen)
        differ.append(f"temperature {a} ({names[0]}) vs {b} ({names[1]})")
    if not differ:
        return ""
    return (
        f"warning: the sweeps were measured differently: {'; '.join(differ)}; acceptance "
        "length depends on both, so the laws differ by that too, not only by what each sweep "
        "varies"
    )


def compared_line(
    store: ResultsStore, sweeps: tuple[tuple[SweepInfo, Collection[str]], ...]
) -> str:
    """:func:`compare_line` of two stored sweeps, each given with the keys of its trials that
    are compared (``LawTable.trial_keys``)."""
    names = (sweeps[0][0].name, sweeps[1][0].name)
    configs = [
        [t.config for t in store.trials(info.id, {"completed"}) if t.key in keys]
        for info, keys in sweeps
    ]
    return compare_line(names, (configs[0], configs[1]))
