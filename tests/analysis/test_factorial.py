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


# --- across prompt sets (issue 24, item 3) ----------------------------------------------------

SETS = ("humaneval", "sharegpt", "specbench/sum")
# per set, the true effect of each factor: sft.responses helps two sets and hurts the third;
# packing helps only on sum; noise does nothing anywhere
SET_TRUE = {
    "humaneval": {"pretrain.packing": 0.0, "train.feature_noise": 0.0, "sft.responses": 0.30},
    "sharegpt": {"pretrain.packing": 0.0, "train.feature_noise": 0.0, "sft.responses": 0.15},
    "specbench/sum": {"pretrain.packing": 0.12, "train.feature_noise": 0.0, "sft.responses": -0.30},
}
HIGH = {"pretrain.packing": "isolated", "train.feature_noise": 0.2, "sft.responses": "target"}


def _set_trials(noise: float = 0.005) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for name, v in VARIANTS.items():
        for seed in range(2):
            row: dict[str, object] = {"variant": name, "state": "completed", "seed": seed}
            for s, true in SET_TRUE.items():
                y = 1.3 + sum(e * (v[f] == HIGH[f]) for f, e in true.items())
                row[f"acceptance_length/{s}"] = y + noise * rng.standard_normal()
            rows.append(row)
    return pd.DataFrame(rows)


def test_effects_per_set_and_on_the_mean_over_sets_recover_the_hand_built_ones() -> None:
    from analysis.factorial import SET_MEAN, effects_across_sets, with_set_mean

    df = _set_trials()
    across = {a.factor: a for a in effects_across_sets(df, VARIANTS)}
    assert set(across) == set(TRUE)
    for factor, a in across.items():
        assert [e.metric for e in a.per_set] == [f"acceptance_length/{s}" for s in sorted(SETS)]
        for e in a.per_set:
            true = SET_TRUE[e.metric.removeprefix("acceptance_length/")][factor]
            assert abs(e.effect - true) < 0.01 and e.n == 16  # 4 standard errors (0.0025)
            assert e.ci[0] < e.effect < e.ci[1] and e.ci[1] - e.ci[0] < 0.02
        mean_true = np.mean([SET_TRUE[s][factor] for s in SETS])
        assert a.mean.metric == SET_MEAN and abs(a.mean.effect - mean_true) < 0.01
        # OLS is linear in y: the effect on the mean over sets is the mean of the set effects
        assert a.mean.effect == pytest.approx(np.mean([e.effect for e in a.per_set]), abs=1e-12)
    responses = across["sft.responses"]  # +0.30, +0.15, -0.30: the mean (+0.05) prefers target
    assert responses.preferred == "target" and responses.resolved
    assert responses.agreeing_sets == 2 and responses.opposing_sets == 1  # sum prefers dataset
    packing = across["pretrain.packing"]  # +0.04 on the mean, from sum alone
    assert packing.preferred == "isolated" and packing.resolved and packing.agreeing_sets == 1
    assert packing.opposing_sets == 0
    assert not across["train.feature_noise"].resolved  # 0 everywhere: within the scatter
    table = with_set_mean(df)
    assert table[SET_MEAN].iloc[0] == pytest.approx(
        table.filter(like="acceptance_length/").iloc[0].mean()
    )


def test_a_trial_missing_a_set_has_no_mean_and_one_set_gives_no_comparison() -> None:
    from analysis.factorial import SET_MEAN, effects_across_sets, with_set_mean

    df = _set_trials()
    df.loc[0, "acceptance_length/sharegpt"] = float("nan")
    table = with_set_mean(df)
    assert np.isnan(table[SET_MEAN].iloc[0]) and np.isfinite(table[SET_MEAN].iloc[1:]).all()
    assert SET_MEAN not in df.columns  # a copy
    assert (
        effects_across_sets(df[["variant", "state", "acceptance_length/humaneval"]], VARIANTS) == []
    )
