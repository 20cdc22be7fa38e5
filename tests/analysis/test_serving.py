"""analysis.serving: a serving sweep's per-b speedups and the best K at each b."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.serving import (
    best_k_per_batch,
    budget_crossings,
    has_serving_speedups,
    serving_points,
)


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
    # K = 1 is the smallest K there is: no wider grid below it
    assert best.loc[4, "best_num_speculative_tokens"] == 1 and not best.loc[4, "best_k_at_edge"]
    assert best.loc[4, "speedup_by_k"] == pytest.approx({1.0: 0.90, 2.0: 0.80, 3.0: 0.40})
    assert best.loc[4, "baseline_tokens_per_s"] == pytest.approx(40.0)
    assert best.loc[1, "acceptance_length"] == pytest.approx(1.2)


def test_no_speedups_give_empty_tables() -> None:
    empty = serving_points(pd.DataFrame({"trial_key": ["a"], "state": ["completed"]}))
    assert empty.empty and "speedup" in empty.columns
    assert best_k_per_batch(empty).empty


def test_the_largest_k_best_is_at_the_edge_and_schedules_stay_apart() -> None:
    """The best K at the largest K measured is flagged (a wider grid could do better), and so
    is the smallest when it is above 1; a ``serve.schedule`` trial (K by b) never enters a fixed
    K's cell, however high its speedup."""
    sched = _trial("sched", 3, {1: 9.0, 4: 9.0})
    sched["num_speculative_tokens/b4"] = 0.0  # the schedule drafts nothing at b = 4
    df = pd.DataFrame([_trial("k2", 2, {1: 1.1, 4: 0.9}), _trial("k3", 3, {1: 1.3, 4: 0.8}), sched])
    points = serving_points(df)
    assert set(points.loc[points["schedule"], "trial_key"]) == {"sched"}
    best = best_k_per_batch(points).set_index("batch_size")
    assert best.loc[1, "best_num_speculative_tokens"] == 3 and best.loc[1, "best_k_at_edge"]
    assert best.loc[1, "speedup"] == pytest.approx(1.3) and best.loc[1, "n_trials"] == 1
    assert best.loc[4, "best_num_speculative_tokens"] == 2 and best.loc[4, "best_k_at_edge"]


def test_trials_without_a_per_b_k_take_the_grids_k() -> None:
    """Trials recorded before ``num_speculative_tokens/b{b}`` existed: K is the trial's
    ``serve.num_speculative_tokens``; without either, no best K (and no error)."""
    rows = [_trial("k1", 1, {1: 1.1}), _trial("k2", 2, {1: 1.2})]
    for r in rows:
        del r["num_speculative_tokens/b1"]
    best = best_k_per_batch(serving_points(pd.DataFrame(rows)))
    assert list(best["best_num_speculative_tokens"]) == [2.0]
    bare = pd.DataFrame(rows).drop(columns=["serve.num_speculative_tokens"])
    assert best_k_per_batch(serving_points(bare)).empty


def test_budget_crossings_fit_each_k_apart() -> None:
    """K = 1 rises with the budget and crosses 1 at 10^4.5 tokens; K = 4 stays near 0.5: one
    fit each, never one line across both."""
    rows = []
    for t in (8192, 16384, 32768, 65536, 131072):
        for k, s in ((1, 0.3 * math.log10(t) - 0.35), (4, 0.5 + 0.001 * math.log2(t))):
            row = _trial(f"{k}-{t}", k, {1: s})
            rows.append({**row, "pretrain.tokens": t})
    found = {(b, k): c for b, k, _, c in budget_crossings(serving_points(pd.DataFrame(rows)))}
    assert set(found) == {(1, 1.0), (1, 4.0)}
    assert found[(1, 1.0)].status == "ok"
    assert math.log10(found[(1, 1.0)].budget) == pytest.approx(4.5, abs=0.01)
    assert found[(1, 4.0)].extrapolated and found[(1, 4.0)].budget > 1e12  # its own, far line
