"""The variant page of a sweep crossing variants with a law axis: the law per variant, the
factorial terms and the acceptance-during-training figure."""

from __future__ import annotations

from pathlib import Path

from analysis.variant_laws import factorial_with_axis, variant_laws
from dashboards.training_checks import checks_figure
from dashboards.variant_page import write_variant_dashboard
from tests.analysis.test_variant_laws import VARIANTS, X, _table


def test_the_page_shows_each_law_the_terms_and_the_checks(tmp_path: Path) -> None:
    slope = {"scylla": 0.05, "fusion": 0.10, "ttt": 0.05, "fusion-ttt": 0.12}
    trials = _table(dict.fromkeys(VARIANTS, 0.1), slope, 0.01)
    trials["trial_key"] = [f"k{i:03d}" for i in range(len(trials))]
    laws = variant_laws(trials, X, "acceptance_length", law="tokens")
    terms = factorial_with_axis(trials, VARIANTS, X, "acceptance_length")
    checks = {"k000": {"pretrain": ([4096.0, 8192.0], [1.01, 1.05]),
                       "sft": ([16384.0, 32768.0], [1.1, 1.2])}}  # fmt: skip
    fig = checks_figure(checks, trials)
    assert fig is not None
    assert checks_figure({"k001": {"sft": ([], [])}}, trials) is None
    page = write_variant_dashboard(
        tmp_path / "p.html", sweep_name="f", trials=trials, metrics=[], laws=laws, terms=terms,
        extra=[("Acceptance during training", fig)],
    )  # fmt: skip
    html = page.read_text(encoding="utf-8")
    for needle in ("The law per variant", "variant-laws-figure", "factorial-terms",
                   "draft.fusion x train.ttt_steps", "Acceptance during training", "extra-1",
                   "scylla T=8192 seed 0"):  # fmt: skip
        assert needle in html, needle
    star = [t for t in fig.data if t.name and t.name.endswith("final (acceptance_length)")]
    assert len(star) == 1 and star[0].x == (32768.0,)  # the final figure at the last check
