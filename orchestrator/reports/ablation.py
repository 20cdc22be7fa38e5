"""The recipe ablation as console lines and parent-run metrics.

A ``variants:`` sweep whose trials measured several prompt sets gets, per factor, its main
effect on the mean over the sets (:data:`analysis.factorial.SET_MEAN`) with its 95% CI, the
level that mean prefers, how many sets prefer it (or the other level) beyond their scatter,
and the effect on each set with its CI (:func:`analysis.factorial.effects_across_sets`). One
whose grid also varies a law axis gets each variant's law and the factorial over the axis
(:mod:`analysis.variant_laws`): :func:`variant_law_lines`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.factorial import FactorAcrossSets, FactorEffect
from analysis.laws import LogLinearFit
from analysis.numbers import fmt
from analysis.variants import VARIANT

__all__ = ["across_sets_lines", "variant_law_lines"]


def _ci(e: FactorEffect) -> str:
    return f"[{fmt(e.ci[0], '+.4f')}, {fmt(e.ci[1], '+.4f')}]"


def across_sets_lines(across: list[FactorAcrossSets]) -> list[str]:
    """Two lines per factor: the effect on the mean over sets and its verdict, then the
    effect on each set (acceptance length, tokens per cycle, pooled per set). Empty when
    there is nothing to compare (fewer than two prompt sets)."""
    lines = []
    for a in across:
        m, k = a.mean, len(a.per_set)
        if not a.preferred:
            verdict = "prefers neither level"
        elif a.resolved:
            verdict = f"prefers {a.preferred} (the CI excludes 0)"
        else:
            verdict = f"leans to {a.preferred}, within the trials' scatter (the CI holds 0)"
        lines.append(
            f"effect of {a.factor} {a.low} -> {a.high} on the mean over {k} prompt sets: "
            f"{fmt(m.effect, '+.4f')} (95% CI {_ci(m)}, n = {m.n}): {verdict}; "
            f"{a.agreeing_sets} of {k} sets prefer the same level beyond their scatter, "
            f"{a.opposing_sets} the other"
        )
        per_set = ", ".join(
            f"{e.metric.removeprefix('acceptance_length/')} {fmt(e.effect, '+.4f')} {_ci(e)}"
            for e in a.per_set
        )
        lines.append(f"  per set: {per_set}")
    return lines


def variant_law_lines(
    trials: pd.DataFrame, laws: dict[str, LogLinearFit], terms: list[FactorEffect], x: str
) -> tuple[list[str], dict[str, float]]:
    """Each variant's law (``laws``, :func:`analysis.variant_laws.variant_laws`: slope with its
    HC3 95% CI, R², n, and the mean at the largest ``x``) and the factorial over the axis
    (``terms``, :func:`analysis.variant_laws.factorial_with_axis`) with a verdict per
    interaction, as console lines and parent-run metrics
    ``law.<variant>.{a,a_lo,a_hi,r2,n,y_at_max}`` and ``factorial.<term>{,.lo,.hi}``."""
    y = "acceptance_length"
    lines: list[str] = []
    values: dict[str, float] = {}
    done = trials[trials["state"] == "completed"] if "state" in trials.columns else trials
    xs = pd.to_numeric(done.get(x, pd.Series(dtype=float)), errors="coerce")
    top = float(xs.max()) if len(xs) and np.isfinite(xs.max()) else math.nan
    for v, f in laws.items():
        at_top = pd.to_numeric(done.loc[(done[VARIANT] == v) & (xs == top), y], errors="coerce")
        mean_top = float(at_top.mean()) if len(at_top) else math.nan
        key = f"law.{v}"
        values |= {f"{key}.y_at_max": mean_top, f"{key}.n": float(f.n)}
        if not f.ok:
            lines.append(f"law of {v}: no fit ({f.status})")
            continue
        values |= {f"{key}.a": f.a, f"{key}.a_lo": f.a_ci[0], f"{key}.a_hi": f.a_ci[1],
                   f"{key}.r2": f.r2}  # fmt: skip
        lines.append(
            f"law of {v}: {f.form}, a = {fmt(f.a, '.4f')} (95% CI {fmt(f.a_ci[0], '.4f')} to "
            f"{fmt(f.a_ci[1], '.4f')}), R² {fmt(f.r2, '.2f')}, n = {f.n}; "
            f"{y} at {x} = {fmt(top, ',.0f')}: {fmt(mean_top, '.4f')} (mean of {len(at_top)})"
        )
    for e in terms:
        values |= {f"factorial.{e.factor}": e.effect, f"factorial.{e.factor}.lo": e.ci[0],
                   f"factorial.{e.factor}.hi": e.ci[1]}  # fmt: skip
        lines.append(
            f"factorial over {x}: {e.factor} ({e.low} -> {e.high}) {fmt(e.effect, '+.4f')} "
            f"(95% CI {_ci(e)}, p = {fmt(e.p, '.3g')}, n = {e.n})"
        )
    for e in terms:
        if " x " in e.factor and "log2(" not in e.factor:
            adds = e.ci[0] <= 0 <= e.ci[1]
            lines.append(
                f"do the gains of {e.factor.replace(' x ', ' and ')} add? "
                + ("yes within the CI: the interaction's CI holds 0" if adds else
                   f"no: the interaction is {fmt(e.effect, '+.4f')}, its CI excludes 0")
            )  # fmt: skip
    return lines, values
