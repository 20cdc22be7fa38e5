"""The batch-sweep dashboard with ``num_draft_tokens: auto`` trials: their own section (where
adaptive k beats the best fixed k and where it loses), kept out of the fixed-k figures."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.eq4 import fit_k_opt
from analysis.throughput import best_per_batch, fit_peak_throughput
from dashboards.decode_page import AUTO_TITLE, TITLES, write_decode_dashboard
from tests.dashboards.test_decode_page import BATCHES, _roofline, _trials

AUTO_TPS = {1: 12.0, 2: 90.0, 4: 215.0, 8: 250.0}
"""auto tokens/s per b; the best fixed k gives 10, 110, 210, 310 (+0.25 mean over seeds)"""


def _with_auto(*, failed_at: int | None = 16) -> pd.DataFrame:
    rows = [
        {
            "trial_key": f"b{b}auto",
            "state": "completed",
            "batch_size": b,
            "num_draft_tokens": "auto",
            "depth": 3,
            "topk": 2,
            "seed": 0,
            "tokens_per_s": tps,
            "ar_tokens_per_s": 40.0 * b,
            "speedup": tps / (40.0 * b),
            "acceptance_length": 1.3,
            "num_draft_tokens_mean": 16.0 / b,
            "error": None,
        }
        for b, tps in AUTO_TPS.items()
    ]
    if failed_at is not None:
        rows.append(
            {
                "trial_key": "autofail",
                "state": "failed",
                "batch_size": failed_at,
                "num_draft_tokens": "auto",
                "tokens_per_s": math.nan,
                "error": "RuntimeError: <b>boom</b>",
            }
        )
    return pd.concat([_trials(), pd.DataFrame(rows)], ignore_index=True)


def _write(tmp_path: Path, trials: pd.DataFrame) -> str:
    best = best_per_batch(trials)
    out = write_decode_dashboard(
        tmp_path / "dashboard.html",
        sweep_name="batch",
        trials=trials,
        best=best,
        peak_fit=fit_peak_throughput(best),
        k_fit=fit_k_opt(best),
        roofline=_roofline(),
    )
    return out.read_text(encoding="utf-8")


def test_auto_section_says_where_adaptive_k_wins_and_loses(tmp_path: Path) -> None:
    text = _write(tmp_path, _with_auto())
    assert f"<h2>{AUTO_TITLE}</h2>" in text
    for title in TITLES.values():
        assert f"<h2>{title}</h2>" in text
    assert text.count("Plotly.newPlot") == 6 and text.count("plotly.js v") == 1
    assert "Adaptive k beats the best fixed k at b = 1, 4; it loses at b = 2, 8; no " in text
    assert "no comparison at b = 16." in text
    assert "auto: mean k per cycle" in text  # drawn on the best-k figure
    assert "5 trials ran with num_draft_tokens: auto" in text
    assert "&lt;b&gt;boom&lt;/b&gt;" in text and "<b>boom</b>" not in text
    # the section's table: b = 4 wins by 215 / 210.25, b = 16 has n/a cells
    section = text.split(f"<h2>{AUTO_TITLE}</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<td>wins</td>" in section and "<td>loses</td>" in section
    assert f"<td>{215 / 210.25:.3f}</td>" in section
    assert "<td>0 (1)</td>" in section and "<td>n/a</td>" in section


def test_auto_trials_leave_the_fixed_k_figures_alone(tmp_path: Path) -> None:
    with_auto = _write(tmp_path, _with_auto())
    without = _write(tmp_path, _trials())
    assert AUTO_TITLE not in without and "num_draft_tokens: auto" not in without
    best_table = "<h2>Best configuration per batch size</h2>"
    assert (
        with_auto.split(best_table)[1].split("<h2>")[1]
        == without.split(best_table)[1].split("<h2>")[1]
    )
    assert with_auto.count("Plotly.newPlot") == without.count("Plotly.newPlot") + 1


def test_only_auto_trials_have_no_ratio_but_a_page(tmp_path: Path) -> None:
    trials = _with_auto(failed_at=None)
    trials = trials[trials["num_draft_tokens"] == "auto"]
    text = _write(tmp_path, trials)
    assert "No auto trial has both a throughput and a fixed k." in text
    assert f"no comparison at b = {', '.join(str(b) for b in BATCHES)}." in text
    assert "No completed trials: no best configuration." in text


def test_auto_trials_under_dotted_store_names(tmp_path: Path) -> None:
    trials = _with_auto().rename(
        columns={"batch_size": "decode.batch_size", "num_draft_tokens": "decode.num_draft_tokens"}
    )
    text = _write(tmp_path, trials)
    assert f"<h2>{AUTO_TITLE}</h2>" in text and "it loses at b = 2, 8" in text
