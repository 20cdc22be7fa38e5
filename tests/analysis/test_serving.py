"""analysis.serving: a serving sweep's per-b speedups and the best K at each b."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.serving import best_k_per_batch, has_serving_speedups, serving_points


def _trial(key: str, k: int, speedups: dict[int, float], state: str = "completed") -> dict:
    row: dict = {"trial_key": key, "state": state, "serve.num_speculative_tokens": k}
    for b, s in speedups.items():
        row[f"speedup/b{b}"] = s
        row[f"num_speculative_tokens/b{b}"] = float(k)
        row[f"baseline.tokens_per_s/b{b}"] = 10.0 * b
        row[f"tokens_per_s/b{b}"] = s * 10.0 * b
        row[f"bench.acceptance_length/b{b}"] = 1.0 + 0.1 * k
    return row


def test_best_k_per_b_is_the_highest_mean_speedup_smaller_k_on_a_tie() -> None:
    df = pd.DataFrame(
        [
            _trial("k1", 1, {1: 1.10, 4: 0.90}),
            _trial("k2a", 2, {1: 1.30, 4: 0.80}),
            _trial("k2b", 2, {1: 1.10, 4: 0.80}),  # K = 2 at b = 1: mean 1.20
            _trial("k3", 3, {1: 1.20, 4: 0.70}),  # ties K = 2 at b = 1: the smaller K wins
            _trial("bad", 1, {1: 9.0, 4: 9.0}, state="failed"),
            _trial("nan", 3, {1: math.nan, 4: 0.10}),
        ]
    )
    assert has_serving_speedups(df) and not has_serving_speedups(df[["trial_key", "state"]])
    points = serving_points(df)
    assert "bad" not in set(points["trial_key"])  # failed trials never count
    assert len(points) == 9  # 5 completed trials x 2 b, less the NaN speedup
    best = best_k_per_batch(points).set_index("batch_size")
    assert best.loc[1, "best_num_speculative_tokens"] == 2
    assert best.loc[1, "speedup"] == pytest.approx(1.20)
    assert best.loc[1, "speedup_std"] == pytest.approx(math.sqrt(0.02))
    assert best.loc[1, "n_trials"] == 2 and best.loc[1, "n_k"] == 3
    assert not best.loc[1, "best_k_at_edge"]
    assert best.loc[4, "best_num_speculative_tokens"] == 1 and best.loc[4, "best_k_at_edge"]
    assert best.loc[4, "speedup_by_k"] == pytest.approx({1.0: 0.90, 2.0: 0.80, 3.0: 0.40})
    assert best.loc[4, "baseline_tokens_per_s"] == pytest.approx(40.0)
    assert best.loc[1, "acceptance_length"] == pytest.approx(1.2)


def test_no_speedups_give_empty_tables() -> None:
    empty = serving_points(pd.DataFrame({"trial_key": ["a"], "state": ["completed"]}))
    assert empty.empty and "speedup" in empty.columns
    assert best_k_per_batch(empty).empty
