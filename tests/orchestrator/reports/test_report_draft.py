"""draft_train reports on stored trials: Thm 1.2 over draft layers, and variants side by side."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analysis.variants import variant_summary
from orchestrator.reports.fit import fit_sweep, law_axis
from orchestrator.store.results import ResultsStore
from workloads.draft_train.config import DraftTrainConfig


def _store(
    tmp_path: Path, spec_yaml: str, rows: list[tuple[dict[str, object], dict[str, float] | None]]
) -> tuple[ResultsStore, int]:
    """A draft_train sweep with one trial per (overrides, metrics); metrics None = failed."""
    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep("s", "draft_train", spec_yaml, "s.yaml")
    cfg = DraftTrainConfig().model_dump(mode="json")
    store.add_trials(sweep_id, [(f"{i:016d}", cfg, o) for i, (o, _) in enumerate(rows)])
    for t, (_, metrics) in zip(store.trials(sweep_id), rows, strict=True):
        if metrics is None:
            store.mark_failed(t.id, "RuntimeError: worker died", 1.0)
        else:
            store.log_metrics(t.id, metrics)
            store.mark_completed(t.id, 1.0)
    return store, sweep_id


def test_depth_sweep_fits_thm12_over_layers(tmp_path: Path) -> None:
    rows: list[tuple[dict[str, object], dict[str, float] | None]] = []
    for layers in (1, 2, 3, 5):
        for seed in (0, 1):
            tau = 0.3 * math.log10(layers) + 1.4 + (0.01 if seed else -0.01)
            metrics = {"acceptance_length": tau, "speedup": tau / (1 + 0.1 * layers),
                       "draft.ms_per_step": 5.0 * layers}  # fmt: skip
            rows.append(({"draft.layers": layers, "seed": seed}, metrics))
    rows.append(({"draft.layers": 8, "seed": 0}, None))
    spec = "name: s\ngrid:\n  draft.layers: [1, 2, 3, 5, 8]\n"
    store, sweep_id = _store(tmp_path, spec, rows)
    rep = fit_sweep(store, sweep_id, "s", tmp_path / "dash.html")
    assert rep.fit is not None and rep.fit.ok and rep.fit.n == 8
    assert rep.fit.law == "layers" and rep.fit.x_name == "draft.layers"
    assert rep.fit.a == pytest.approx(0.3, abs=1e-6) and rep.fit.b == pytest.approx(1.4, abs=1e-6)
    assert [f["law"] for f in store.fits(sweep_id)] == ["layers"]
    page = (tmp_path / "dash.html").read_text()
    assert "Gain and cost of depth" in page and "draft ms per step" in page
    assert "worker died" in page


def test_law_axis_follows_the_grid() -> None:
    assert law_axis("grid:\n  draft.layers: [1, 2]\n") == ("draft.layers", "layers")
    assert law_axis("grid:\n  pretrain.tokens: [0, 8]\n") == ("pretrain.tokens", "tokens")
    assert law_axis("name: x\n") == ("pretrain.tokens", "tokens")


def test_variants_are_reported_side_by_side(tmp_path: Path) -> None:
    rows: list[tuple[dict[str, object], dict[str, float] | None]] = [
        ({"variant": "eagle2", "seed": 0}, {"acceptance_length": 1.20, "speedup": 0.8}),
        ({"variant": "eagle2", "seed": 1}, {"acceptance_length": 1.22, "speedup": 0.82}),
        ({"variant": "scylla", "seed": 0}, {"acceptance_length": 1.40, "speedup": 0.9}),
        ({"variant": "scylla", "seed": 1}, None),
        ({"variant": "scylla", "seed": 2}, {"acceptance_length": 1.44, "speedup": 0.95}),
    ]
    store, sweep_id = _store(tmp_path, "name: s\nvariants: {}\n", rows)
    rep = fit_sweep(store, sweep_id, "s", tmp_path / "dash.html")
    assert rep.fit is None
    assert rep.lines[0].startswith("eagle2: acceptance_length = 1.2100 ± 0.0141 (n = 2)")
    scylla = next(line for line in rep.lines if line.startswith("scylla: acceptance_length"))
    assert "n = 2" in scylla and "delta +0.2100" in scylla
    page = (tmp_path / "dash.html").read_text()
    assert "eagle2" in page and "scylla" in page and "worker died" in page
    # beside the paper's Table 4 ratios (Vicuna-7B 6.32 / 4.68 = 1.350)
    assert "Table 4" in page and f"{1.42 / 1.21:.3f}" in page and "1.350" in page


def test_variant_summary_counts_only_completed_finite_values() -> None:
    import pandas as pd

    df = pd.DataFrame(
        {
            "variant": ["a", "a", "b", "b"],
            "state": ["completed", "completed", "completed", "failed"],
            "acceptance_length": [1.0, float("nan"), 2.0, 9.0],
        }
    )
    s = variant_summary(df, ["acceptance_length", "absent"])
    assert s["n"].tolist() == [1, 1]
    assert s["mean"].tolist() == [1.0, 2.0]
    assert math.isnan(s["delta"][0]) and s["delta"][1] == 1.0
    assert variant_summary(df.drop(columns="variant"), ["acceptance_length"]).empty


def test_a_recipe_ablation_is_reported_per_prompt_set_and_on_their_mean(tmp_path: Path) -> None:
    """Issue 24: a 2^2 recipe over two prompt sets, built by hand: target replies help
    humaneval by 0.3 and hurt sharegpt by 0.1 (the mean over sets, +0.1, prefers them);
    packing does nothing but noise."""
    spec = (
        "name: s\nvariants:\n"
        "  jd: {pretrain.packing: joined, sft.responses: dataset}\n"
        "  jt: {pretrain.packing: joined, sft.responses: target}\n"
        "  id: {pretrain.packing: isolated, sft.responses: dataset}\n"
        "  it: {pretrain.packing: isolated, sft.responses: target}\n"
    )
    noise = [0.004, -0.003, 0.002, -0.001, 0.003, -0.004, 0.001, -0.002]
    rows: list[tuple[dict[str, object], dict[str, float] | None]] = []
    for i, (name, seed) in enumerate((v, s) for v in ("jd", "jt", "id", "it") for s in (0, 1)):
        target = name.endswith("t")
        he, sg = 1.3 + 0.3 * target + noise[i], 1.4 - 0.1 * target - noise[i] / 2
        metrics = {"acceptance_length": (he + sg) / 2, "acceptance_length/humaneval": he,
                   "acceptance_length/sharegpt": sg}  # fmt: skip
        rows.append(({"variant": name, "seed": seed}, metrics))
    store, sweep_id = _store(tmp_path, spec, rows)
    rep = fit_sweep(store, sweep_id, "s", tmp_path / "dash.html")
    mean_line = next(x for x in rep.lines if "sft.responses" in x and "mean over 2" in x)
    assert mean_line.startswith(
        "effect of sft.responses dataset -> target on the mean over 2 prompt sets: +0.1000"
    )
    assert "prefers target (the CI excludes 0)" in mean_line
    assert "1 of 2 sets prefer the same level beyond their scatter, 1 the other" in mean_line
    per_set = rep.lines[rep.lines.index(mean_line) + 1]
    assert per_set.startswith("  per set: humaneval +0.3") and "sharegpt -0.1" in per_set
    packing = next(x for x in rep.lines if "pretrain.packing" in x and "mean over 2" in x)
    assert "within the trials' scatter" in packing
    assert any(x.startswith("jt: acceptance_length_set_mean = ") for x in rep.lines)
    page = (tmp_path / "dash.html").read_text()
    assert "The recipe across prompt sets" in page and "acceptance_length_set_mean" in page
