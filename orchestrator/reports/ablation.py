"""The recipe ablation across prompt sets as console lines.

A ``variants:`` sweep whose trials measured several prompt sets gets, per factor, its main
effect on the mean over the sets (:data:`analysis.factorial.SET_MEAN`) with its 95% CI, the
level that mean prefers, how many sets prefer it (or the other level) beyond their scatter,
and the effect on each set with its CI (:func:`analysis.factorial.effects_across_sets`).
"""

from __future__ import annotations

from analysis.factorial import FactorAcrossSets, FactorEffect
from analysis.numbers import fmt

__all__ = ["across_sets_lines"]


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
