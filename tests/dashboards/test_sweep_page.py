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


def _constant_trials(value: float = 1.25) -> pd.DataFrame:
    trials = _trials()
    on_axis = trials["pretrain.tokens"] > 0
    trials.loc[on_axis & (trials["state"] == "completed"), "acceptance_length"] = value
    return trials


def test_a_constant_response_has_no_fit_line_no_aic_winner_and_no_paper_verdict(
    tmp_path: Path,
) -> None:
    trials = _constant_trials()
    review = _review(trials)
    out = write_sweep_dashboard(tmp_path / "d.html", sweep_name=SWEEP, trials=trials, review=review)
    text = out.read_text(encoding="utf-8")
    assert "no variation: every acceptance_length is 1.25" in text
    assert "no fit line" in text and "fit: a*log10(x) + b" not in text
    assert "saturating: c - A" not in text and "ΔAIC" not in text  # no saturating curve
    assert ": log-linear" not in text and ": saturating" not in text  # no AIC preference
    assert "prediction interval" not in text and "inside the" not in text  # no law claims
    assert "<td>slope ratio (ours / paper)</td><td>1</td><td>n/a</td>" in text
    assert "<td>our CI covers the paper&#39;s a</td><td></td><td>n/a (no fit)</td>" in text
    assert "e-1" not in text.split("<h2>Fit and checks</h2>")[1]  # no ~1e-16 slope anywhere


def test_pages_and_console_share_one_number_format(monkeypatch: pytest.MonkeyPatch) -> None:
    """The review table (page) and ``orchestrator fit`` (console) print the same strings,
    through analysis.numbers.fmt: "n/a" for undefined numbers."""
    import io
    from dataclasses import replace
    from types import SimpleNamespace

    from rich.console import Console

    from analysis.numbers import fmt
    from dashboards.review_tables import fit_numbers, paper_rows, review_rows
    from dashboards.sweep_page import fit_title
    from orchestrator.commands import render

    review = _review(_trials())
    f = review.fit
    rows = dict((str(k), str(v)) for k, v in review_rows(review))
    a_row = next(v for k, v in rows.items() if k.startswith("a (95% CI"))
    assert a_row == f"{fmt(f.a)} [{fmt(f.a_ci[0])}, {fmt(f.a_ci[1])}]"
    assert rows["R² / adjusted R²"] == f"{fmt(f.r2, '.3g')} / {fmt(f.r2_adj, '.3g')}"
    # an undefined number is "n/a" on the page, as on the console
    nan = float("nan")
    blank = replace(review, bootstrap=replace(review.bootstrap, a_ci=(nan, nan)))
    boot = dict((str(k), str(v)) for k, v in review_rows(blank))["a (95% bootstrap CI)"]
    assert boot.startswith("[n/a, n/a]")
    assert review.paper is not None
    ratio = next(r for r in paper_rows(review.paper) if r[0] == "slope ratio (ours / paper)")
    assert ratio[2] == fmt(review.paper.slope_ratio, ".3g")

    buf = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buf, width=400, soft_wrap=True))
    render.print_fit(SimpleNamespace(fit=f, review=blank, lines=[], baseline={}, index=None))
    console = buf.getvalue()
    assert f"a (95% bootstrap CI): {boot}" in console
    assert f"ours / paper = {ratio[2]}" in console
    assert f"fit: {f.form}: {fit_numbers(f)}" in console  # the figure title's numbers
    assert fit_numbers(f) in fit_title(f, "pretrain.tokens", "acceptance_length")


def test_the_console_gives_no_verdict_for_a_constant_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from orchestrator.commands import render

    review = _review(_constant_trials())
    buf = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buf, width=400, soft_wrap=True))
    render.print_fit(SimpleNamespace(fit=review.fit, review=review, lines=[], baseline={}))
    console = buf.getvalue()
    assert "fit: no variation: every acceptance_length is 1.25 (6 points)" in console
    for claim in ("log-linear", "saturating", "ours / paper", "covers", "inside", "e-1"):
        assert claim not in console, claim


def test_fit_tables_show_undefined_numbers_as_n_a() -> None:
    from dashboards.sweep_page import fit_rows

    review = _review(_constant_trials())
    rows = {str(k): v for k, v in fit_rows(review.fit, "7B targets")}
    assert rows["a"] == "n/a" and rows["a_ci"] == "[n/a, n/a]" and rows["r2"] == "n/a"
    assert rows["n"] == "6" and rows["alpha"] == "0.05" and rows["status"].startswith("no var")
    ok = {str(k): v for k, v in fit_rows(_review(_trials()).fit, "7B targets")}
    assert ok["a"] == format(_review(_trials()).fit.a, ".6g")


def _page(path: Path, trials: pd.DataFrame) -> str:
    return write_sweep_dashboard(path, sweep_name=SWEEP, trials=trials, review=None).read_text()


def test_the_headline_shows_near_ties_beside_mismatches(tmp_path: Path) -> None:
    trials = _trials()
    trials["mismatches"] = [0.0] * 8 + [float("nan")]  # the failed trial reports none
    trials["near_ties"] = [0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, float("nan")]
    text = _page(tmp_path / "ok.html", trials)
    assert "<strong>0 mismatches</strong> and 3 near-ties" in text and "over 8 trials" in text
    assert "class='note'>Lossless" in text
    trials.loc[3, "mismatches"] = 1.0
    text = _page(tmp_path / "bad.html", trials)
    assert "class='mismatch'>Lossless" in text and "<strong>1 mismatch</strong>" in text
    text = _page(tmp_path / "none.html", _trials())
    assert "Lossless at temperature 0" not in text  # no trial reports the check
