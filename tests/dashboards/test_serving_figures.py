"""Serving-sweep figures: agreement with CIs and the flag, throughput against batch size."""

from __future__ import annotations

import pandas as pd

from dashboards.serving import agreement_figure, serving_figures, throughput_figure


def _trials() -> pd.DataFrame:
    rows = []
    for tokens, vllm, ours, flag in ((8192, 1.20, 1.21, 0.0), (32768, 1.30, 1.29, 0.0),
                                     (131072, 1.50, 1.30, 1.0)):  # fmt: skip
        rows.append({
            "pretrain.tokens": tokens, "state": "completed",
            "acceptance_length": vllm, "acceptance_length_ci_low": vllm - 0.05,
            "acceptance_length_ci_high": vllm + 0.05, "engine.acceptance_length": ours,
            "engine.acceptance_length_ci_low": ours - 0.05,
            "engine.acceptance_length_ci_high": ours + 0.05, "agreement.disjoint": flag,
            "tokens_per_s/b1": 10.0, "tokens_per_s/b4": 30.0, "baseline.tokens_per_s/b1": 12.0,
            "baseline.tokens_per_s/b4": 40.0, "speedup/b1": 10 / 12, "speedup/b4": 0.75,
        })  # fmt: skip
    return pd.DataFrame(rows)


def test_agreement_marks_the_disjoint_trial_and_labels_both_laws() -> None:
    fig = agreement_figure(_trials())
    assert fig is not None
    names = [t.name for t in fig.data]
    assert names[0].startswith("vLLM: a = ") and names[1].startswith("this engine: a = ")
    flagged = [t for t in fig.data if t.name.startswith("CIs disjoint (1)")]
    assert len(flagged) == 1 and list(flagged[0].x) == [131072]
    assert list(fig.data[0].error_y.array) == [0.05, 0.05, 0.05] or all(
        abs(v - 0.05) < 1e-9 for v in fig.data[0].error_y.array
    )


def test_throughput_has_the_baseline_and_each_budget_per_batch_size() -> None:
    fig = throughput_figure(_trials())
    assert fig is not None
    base = next(t for t in fig.data if t.name.startswith("vLLM, no draft"))
    assert list(base.x) == [1, 4] and list(base.y) == [12.0, 40.0]
    assert sum(t.name.startswith("speedup, ") for t in fig.data) == 3


def test_other_sweeps_get_no_serving_figures() -> None:
    df = pd.DataFrame({"pretrain.tokens": [1, 2], "acceptance_length": [1.0, 1.1]})
    assert serving_figures(df) == []
    assert len(serving_figures(_trials())) == 2
