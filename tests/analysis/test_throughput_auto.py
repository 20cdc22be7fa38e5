"""Batch-adaptive k (``num_draft_tokens: auto``) in the batch-sweep analysis: kept out of the
fixed-k surface, best k and fits; set beside the best fixed k per batch size."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.eq4 import fit_k_opt
from analysis.throughput import (
    AUTO_COLUMNS,
    auto_vs_best,
    best_per_batch,
    decode_table,
    fit_peak_throughput,
    throughput_surface,
)
from tests.analysis.test_throughput import _sweep

AUTO_TPS = {1: 12.0, 2: 95.0, 4: 300.0, 8: 250.0}
"""auto throughput per b: wins at b = 1 and 4, loses at b = 2 and 8 (best fixed: 10, 110, 210,
310 tokens/s in the synthetic sweep at b = 1, 2, 4, 8)"""

AUTO_K = {1: 31.6, 2: 12.0, 4: 8.2, 8: 3.0}
"""mean k per cycle of the auto trials"""


def _auto_rows(seeds: tuple[int, ...] = (0, 1)) -> list[dict]:
    rows = []
    for b, tps in AUTO_TPS.items():
        for seed in seeds:
            jitter = 0.0 if len(seeds) == 1 else (2.0 if seed % 2 else -2.0)
            rows.append(
                {
                    "trial_key": f"b{b}auto{seed}",
                    "state": "completed",
                    "batch_size": b,
                    "num_draft_tokens": "auto",
                    "depth": 4,
                    "topk": 4,
                    "seed": seed,
                    "tokens_per_s": tps + jitter,
                    "ar_tokens_per_s": 50.0 * b,
                    "speedup": (tps + jitter) / (50.0 * b),
                    "hf_tokens_per_s": math.nan,
                    "acceptance_length": 2.5,
                    "num_draft_tokens_mean": AUTO_K[b],
                }
            )
    rows.append(  # a failed auto trial at b = 16, where no auto trial completed
        {
            "trial_key": "b16auto-fail",
            "state": "failed",
            "batch_size": 16,
            "num_draft_tokens": "auto",
            "seed": 0,
            "tokens_per_s": math.nan,
        }
    )
    rows.append(  # a pending one at b = 32: no row
        {"trial_key": "b32auto", "state": "pending", "batch_size": 32, "num_draft_tokens": "auto"}
    )
    return rows


def _mixed() -> pd.DataFrame:
    return pd.concat([_sweep(), pd.DataFrame(_auto_rows())], ignore_index=True)


def test_decode_table_marks_auto_and_its_k_is_nan() -> None:
    table = decode_table(_mixed())
    assert table["k_auto"].dtype == bool
    assert table["k_auto"].sum() == 2 * len(AUTO_TPS) + 2
    assert table.loc[table["k_auto"], "num_draft_tokens"].isna().all()
    assert table.loc[~table["k_auto"], "num_draft_tokens"].notna().all()


def test_auto_trials_change_nothing_in_the_fixed_k_analysis() -> None:
    fixed, mixed = _sweep(), _mixed()
    pd.testing.assert_frame_equal(throughput_surface(fixed), throughput_surface(mixed))
    best_fixed, best_mixed = best_per_batch(fixed), best_per_batch(mixed)
    pd.testing.assert_frame_equal(best_fixed, best_mixed)  # n_failed too: auto failures apart
    assert fit_peak_throughput(best_mixed).a == pytest.approx(fit_peak_throughput(best_fixed).a)
    eq4_mixed, eq4_fixed = fit_k_opt(best_mixed).eq4, fit_k_opt(best_fixed).eq4
    assert eq4_mixed.ok and eq4_mixed.to_dict() == eq4_fixed.to_dict()


def test_auto_vs_best_per_batch_size() -> None:
    mixed = _mixed()
    out = auto_vs_best(mixed)
    assert list(out.columns) == list(AUTO_COLUMNS)
    assert out["batch_size"].tolist() == [1, 2, 4, 8, 16]
    best = best_per_batch(mixed).set_index("batch_size")
    rows = out.set_index("batch_size")
    for b, tps in AUTO_TPS.items():
        row = rows.loc[b]
        assert row["auto_tokens_per_s"] == pytest.approx(tps)
        assert row["auto_tokens_per_s_std"] == pytest.approx(np.std([tps - 2, tps + 2], ddof=1))
        assert row["best_num_draft_tokens"] == best.loc[b, "best_num_draft_tokens"]
        assert row["best_tokens_per_s"] == pytest.approx(best.loc[b, "peak_tokens_per_s"])
        assert row["ratio"] == pytest.approx(tps / best.loc[b, "peak_tokens_per_s"])
        assert row["auto_k_mean"] == pytest.approx(AUTO_K[b])
        assert row["auto_speedup"] == pytest.approx(tps / (50.0 * b))
        assert row["n_auto"] == 2 and row["n_auto_failed"] == 0
    assert rows["auto_wins"].to_dict() == {1: True, 2: False, 4: True, 8: False, 16: False}
    # the fixed-k trials at the k auto used (rounded): b=1 k=32, b=2 k=12 (not measured), ...
    surface = throughput_surface(mixed)
    assert rows.loc[1, "fixed_at_auto_k_tokens_per_s"] == pytest.approx(surface.loc[1, 32])
    assert math.isnan(rows.loc[2, "fixed_at_auto_k_tokens_per_s"])
    assert rows.loc[4, "fixed_at_auto_k_tokens_per_s"] == pytest.approx(surface.loc[4, 8])
    failed = rows.loc[16]
    assert failed["n_auto"] == 0 and failed["n_auto_failed"] == 1
    assert math.isnan(failed["auto_tokens_per_s"]) and math.isnan(failed["ratio"])


def test_auto_vs_best_without_fixed_k_or_without_auto() -> None:
    only_auto = pd.DataFrame(_auto_rows(seeds=(0,)))
    out = auto_vs_best(only_auto)
    assert out["n_auto"].tolist() == [1, 1, 1, 1, 0]
    assert out["best_tokens_per_s"].isna().all() and out["ratio"].isna().all()
    assert not out["auto_wins"].any() and out["auto_tokens_per_s_std"].isna().all()
    assert best_per_batch(only_auto).empty
    empty = auto_vs_best(_sweep())
    assert empty.empty and list(empty.columns) == list(AUTO_COLUMNS)


def test_auto_vs_best_reads_dotted_store_names_and_missing_k_metric() -> None:
    df = _mixed().drop(columns=["num_draft_tokens_mean"])
    df = df.rename(
        columns={"batch_size": "decode.batch_size", "num_draft_tokens": "decode.num_draft_tokens"}
    )
    out = auto_vs_best(df)
    assert out["batch_size"].tolist() == [1, 2, 4, 8, 16]
    assert out["auto_k_mean"].isna().all() and out["fixed_at_auto_k_tokens_per_s"].isna().all()
