"""Tests of the batch-size sweep (decode_bench) HTML dashboard."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.eq4 import fit_k_opt
from analysis.throughput import (
    RooflineData,
    best_per_batch,
    fit_peak_throughput,
)
from dashboards.decode_page import TITLES, write_decode_dashboard

SWEEP = "decode-smoke"
BATCHES = [1, 2, 4, 8]
KS = [2, 4, 8, 16]
ERROR = "RuntimeError: <img src=x onerror=alert(1)> & out of memory"


def _trials() -> pd.DataFrame:
    rows = []
    for b in BATCHES:
        for k in KS:
            for seed in (0, 1):
                tps = 100.0 * math.log2(b) + 10.0 - abs(math.log2(k) - 3) + 0.5 * seed
                rows.append(
                    {
                        "trial_key": f"b{b}k{k}s{seed}",
                        "state": "completed",
                        "batch_size": b,
                        "num_draft_tokens": k,
                        "depth": 3,
                        "topk": 2,
                        "seed": seed,
                        "tokens_per_s": tps,
                        "ar_tokens_per_s": 40.0 * b,
                        "speedup": tps / (40.0 * b),
                        "hf_tokens_per_s": 9.4 if b == 1 else math.nan,
                        "acceptance_length": 1.2,
                        "draft_s_per_cycle": 0.07,
                        "verify_s_per_cycle": 0.17,
                        "bookkeeping_s_per_cycle": 0.01,
                        "break_even_acceptance_length": 2.2,
                        "error": None,
                    }
                )
    rows.append(
        {
            "trial_key": "kfail",
            "state": "failed",
            "batch_size": 16,
            "num_draft_tokens": 32,
            "depth": 3,
            "topk": 2,
            "seed": 0,
            "tokens_per_s": math.nan,
            "error": ERROR,
        }
    )
    return pd.DataFrame(rows)


def _roofline() -> RooflineData:
    rows = [
        {"batch_size": b, "num_draft_tokens": k, "intensity": 0.9 * b * k}
        for b in BATCHES
        for k in (1, 2, 4, 8, 16, 32, 64)
    ]
    return RooflineData(
        hardware="local CPU <AVX2>",
        i_crit=3.2,
        intensity=pd.DataFrame(rows),
        k_opt={b: 3.2 / (0.9 * b) for b in BATCHES},
        note="SmolLM2-135M, fp32, prefix 256",
    )


def _write(
    tmp_path: Path,
    trials: pd.DataFrame,
    *,
    roofline: RooflineData | None,
    sweep_name: str = SWEEP,
) -> str:
    best = best_per_batch(trials)
    out = write_decode_dashboard(
        tmp_path / "sweep" / "dashboard.html",
        sweep_name=sweep_name,
        trials=trials,
        best=best,
        peak_fit=fit_peak_throughput(best),
        k_fit=fit_k_opt(best),
        roofline=roofline,
    )
    assert out == tmp_path / "sweep" / "dashboard.html" and out.is_file()
    return out.read_text(encoding="utf-8")


def _no_external_scripts(text: str) -> None:
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, flags=re.IGNORECASE)


def test_full_page_has_every_figure_and_table(tmp_path: Path) -> None:
    text = _write(tmp_path, _trials(), roofline=_roofline())
    for title in TITLES.values():
        assert f"<h2>{title}</h2>" in text
    assert text.count("Plotly.newPlot") == 5
    assert text.count("plotly.js v") == 1  # plotly.js is inlined once (its banner)
    _no_external_scripts(text)
    assert "peak_tokens_per_s = a*log2(batch_size) + b" in text
    assert "fit: a*log2(b) + b0" in text  # the Thm 1.3 line was drawn
    assert "Scylla (arXiv 2505.07858) Thm 1.3" in text  # the paper's constants row
    assert "The paper beside us (Thm 1.3)" in text and "slope ratio (ours / paper)" in text
    assert "<table class='sortable' id='trials'>" in text
    assert "Measured best k vs roofline k_opt" in text
    assert "I_crit = 3.2 FLOP/byte" in text
    assert "SmolLM2-135M, fp32, prefix 256" in text
    assert "Best configuration per batch size" in text and "best_num_draft_tokens" in text
    assert "Eq. 4" in text and "too few points" not in text


def test_sweep_name_hardware_and_error_text_are_escaped(tmp_path: Path) -> None:
    name = "<script>alert(1)</script>"
    text = _write(tmp_path, _trials(), roofline=_roofline(), sweep_name=name)
    assert name not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "<img src=x" not in text
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; out of memory" in text
    assert "<AVX2>" not in text and "local CPU &lt;AVX2&gt;" in text


def test_without_roofline_the_roofline_figure_is_skipped(tmp_path: Path) -> None:
    text = _write(tmp_path, _trials(), roofline=None)
    assert "No roofline data was given" in text
    assert "Skipped: no roofline data was given." in text
    assert text.count("Plotly.newPlot") == 4
    assert "Measured best k vs roofline k_opt" not in text
    _no_external_scripts(text)


def test_only_failed_trials(tmp_path: Path) -> None:
    trials = _trials()
    trials = trials[trials["state"] == "failed"]
    text = _write(tmp_path, trials, roofline=None)
    assert "1 trials, 0 completed, 1 failed" in text
    assert "No completed trials: no best configuration." in text
    assert "not enough points" in text and "too few points" in text
    assert "Plotly.newPlot" not in text
    assert "kfail" in text and "&lt;img src=x" in text


def test_only_failed_trials_with_roofline_still_draws_it(tmp_path: Path) -> None:
    trials = _trials()
    text = _write(tmp_path, trials[trials["state"] == "failed"], roofline=_roofline())
    assert text.count("Plotly.newPlot") == 2  # predicted k_opt(b) and the intensity figure
    assert text.count("plotly.js v") == 1


def test_empty_frame_without_columns(tmp_path: Path) -> None:
    trials = pd.DataFrame({"trial_key": [], "state": []})
    best = best_per_batch(_trials().iloc[:0])
    out = write_decode_dashboard(
        tmp_path / "d.html",
        sweep_name=SWEEP,
        trials=trials,
        best=best,
        peak_fit=None,
        k_fit=None,
        roofline=None,
    )
    text = out.read_text(encoding="utf-8")
    assert "0 trials, 0 completed, 0 failed" in text
    assert "No fit was made." in text


@pytest.mark.parametrize("fewer", [[1, 2], [1, 2, 4]])
def test_few_batch_sizes_say_why_there_is_no_fit(tmp_path: Path, fewer: list[int]) -> None:
    trials = _trials()
    text = _write(tmp_path, trials[trials["batch_size"].isin(fewer)], roofline=None)
    assert "Eq. 4: no fit (too few points" in text
    if len(fewer) == 2:
        assert "no fit line (not enough points" in text
        assert "fit: a*log2(b) + b0" not in text
    else:
        assert "fit: a*log2(b) + b0" in text


def test_dotted_knob_names_from_the_store(tmp_path: Path) -> None:
    trials = _trials().rename(
        columns={"batch_size": "decode.batch_size", "num_draft_tokens": "decode.num_draft_tokens"}
    )
    text = _write(tmp_path, trials, roofline=None)
    assert text.count("Plotly.newPlot") == 4
    assert "decode.batch_size" in text


def test_roofline_without_usable_rows_says_so(tmp_path: Path) -> None:
    empty = RooflineData(
        hardware="cpu",
        i_crit=3.2,
        intensity=pd.DataFrame({"batch_size": [1], "num_draft_tokens": [0], "intensity": [1.0]}),
        k_opt={1: math.nan},
    )
    text = _write(tmp_path, _trials(), roofline=empty)
    assert "The roofline table has no rows with positive, finite k and intensity." in text
    assert text.count("Plotly.newPlot") == 4
