"""Tests of the per-sweep HTML dashboard."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.review import LawReview, review_law
from dashboards.sweep_page import fit_line, write_sweep_dashboard

SWEEP = "tokens-smoke"


def _trials() -> pd.DataFrame:
    rows = []
    for i, tokens in enumerate([0, 0, 1e4, 1e4, 3e4, 1e5, 3e5, 1e6]):
        tau = 1.02 if tokens == 0 else 0.05 * math.log10(tokens) + 0.9 + 0.01 * (i % 2)
        rows.append(
            {
                "trial_key": f"k{i:02d}",
                "state": "completed",
                "pretrain.tokens": tokens,
                "seed": i % 2,
                "acceptance_length": tau,
                "acceptance_length/humaneval": tau + 0.02,
                "acceptance_length/sharegpt": tau - 0.02,
                "error": None,
            }
        )
    rows.append(
        {
            "trial_key": "kfail",
            "state": "failed",
            "pretrain.tokens": 3e6,
            "seed": 0,
            "acceptance_length": float("nan"),
            "error": "RuntimeError: <boom> & out of memory",
        }
    )
    return pd.DataFrame(rows)


def _review(trials: pd.DataFrame) -> LawReview:
    return review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")


def _no_external_scripts(text: str) -> None:
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, flags=re.IGNORECASE)
    assert '<script src="https://cdn' not in text


def test_writes_self_contained_page_with_fit(tmp_path: Path) -> None:
    trials = _trials()
    review = _review(trials)
    fit = review.fit
    out = write_sweep_dashboard(
        tmp_path / "s" / "dashboard.html", sweep_name=SWEEP, trials=trials, review=review
    )
    assert out == tmp_path / "s" / "dashboard.html" and out.is_file()
    text = out.read_text(encoding="utf-8")
    assert fit.form in text
    line = fit_line(fit)
    assert line["x"].iloc[0] == 1e4 and line["x"].iloc[-1] == 1e6
    for value in line["mean"].iloc[[0, len(line) // 2, -1]]:
        assert repr(float(value)) in text
    assert repr(float(line["mean_hi"].iloc[0])) in text
    assert "SFT-only baseline" in text
    assert "kfail" in text and "&lt;boom&gt; &amp; out of memory" in text
    assert "<boom>" not in text
    assert "humaneval" in text and "sharegpt" in text
    _no_external_scripts(text)
    assert text.count("Plotly.newPlot") == 3  # fit, residuals, per prompt set (no loss curves)
    assert "prediction interval" in text and "HC3" in text and "bootstrap" in text
    assert "The paper beside us" in text and "slope ratio" in text


def test_fit_none(tmp_path: Path) -> None:
    out = write_sweep_dashboard(
        tmp_path / "d.html", sweep_name=SWEEP, trials=_trials(), review=None
    )
    text = out.read_text(encoding="utf-8")
    assert "no fit" in text
    _no_external_scripts(text)


def test_not_ok_fit_says_so_and_has_no_line(tmp_path: Path) -> None:
    trials = _trials()
    trials = trials[trials["pretrain.tokens"].isin([0, 1e4, 3e4])]
    review = _review(trials)
    assert not review.fit.ok
    out = write_sweep_dashboard(tmp_path / "d.html", sweep_name=SWEEP, trials=trials, review=review)
    text = out.read_text(encoding="utf-8")
    assert "no fit line" in text
    assert "not enough points" in text
    assert "fit: a*log10(x) + b" not in text


def test_sweep_name_is_escaped(tmp_path: Path) -> None:
    trials = _trials()
    name = "<script>alert(1)</script>"
    out = write_sweep_dashboard(
        tmp_path / "d.html", sweep_name=name, trials=trials, review=_review(trials)
    )
    text = out.read_text(encoding="utf-8")
    assert name not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_minimal_table_without_error_or_per_set_columns(tmp_path: Path) -> None:
    trials = pd.DataFrame(
        {
            "trial_key": ["a", "b", "c"],
            "state": ["completed", "completed", "cancelled"],
            "pretrain.tokens": [1e3, 1e4, 1e5],
            "acceptance_length": [1.0, 1.1, None],
        }
    )
    out = write_sweep_dashboard(tmp_path / "d.html", sweep_name=SWEEP, trials=trials, review=None)
    text = out.read_text(encoding="utf-8")
    assert "acceptance_length per prompt set" not in text  # no law page: no empty sections
    assert "SFT-only baseline" not in text and "Training loss" not in text
    assert "cancelled" in text


@pytest.mark.parametrize("n_base", [1, 2])
def test_baseline_only(tmp_path: Path, n_base: int) -> None:
    trials = pd.DataFrame(
        {
            "trial_key": [f"b{i}" for i in range(n_base)],
            "state": ["completed"] * n_base,
            "pretrain.tokens": [0] * n_base,
            "acceptance_length": [1.0 + 0.1 * i for i in range(n_base)],
        }
    )
    review = review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")
    out = write_sweep_dashboard(tmp_path / "d.html", sweep_name=SWEEP, trials=trials, review=review)
    assert "SFT-only baseline" in out.read_text(encoding="utf-8")
