"""Main effects of a two-level factorial sweep of variants (issue 13's recipe ablation)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from analysis.factorial import factor_effects, two_level_factors

VARIANTS = {
    f"{p}-{n}-{r}": {"pretrain.packing": p, "train.feature_noise": n, "sft.responses": r,
                     "pretrain.tokens": 131072}
    for p, n, r in itertools.product(["joined", "isolated"], [0.0, 0.2], ["dataset", "target"])
}  # fmt: skip
TRUE = {"pretrain.packing": 0.05, "train.feature_noise": -0.02, "sft.responses": 0.30}


def _trials(seeds: int = 2, noise: float = 0.01) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for name, v in VARIANTS.items():
        mean = 1.3 + TRUE["pretrain.packing"] * (v["pretrain.packing"] == "isolated")
        mean += TRUE["train.feature_noise"] * (v["train.feature_noise"] == 0.2)
        mean += TRUE["sft.responses"] * (v["sft.responses"] == "target")
        for _ in range(seeds):
            rows.append({"variant": name, "state": "completed",
                         "acceptance_length": mean + noise * rng.standard_normal()})  # fmt: skip
    rows.append({"variant": "joined-0.0-dataset", "state": "failed", "acceptance_length": 9.9})
    return pd.DataFrame(rows)


def test_factors_are_the_fields_with_two_levels_low_from_the_first_variant() -> None:
    factors = two_level_factors(VARIANTS)
    assert factors == {
        "pretrain.packing": ("joined", "isolated"),
        "train.feature_noise": (0.0, 0.2),
        "sft.responses": ("dataset", "target"),
    }  # pretrain.tokens has one level: not a factor
    assert two_level_factors({"only": {"a": 1}}) == {}


def test_effects_recover_the_true_ones_and_equal_level_mean_differences() -> None:
    df = _trials()
    effects = {e.factor: e for e in factor_effects(df, VARIANTS, "acceptance_length")}
    assert set(effects) == set(TRUE)
    done = df[df["state"] == "completed"]
    for field, true in TRUE.items():
        e = effects[field]
        half_width = (e.ci[1] - e.ci[0]) / 2  # t(0.975, 12) = 2.18 standard errors
        assert e.n == 16 and e.ci[0] < e.effect < e.ci[1]
        assert abs(e.effect - true) < 2 * half_width  # within ~4.4 standard errors
        # balanced full factorial: the OLS coefficient is the difference of the level means
        level = done["variant"].map(lambda v, f=field: str(VARIANTS[v][f]))
        y = done["acceptance_length"]
        diff = y[level == e.high].mean() - y[level == e.low].mean()
        assert e.effect == pytest.approx(diff, abs=1e-12)
    assert effects["sft.responses"].p < 1e-6 and effects["sft.responses"].low == "dataset"


def test_no_effects_without_residual_degrees_of_freedom_or_factors() -> None:
    assert factor_effects(_trials(seeds=1).iloc[:4], VARIANTS, "acceptance_length") == []
    assert factor_effects(_trials(), {"a": {"x": 1}}, "acceptance_length") == []
    assert factor_effects(_trials(), VARIANTS, "missing_metric") == []


def test_identical_trials_give_no_interval_and_no_test() -> None:
    df = _trials(noise=0.0)
    df["acceptance_length"] = 1.25
    effects = factor_effects(df, VARIANTS, "acceptance_length")
    assert len(effects) == 3
    assert all(abs(e.effect) < 1e-9 and np.isnan(e.ci[0]) and np.isnan(e.p) for e in effects)
