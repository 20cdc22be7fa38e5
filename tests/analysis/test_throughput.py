"""Tests of the batch-size sweep analysis (Scylla, arXiv 2505.07858, Thm 1.3 and Eq. 4)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from analysis.eq4 import PAPER_K_OPT, fit_eq4, fit_k_opt
from analysis.paper import PAPER_CONSTANTS
from analysis.throughput import (
    BEST_COLUMNS,
    RooflineData,
    best_per_batch,
    compare_k_opt,
    decode_table,
    fit_peak_throughput,
    throughput_surface,
)

BATCHES = [1, 2, 4, 8, 16, 32]
KS = [2, 4, 8, 16, 32]
BEST_K = {1: 32, 2: 16, 4: 16, 8: 8, 16: 4, 32: 4}
"""the k that wins at each b in the synthetic sweep"""


def _peak(b: int) -> float:
    """Thm 1.3 with a = 100, b0 = 10: tokens/s at the best k."""
    return 100.0 * math.log2(b) + 10.0


def _sweep(seeds: tuple[int, ...] = (0, 1)) -> pd.DataFrame:
    """A b x k x seed grid whose mean tokens/s is exactly _peak(b) at BEST_K[b], lower elsewhere.

    Seeds are +-1 tokens/s around the mean; every other k loses 3 tokens/s per octave of k away
    from the best one. Two failed trials (NaN metrics) sit at b = 1 and b = 32.
    """
    rows = []
    for b in BATCHES:
        for k in KS:
            for seed in seeds:
                jitter = 0.0 if len(seeds) == 1 else (1.0 if seed % 2 else -1.0)
                tps = _peak(b) - 3.0 * abs(math.log2(k / BEST_K[b])) + jitter
                ar = 50.0 * b
                rows.append(
                    {
                        "trial_key": f"b{b}k{k}s{seed}",
                        "state": "completed",
                        "batch_size": b,
                        "num_draft_tokens": k,
                        "depth": 4,
                        "topk": 4,
                        "seed": seed,
                        "tokens_per_s": tps,
                        "ar_tokens_per_s": ar,
                        "speedup": tps / ar,
                        "hf_tokens_per_s": 9.4 if b == 1 else math.nan,
                        "acceptance_length": 1.0 + k / 100.0,
                    }
                )
    for b in (1, 32):
        rows.append(
            {
                "trial_key": f"fail{b}",
                "state": "failed",
                "batch_size": b,
                "num_draft_tokens": 64,
                "depth": 4,
                "topk": 4,
                "seed": 0,
                "tokens_per_s": math.nan,
                "ar_tokens_per_s": math.nan,
                "speedup": math.nan,
                "hf_tokens_per_s": math.nan,
                "acceptance_length": math.nan,
            }
        )
    return pd.DataFrame(rows)


def _best_frame(bs: list[float], ks: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"batch_size": bs, "best_num_draft_tokens": ks})


# -- surface -----------------------------------------------------------------------------------


def test_surface_is_mean_over_seeds_of_completed_trials() -> None:
    surface = throughput_surface(_sweep())
    assert surface.index.name == "batch_size" and surface.columns.name == "num_draft_tokens"
    assert surface.index.tolist() == BATCHES
    assert surface.columns.tolist() == KS  # the failed k = 64 trials leave no column
    for b in BATCHES:
        assert surface.loc[b, BEST_K[b]] == pytest.approx(_peak(b))
    assert surface.loc[4, 2] == pytest.approx(_peak(4) - 3.0 * 3)


def test_surface_pools_depth_and_topk_and_ignores_other_states() -> None:
    df = pd.DataFrame(
        {
            "state": ["completed", "completed", "completed", "failed", "cancelled"],
            "batch_size": [2, 2, 2, 2, 2],
            "num_draft_tokens": [8, 8, 8, 8, 8],
            "depth": [2, 4, 6, 4, 4],
            "topk": [2, 4, 8, 4, 4],
            "tokens_per_s": [10.0, 20.0, float("nan"), 1000.0, 1000.0],
        }
    )
    surface = throughput_surface(df)
    assert surface.shape == (1, 1)
    assert surface.loc[2, 8] == pytest.approx(15.0)


def test_surface_of_another_metric_and_of_only_failed_trials() -> None:
    df = _sweep()
    speed = throughput_surface(df, "speedup")
    assert speed.loc[1, 32] == pytest.approx(_peak(1) / 50.0)
    empty = throughput_surface(df[df["state"] == "failed"])
    assert empty.empty and empty.index.name == "batch_size"


def test_dotted_store_names_are_accepted_and_missing_columns_raise() -> None:
    df = _sweep().rename(
        columns={"batch_size": "decode.batch_size", "num_draft_tokens": "decode.num_draft_tokens"}
    )
    assert "batch_size" in decode_table(df).columns
    assert "batch_size" not in df.columns  # the input is not modified
    assert throughput_surface(df).loc[8, 8] == pytest.approx(_peak(8))
    with pytest.raises(ValueError, match="num_draft_tokens"):
        throughput_surface(pd.DataFrame({"batch_size": [1], "tokens_per_s": [1.0]}))
    with pytest.raises(ValueError, match="not in the trial table"):
        throughput_surface(_sweep(), "no_such_metric")


# -- best per batch ----------------------------------------------------------------------------


def test_best_per_batch_finds_the_best_k_and_its_metrics() -> None:
    best = best_per_batch(_sweep())
    assert list(best.columns) == list(BEST_COLUMNS)
    assert best["batch_size"].tolist() == BATCHES
    assert dict(zip(best["batch_size"], best["best_num_draft_tokens"], strict=True)) == BEST_K
    assert best["peak_tokens_per_s"].to_numpy() == pytest.approx([_peak(b) for b in BATCHES])
    assert best["peak_tokens_per_s_std"].to_numpy() == pytest.approx([math.sqrt(2)] * 6)
    assert best["ar_tokens_per_s"].to_numpy() == pytest.approx([50.0 * b for b in BATCHES])
    assert best["speedup"].to_numpy() == pytest.approx([_peak(b) / (50.0 * b) for b in BATCHES])
    k_best = np.array([BEST_K[b] for b in BATCHES], dtype=float)
    assert best["acceptance_length"].to_numpy() == pytest.approx(1.0 + k_best / 100.0)
    assert best["best_depth"].tolist() == [4.0] * 6 and best["best_topk"].tolist() == [4.0] * 6
    assert best["n_trials"].tolist() == [2] * 6
    assert best["n_completed"].tolist() == [10] * 6
    assert best["n_failed"].tolist() == [1, 0, 0, 0, 0, 1]
    assert best["n_k"].tolist() == [5] * 6
    # b = 1 peaks at the largest k measured (32); the other optima lie inside the grid.
    assert best["best_k_at_edge"].tolist() == [True, False, False, False, False, False]
    hf = best["hf_tokens_per_s"].tolist()
    assert hf[0] == pytest.approx(9.4) and all(math.isnan(v) for v in hf[1:])


def test_best_cell_includes_tree_shape() -> None:
    df = pd.DataFrame(
        {
            "state": ["completed"] * 5,
            "batch_size": [4] * 5,
            "num_draft_tokens": [8, 8, 8, 16, 16],
            "depth": [2, 6, 6, 2, 6],
            "topk": [4, 4, 4, 4, 4],
            "seed": [0, 0, 1, 0, 0],
            "tokens_per_s": [50.0, 70.0, 66.0, 60.0, 61.0],
        }
    )
    best = best_per_batch(df)
    row = best.iloc[0]
    assert row["best_num_draft_tokens"] == 8 and row["best_depth"] == 6.0
    assert row["peak_tokens_per_s"] == pytest.approx(68.0)
    assert row["n_trials"] == 2 and row["n_completed"] == 5
    assert math.isnan(row["ar_tokens_per_s"])  # no such column: NaN, not an error


def test_best_per_batch_ties_pick_the_smallest_k_and_missing_shape_is_nan() -> None:
    df = pd.DataFrame(
        {
            "batch_size": [1, 1, 1],
            "num_draft_tokens": [16, 4, 8],
            "tokens_per_s": [5.0, 5.0, 4.0],
        }
    )
    best = best_per_batch(df)
    assert best["best_num_draft_tokens"].tolist() == [4]
    assert math.isnan(best["best_depth"].iloc[0]) and math.isnan(best["best_topk"].iloc[0])
    assert bool(best["best_k_at_edge"].iloc[0])


def test_best_per_batch_of_only_failed_trials_is_empty_with_columns() -> None:
    df = _sweep()
    best = best_per_batch(df[df["state"] == "failed"])
    assert best.empty and list(best.columns) == list(BEST_COLUMNS)
    fit = fit_peak_throughput(best)
    assert not fit.ok and fit.status.endswith("got 0")
    k_fit = fit_k_opt(best)
    assert k_fit.eq4.status.startswith("too few points") and not k_fit.log2.ok


# -- Thm 1.3 -----------------------------------------------------------------------------------


def test_peak_fit_recovers_a_and_b0_exactly() -> None:
    fit = fit_peak_throughput(best_per_batch(_sweep()))
    assert fit.ok
    assert fit.a == pytest.approx(100.0, abs=1e-9)
    assert fit.b == pytest.approx(10.0, abs=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.n == len(BATCHES)
    assert fit.law == "batch" and fit.log_base == 2
    assert fit.form == "peak_tokens_per_s = a*log2(batch_size) + b"
    assert fit.a_ci[0] == pytest.approx(100.0) and fit.a_ci[1] == pytest.approx(100.0)


def test_peak_fit_with_noise_has_cis_around_truth() -> None:
    rng = np.random.default_rng(3)
    bs = [1, 2, 4, 8, 16, 32, 64, 128]
    peaks = [286.79 * math.log2(b) + 7.54 + rng.normal(0, 20) for b in bs]
    best = pd.DataFrame({"batch_size": bs, "peak_tokens_per_s": peaks})
    fit = fit_peak_throughput(best)
    assert fit.a_ci[0] < 286.79 < fit.a_ci[1]
    assert 0.99 < fit.r2 < 1.0
    assert PAPER_CONSTANTS["batch"]["a"] == 286.79 and PAPER_CONSTANTS["batch"]["b"] == 7.54


def test_peak_fit_with_two_batch_sizes_is_a_status() -> None:
    df = _sweep()
    best = best_per_batch(df[df["batch_size"].isin([1, 2])])
    fit = fit_peak_throughput(best)
    assert not fit.ok and "not enough points" in fit.status and math.isnan(fit.a)


# -- Eq. 4 -------------------------------------------------------------------------------------


def test_eq4_recovers_known_parameters() -> None:
    bs = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    ks = [10.0 * math.sqrt(1.0 + 8.0 / b) - 2.0 for b in bs]
    fit = fit_k_opt(_best_frame(bs, ks))
    eq4 = fit.eq4
    assert eq4.ok
    params = [eq4.A, eq4.B, eq4.C]
    assert params == pytest.approx([10.0, 8.0, 2.0], rel=1e-6)
    assert eq4.r2 == pytest.approx(1.0)
    assert eq4.predict([1.0, 0.0]).tolist()[0] == pytest.approx(28.0, rel=1e-6)
    assert math.isnan(eq4.predict([0.0])[0])
    json.dumps(fit.to_dict(), allow_nan=False)


def test_eq4_recovers_the_papers_constants() -> None:
    bs = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    p = PAPER_K_OPT
    ks = [p["A"] * math.sqrt(1.0 + p["B"] / b) - p["C"] for b in bs]
    assert ks[0] == pytest.approx(477, abs=1) and ks[-1] == pytest.approx(14, abs=1)
    eq4 = fit_k_opt(_best_frame(bs, ks)).eq4
    assert eq4.ok
    params = [eq4.A, eq4.B, eq4.C]
    assert params == pytest.approx([27904, 0.034, 27897], rel=1e-3)


def test_fit_eq4_on_arrays_recovers_the_paper_to_a_twentieth_of_a_token() -> None:
    bs = [1, 2, 4, 8, 16, 32, 64]
    p = PAPER_K_OPT
    ks = [p["A"] * math.sqrt(1.0 + p["B"] / b) - p["C"] for b in bs]
    eq4 = fit_eq4(bs, ks)
    assert eq4.ok and eq4.r2 > 0.999999 and eq4.n == len(bs)
    assert eq4.predict(bs).tolist() == pytest.approx(ks, abs=0.05)
    assert fit_eq4([1, 2, 4], [10, 5, 3]).status.startswith("too few points")
    with pytest.raises(ValueError, match="batch_sizes has 2 values but ks has 1"):
        fit_eq4([1, 2], [10])


def test_fit_eq4_of_the_rooflines_k_opt_is_pinned() -> None:
    """Regression: the roofline's k_opt (Qwen2.5-72B, H800, s = 10K) fits as it always did."""
    eq4 = fit_eq4([1, 2, 4, 8, 16, 32, 64], [290, 149, 78, 42, 24, 15, 11])
    # A and C nearly cancel (A - C = 6.2), so the optimiser's last digits move with the BLAS
    # build (10639.3 / 10633.1 before, 10639.1 / 10632.9 with scipy 1.17 here): 1e-4 relative
    fitted = [eq4.A, eq4.B, eq4.C]
    assert fitted == pytest.approx([10639.3, 0.05406, 10633.1], rel=1e-4)
    assert eq4.r2 == pytest.approx(0.999997, abs=1e-6)


def test_eq4_noisy_intervals_contain_the_truth() -> None:
    rng = np.random.default_rng(11)
    bs = np.repeat([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0], 1)
    ks = 10.0 * np.sqrt(1.0 + 8.0 / bs) - 2.0 + rng.normal(0, 0.05, size=bs.size)
    eq4 = fit_k_opt(_best_frame(bs.tolist(), ks.tolist())).eq4
    assert eq4.ok
    assert eq4.A_ci[0] < 10.0 < eq4.A_ci[1]
    assert eq4.B_ci[0] < 8.0 < eq4.B_ci[1]
    assert eq4.C_ci[0] < 2.0 < eq4.C_ci[1]


@pytest.mark.parametrize("n_b", [1, 2, 3])
def test_eq4_with_three_or_fewer_batch_sizes_is_too_few_points(n_b: int) -> None:
    bs = [1.0, 2.0, 4.0][:n_b]
    fit = fit_k_opt(_best_frame(bs * 2, [16.0, 8.0, 4.0][:n_b] * 2))
    assert fit.eq4.status == (
        f"too few points: Eq. 4 has 3 parameters and needs >= 4 distinct batch sizes, got {n_b}"
    )
    assert math.isnan(fit.eq4.A) and math.isnan(fit.eq4.r2)
    assert np.isnan(fit.eq4.predict([1.0, 2.0])).all()
    assert fit.log2.ok == (n_b == 3)


def test_eq4_same_k_everywhere_is_not_identifiable_but_log2_fits() -> None:
    fit = fit_k_opt(_best_frame([1, 2, 4, 8, 16], [4, 4, 4, 4, 4]))
    assert fit.eq4.status.startswith("not identifiable")
    assert math.isnan(fit.eq4.A)
    assert fit.log2.ok and fit.log2.a == pytest.approx(0.0, abs=1e-12)
    assert fit.log2.b == pytest.approx(4.0)


def test_eq4_optimiser_failure_is_did_not_converge(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Optimal parameters not found: max_nfev exceeded")

    monkeypatch.setattr(optimize, "curve_fit", fail)
    fit = fit_k_opt(_best_frame([1, 2, 4, 8], [30, 20, 12, 8]))
    assert fit.eq4.status == "did not converge: Optimal parameters not found: max_nfev exceeded"
    assert math.isnan(fit.eq4.B)


def test_log2_k_fit_of_measured_best_k() -> None:
    best = best_per_batch(_sweep())
    fit = fit_k_opt(best)
    assert fit.log2.law == "k_opt" and fit.log2.log_base == 2
    # BEST_K halves roughly per octave-and-a-half: the slope is negative.
    assert fit.log2.ok and fit.log2.a < 0
    assert fit.eq4.n == len(BATCHES)


def test_k_fit_needs_best_columns() -> None:
    with pytest.raises(ValueError, match="best_per_batch"):
        fit_k_opt(pd.DataFrame({"batch_size": [1, 2, 4]}))


# -- roofline comparison -----------------------------------------------------------------------


def test_compare_k_opt() -> None:
    best = _best_frame([1, 2, 4, 8], [32, 16, 16, 8]).astype("int64")
    table = compare_k_opt(best, {1: 16.0, 2: 0.0, 4: float("inf"), 16: 2.0})
    assert table.columns.tolist() == ["batch_size", "measured_k", "predicted_k_opt", "ratio"]
    assert table["batch_size"].tolist() == [1, 2, 4, 8]
    assert table["ratio"].iloc[0] == pytest.approx(2.0)
    assert table["predicted_k_opt"].iloc[1] == 0.0 and math.isnan(table["ratio"].iloc[1])
    assert math.isnan(table["ratio"].iloc[2])
    assert math.isnan(table["predicted_k_opt"].iloc[3]) and math.isnan(table["ratio"].iloc[3])
    assert compare_k_opt(best.iloc[:0], {1: 2.0}).empty


def test_roofline_data_checks_its_table() -> None:
    good = pd.DataFrame({"batch_size": [1], "num_draft_tokens": [8], "intensity": [3.0]})
    data = RooflineData(hardware="cpu", i_crit=3.2, intensity=good, k_opt={1: 8.0})
    assert data.k_opt[1] == 8.0
    with pytest.raises(ValueError, match="intensity"):
        RooflineData(hardware="cpu", i_crit=3.2, intensity=good.drop(columns="intensity"), k_opt={})


def test_trial_without_a_shape_knob_is_its_own_cell() -> None:
    df = pd.DataFrame(
        {
            "batch_size": [2, 2, 2],
            "num_draft_tokens": [8, 8, 8],
            "depth": [4.0, 4.0, math.nan],
            "tokens_per_s": [10.0, 12.0, 30.0],
        }
    )
    best = best_per_batch(df)
    assert best["peak_tokens_per_s"].tolist() == [30.0]
    assert math.isnan(best["best_depth"].iloc[0]) and best["n_trials"].tolist() == [1]
    assert best["n_completed"].tolist() == [3]
