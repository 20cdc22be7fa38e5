"""The law per variant and the factorial over a law axis, on tables with known effects."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.variant_laws import (
    factorial_with_axis,
    interaction_name,
    slope_name,
    variant_laws,
)

VARIANTS = {
    "scylla": {"draft.fusion": "none", "train.ttt_steps": 1},
    "fusion": {"draft.fusion": "eagle3", "train.ttt_steps": 1},
    "ttt": {"draft.fusion": "none", "train.ttt_steps": 2},
    "fusion-ttt": {"draft.fusion": "eagle3", "train.ttt_steps": 2},
}
X = "pretrain.tokens"
BUDGETS = [8192, 16384, 32768, 65536, 131072]


def _table(
    gain: dict[str, float], slope: dict[str, float], noise: float, seed: int = 0
) -> pd.DataFrame:
    """Trials of every variant, budget and 3 seeds: y = 1 + gain + slope * log2(T / 8192) + noise
    (a baseline row at T = 0 per variant, which a law leaves out)."""
    rng = np.random.default_rng(seed)
    rows = []
    for v in VARIANTS:
        for t in BUDGETS:
            for s in range(3):
                y = 1 + gain[v] + slope[v] * math.log2(t / 8192) + noise * rng.standard_normal()
                rows.append({"variant": v, X: t, "seed": s, "state": "completed",
                             "acceptance_length": y})  # fmt: skip
        rows.append({"variant": v, X: 0, "seed": 0, "state": "completed",
                     "acceptance_length": 1.0})  # fmt: skip
    rows.append({"variant": "scylla", X: 8192, "seed": 9, "state": "failed",
                 "acceptance_length": 99.0})  # fmt: skip
    return pd.DataFrame(rows)


def test_each_variant_gets_its_own_slope_in_log10() -> None:
    slope = {"scylla": 0.05, "fusion": 0.10, "ttt": 0.05, "fusion-ttt": 0.12}
    laws = variant_laws(_table(dict.fromkeys(VARIANTS, 0.0), slope, 0.0), X,
                        "acceptance_length", law="tokens")  # fmt: skip
    assert list(laws) == list(VARIANTS)
    for v, f in laws.items():  # s per doubling = s / log10(2) per decade
        assert f.n == 15 and f.excluded == 1  # the baseline at T = 0
        assert f.a == pytest.approx(slope[v] / math.log10(2))


def test_additive_gains_show_no_interaction_and_a_synergy_does() -> None:
    slope = dict.fromkeys(VARIANTS, 0.04)
    additive = {"scylla": 0.0, "fusion": 0.2, "ttt": 0.05, "fusion-ttt": 0.25}
    terms = {e.factor: e for e in factorial_with_axis(
        _table(additive, slope, 0.02), VARIANTS, X, "acceptance_length")}  # fmt: skip
    both = interaction_name("draft.fusion", "train.ttt_steps")
    assert list(terms) == [
        "draft.fusion", "train.ttt_steps", both, slope_name("draft.fusion", X),
        slope_name("train.ttt_steps", X), f"log2({X})",
    ]  # fmt: skip
    assert terms["draft.fusion"].ci[0] < 0.2 < terms["draft.fusion"].ci[1]
    assert terms["draft.fusion"].low == "none" and terms["draft.fusion"].high == "eagle3"
    assert terms[both].ci[0] < 0 < terms[both].ci[1]
    assert terms[f"log2({X})"].effect == pytest.approx(0.04, abs=0.01)
    assert terms[both].n == 60  # 4 variants x 5 budgets x 3 seeds; baselines and failed out
    synergy = additive | {"fusion-ttt": 0.45}
    terms = {e.factor: e for e in factorial_with_axis(
        _table(synergy, slope, 0.02), VARIANTS, X, "acceptance_length")}  # fmt: skip
    assert terms[both].ci[0] > 0.1 and terms[both].effect == pytest.approx(0.2, abs=0.05)


def test_a_slope_change_is_its_own_term() -> None:
    slope = {"scylla": 0.04, "fusion": 0.09, "ttt": 0.04, "fusion-ttt": 0.09}
    terms = {
        e.factor: e
        for e in factorial_with_axis(
            _table(dict.fromkeys(VARIANTS, 0.0), slope, 0.01), VARIANTS, X, "acceptance_length"
        )
    }
    assert terms[slope_name("draft.fusion", X)].effect == pytest.approx(0.05, abs=0.01)
    s_ttt = terms[slope_name("train.ttt_steps", X)]
    assert s_ttt.ci[0] < 0 < s_ttt.ci[1]
    # log2(x) is the reference variant's slope (every factor low), not the variants' mean 0.065
    assert terms[f"log2({X})"].effect == pytest.approx(0.04, abs=0.01)


def test_too_little_data_gives_no_terms() -> None:
    one_budget = _table(dict.fromkeys(VARIANTS, 0.0), dict.fromkeys(VARIANTS, 0.0), 0.1)
    one_budget = one_budget[one_budget[X] == 8192]
    assert factorial_with_axis(one_budget, VARIANTS, X, "acceptance_length") == []
    assert factorial_with_axis(one_budget, {"a": {}}, X, "acceptance_length") == []
    assert variant_laws(one_budget.drop(columns=[X]), X, "acceptance_length", law="t") == {}
