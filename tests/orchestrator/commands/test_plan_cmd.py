"""``orchestrator plan`` on a hand-built results DB with known laws
(:mod:`tests.orchestrator.plan_synthetic`): the files it writes (the snippets parse, the k_law file
is accepted by ``decode.k_law``, the index links the page), the extrapolation labels exactly when
they apply, the holdout score, and every bad input refused in one line, exit 2, nothing written."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.planning.inputs import PlanOptions
from orchestrator.planning.plan import make_plan
from tests.orchestrator.plan_synthetic import PROFILE, build_db
from workloads.engine.k_law import read_sweep_k_law

MIX = "1:0.2,8:0.5,32:0.3"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_root = tmp_path_factory.mktemp("plan") / "run"
    build_db(run_root).close()
    return run_root


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_a_plan_writes_its_files_and_the_snippets_parse(root: Path) -> None:
    res = CliRunner().invoke(
        app, ["plan", "--run-root", str(root), "--batch-mix", MIX, "--resamples", "200"]
    )
    assert res.exit_code == 0, res.output
    folder = root / "plan-tokens"
    plan = json.loads((folder / "plan.json").read_text())
    assert [r["batch_size"] for r in plan["serving"]["rows"]] == [1, 8, 32]
    vllm = json.loads((folder / "vllm_speculative_config.json").read_text())
    ks = [r["k"] - 1 for r in plan["serving"]["rows"]]
    if max(ks) == 0:  # no speculation at any b: vLLM takes no config with K = 0 everywhere
        assert vllm is None
    else:
        per = vllm["num_speculative_tokens_per_batch_size"]
        assert per == [[1, 2, ks[0]], [3, 16, ks[1]], [17, 4096, ks[2]]]
        assert vllm["num_speculative_tokens"] == max(ks)
    parser = argparse.ArgumentParser()
    for flag in ("--model-path", "--speculative-algorithm", "--speculative-draft-model-path",
                 "--speculative-num-steps", "--speculative-eagle-topk",
                 "--speculative-num-draft-tokens", "--max-running-requests"):  # fmt: skip
        parser.add_argument(flag)
    launches = [
        line for line in (folder / "sglang_launch.sh").read_text().splitlines()
        if line.startswith("python")
    ]  # fmt: skip
    assert len(launches) == 3
    default_draft = str(folder.resolve() / "draft")  # no --draft: where to export it, said
    for line, row in zip(launches, plan["serving"]["rows"], strict=True):
        args = parser.parse_args(shlex.split(line)[3:])
        if row["k"] > 1:
            assert int(args.speculative_num_draft_tokens) == row["k"]
            assert args.speculative_draft_model_path == default_draft
            assert f"--format vllm --out {default_draft}" in "".join(res.output.split("\n"))
        else:
            assert args.speculative_algorithm is None  # no speculation at that batch range
    k_law = json.loads((folder / "k_law.json").read_text())
    assert k_law["sweep"] == "plan-tokens"
    if k_law["eq4"]["status"] == "ok":
        assert read_sweep_k_law(root, "plan-tokens")["status"] == "ok"
    assert "plan-tokens/plan.html" in (root / "index.html").read_text()
    page = (folder / "plan.html").read_text()
    assert "Recommendation" in page and "extrapolated" in page and "plotly" in page
    assert "<b class='error'>extrapolated: batch size 32" in page  # a label, rendered
    assert "&lt;b class=" not in page and "&amp;#x27;" not in page  # never escaped twice
    assert "EXTRAPOLATED: batch size 32" in " ".join(res.output.split())


def test_labels_appear_exactly_when_a_figure_leaves_the_measured_range(root: Path) -> None:
    from orchestrator.store.results import ResultsStore

    store = ResultsStore.sqlite_under(root)
    try:
        inside = make_plan(
            store,
            PlanOptions(batch_mix={2: 0.5, 4: 0.5}, budget_hours=0.1, profile=PROFILE,
                        n_resamples=100),
        )  # fmt: skip
        assert inside["training"]["tokens"] <= 131072
        assert inside["labels"] == [], inside["labels"]
        other = make_plan(
            store,
            PlanOptions(batch_mix={2: 1.0}, budget_hours=10.0, model="llama-3-8b",
                        profile=PROFILE, n_resamples=100),
        )  # fmt: skip
        assert any(x.startswith("another target: llama-3-8b") for x in other["labels"])
        far = make_plan(store, PlanOptions(batch_mix={64: 1.0}, profile=PROFILE, n_resamples=100))
        assert any("decades beyond" in x for x in far["labels"])
        assert any("batch size 64 is outside" in x for x in far["labels"])
    finally:
        store.close()


def test_holdout_scores_the_budgets_left_out(root: Path) -> None:
    from orchestrator.store.results import ResultsStore

    store = ResultsStore.sqlite_under(root)
    try:
        plan = make_plan(store, PlanOptions(holdout=32768, profile=PROFILE, n_resamples=100))
    finally:
        store.close()
    h = plan["holdout"]
    assert h["n_fit"] == 6 and sorted({r["x"] for r in h["rows"]}) == [65536, 131072]
    assert all(r["lo"] <= r["predicted"] <= r["hi"] for r in h["rows"])
    assert h["inside"] == sum(r["inside"] for r in h["rows"])
    assert plan["laws"]["tokens"]["n"] == 6  # planned from the part left in


def test_measured_k_counts_the_autoregressive_baseline_as_k_1(root: Path) -> None:
    """At b = 8 the synthetic DB's AR loop (b / c0 = 160 tokens/s) beats every fixed k (at
    most ~138): the best measured k there is 1, no speculation; at b = 1 speculation wins."""
    from orchestrator.store.results import ResultsStore

    store = ResultsStore.sqlite_under(root)
    try:
        plan = make_plan(store, PlanOptions(profile=PROFILE, n_resamples=50))
    finally:
        store.close()
    rows = {m["batch_size"]: m for m in plan["measured_k"]}
    assert rows[8]["best_measured_k"] == 1
    assert rows[8]["best_measured_tokens_per_s"] == pytest.approx(8 / 0.05)
    assert rows[1]["best_measured_k"] > 1
    for m in rows.values():
        if m["planned_k"] == 1:
            assert m["measured_tokens_per_s_at_planned_k"] == m["ar_tokens_per_s"]
        assert m["share_of_best"] is None or 0 < m["share_of_best"] <= 1 + 1e-12
        assert m["roofline_ar_tokens_per_s"] > 0  # beside the measured AR, for the console


def test_training_hours_are_costed_for_the_named_target_and_hardware(root: Path) -> None:
    """Another --model is costed with its own FLOPs (a 8B target's draft training costs far
    more per token than the measured 135M one's on the same GPU), modelled, never calibrated on
    the CPU trials; the sweep's float32 becomes bfloat16 on a GPU."""
    from orchestrator.store.results import ResultsStore

    store = ResultsStore.sqlite_under(root)
    try:
        plans = {
            m: make_plan(
                store,
                PlanOptions(
                    batch_mix={1: 1.0},
                    model=m,
                    hardware="h100",
                    min_gain=0.0,
                    budget_hours=1.0,
                    profile=PROFILE,
                    n_resamples=50,
                ),
            )  # fmt: skip
            for m in ("smollm2-135m", "llama-3-8b")
        }
    finally:
        store.close()
    small, big = plans["smollm2-135m"], plans["llama-3-8b"]
    assert big["costed_as"] == {"target": "llama-3-8b", "dtype": "bfloat16", "hardware": "h100"}
    assert big["cost_basis"] == "modelled" and small["cost_basis"] == "modelled"
    per_token = {m: p["training"]["hours"] / p["training"]["tokens"] for m, p in plans.items()}
    assert per_token["llama-3-8b"] > 10 * per_token["smollm2-135m"]
    assert big["training"]["tokens"] < small["training"]["tokens"]  # the same hour buys fewer


BAD = {
    "mix-not-summing": (["--batch-mix", "1:0.5,8:0.4"], "sum to 0.9, not 1"),
    "b-zero": (["--batch-mix", "0:1"], "must be an integer >= 1"),
    "unknown-model": (["--model", "llama-3-8x"], "did you mean 'llama-3-8b'"),
    "unknown-hardware": (["--hardware", "h2000"], "Did you mean 'h200'"),
    "zero-budget": (["--budget-hours", "0"], "must be a positive number"),
    "no-such-sweep": (["nope"], "no sweep 'nope'"),
    "no-decode-sweep": (["tokens"], "Fix: name it too (orchestrator plan tokens batch"),
    "no-token-sweep": (["batch"], "Fix: name it too (orchestrator plan batch tokens"),
    "named-twice": (["tokens", "tokens"], "none of tokens is a finished decode sweep"),
    "empty-draft": (["--draft", ""], "--draft must name"),
    "prefix": (["--prefix", "-1"], "--prefix -1 must be >= 0"),
    "resamples": (["--resamples", "5"], "--resamples 5 is too few"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(root: Path, case: str) -> None:
    args, needle = BAD[case]
    before = _files(root)
    res = CliRunner().invoke(app, ["plan", *args, "--run-root", str(root), "--name", "bad"])
    assert res.exit_code == 2, res.output
    message = " ".join(res.output.split())
    assert needle in message and "Fix" in message and "Traceback" not in message, message
    assert len(res.output.strip().splitlines()) <= 2, res.output  # one line (wrapped at most)
    assert not (root / "bad").exists() and _files(root) == before


def test_no_results_db_is_refused(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["plan", "--run-root", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no results DB" in res.output
    assert not (tmp_path / "none").exists()


def test_sweeps_of_different_targets_need_the_flag(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    build_db(run_root, decode_target="HuggingFaceTB/SmolLM2-360M-Instruct").close()
    res = CliRunner().invoke(app, ["plan", "--run-root", str(run_root), "--resamples", "100"])
    assert res.exit_code == 2 and "--allow-mixed-targets" in res.output, res.output
    assert not (run_root / "plan-tokens").exists()
    res = CliRunner().invoke(
        app, ["plan", "--run-root", str(run_root), "--resamples", "100", "--allow-mixed-targets"]
    )
    assert res.exit_code == 0, res.output
    plan = json.loads((run_root / "plan-tokens" / "plan.json").read_text())
    assert any(x.startswith("extrapolated: mixed targets") for x in plan["labels"])
    assert all(
        any(x.startswith("extrapolated: mixed targets") for x in r["labels"])
        for r in plan["serving"]["rows"]
    )  # on every figure, as --help says


def test_a_rerun_replaces_the_plan_and_its_mlflow_run(tmp_path: Path) -> None:
    """The same --name twice: one folder, one live MLflow run (the earlier one deleted, so
    restorable), and a name that is the DB's, the cache's or MLflow's is refused."""
    import mlflow

    run_root = tmp_path / "run"
    build_db(run_root).close()
    args = ["plan", "--run-root", str(run_root), "--resamples", "100", "--name", "p"]
    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, args)
    assert first.exit_code == 0 and second.exit_code == 0, second.output
    assert "replaced the earlier plan p" in " ".join(second.output.split())
    client = mlflow.MlflowClient(f"sqlite:///{run_root / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specscale")
    live = client.search_runs([exp.experiment_id], "tags.`specscale.plan` = 'p'")
    assert len(live) == 1
    for bad in ("results.db", "cache", "mlartifacts"):
        (run_root / "cache").mkdir(exist_ok=True)
        (run_root / "mlartifacts").mkdir(exist_ok=True)
        before = _files(run_root)
        res = CliRunner().invoke(app, [*args[:-1], bad])
        assert res.exit_code == 2 and "is not a plan's folder" in res.output, res.output
        assert _files(run_root) == before


def test_the_measured_k_check_is_of_the_measured_setting_whatever_the_plan_is_for(
    root: Path,
) -> None:
    """A plan for another target and GPU has nothing measured to compare with: the check of
    the rule against the decode sweep's best k stays the measured target's on this CPU."""
    from orchestrator.store.results import ResultsStore

    store = ResultsStore.sqlite_under(root)
    try:
        here = make_plan(store, PlanOptions(profile=PROFILE, n_resamples=50))
        there = make_plan(
            store,
            PlanOptions(model="llama-3-8b", hardware="h100", profile=PROFILE, n_resamples=50),
        )
    finally:
        store.close()
    assert there["measured_k"] == here["measured_k"] and here["measured_k"]
    assert [r["k"] for r in there["serving"]["rows"]] != [1] or there["measured_k"]


def test_a_flat_token_law_is_labelled_uncertain_and_acceptance_stays_at_least_1(
    tmp_path: Path,
) -> None:
    """(The default DB's law is not flagged: the labels test above finds no label at all.)"""
    from tests.orchestrator.plan_synthetic import TrueLaws

    store = build_db(tmp_path / "run", laws=TrueLaws(a=-0.05, b=1.3))
    try:
        plan = make_plan(store, PlanOptions(profile=PROFILE, n_resamples=100))
    finally:
        store.close()
    assert any(x.startswith("uncertain: the token law's slope") for x in plan["labels"])
    assert plan["training"]["acceptance_ci"][0] >= 1.0


def test_snippets_name_the_planned_target_and_cover_its_batch_sizes(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    build_db(run_root).close()
    res = CliRunner().invoke(
        app,
        ["plan", "--run-root", str(run_root), "--resamples", "100", "--model", "llama-3-8b",
         "--hardware", "h200", "--batch-mix", "1:0.5,10000:0.5", "--name", "big"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    sh = (run_root / "big" / "sglang_launch.sh").read_text()
    assert "--model-path llama-3-8b" in sh and "smollm2" not in sh
    assert "put its checkpoint" in sh and "# UNCHECKED: never run by this project" in sh
    per = json.loads((run_root / "big" / "vllm_speculative_config.json").read_text())
    assert per["num_speculative_tokens_per_batch_size"][-1][1] == 10000


def test_a_db_without_a_decode_sweep_says_which_to_run(tmp_path: Path) -> None:
    from orchestrator.store.results import ResultsStore

    run_root = tmp_path / "run"
    build_db(run_root).close()
    store = ResultsStore.sqlite_under(run_root)
    try:
        info = store.get_sweep("batch")
        assert info is not None
        store.delete_sweep(info.id)
    finally:
        store.close()
    res = CliRunner().invoke(app, ["plan", "--run-root", str(run_root), "--resamples", "100"])
    assert res.exit_code == 2, res.output
    assert "Fix: run orchestrator submit sweeps/batch.yaml" in " ".join(res.output.split())


FIXED_B_SPEC = """name: batch
workload: decode_bench
seeds: [0]
grid:
  decode.num_draft_tokens: [2, 4, 8, 16, 32]
base:
  target: {model: smollm2-135m-instruct}
  draft: {source: trial, sweep: tokens, trial_key: best}
  decode: {depth: 6, topk: 4, max_new_tokens: 8%s}
  prompts: {num_prompts: 4}
resources: {num_cpus: 1}
"""


@pytest.mark.parametrize("fixed", ["base", "default"])
def test_a_decode_sweep_whose_batch_size_is_not_a_grid_column_is_planned_from(
    tmp_path: Path, fixed: str
) -> None:
    """Issue 33: a decode sweep with ``decode.batch_size`` fixed in ``base`` (or left at its
    default, 1) is the sweep with ``decode.batch_size: [1]`` in the grid (same trial keys, same
    metrics): the plan reads it at that batch size, not "no finished decode sweep"."""
    from orchestrator.planning.inputs import choose_sweeps
    from orchestrator.spec.grid import expand
    from orchestrator.spec.sweep import parse_spec

    grid_store = build_db(tmp_path / "grid", batch_sizes=(1,))
    store = build_db(tmp_path / "fixed")
    try:
        measured = grid_store.metrics_frame(grid_store.get_sweep("batch").id)  # type: ignore[union-attr]
        measured = measured.set_index("trial_key")
        old = store.get_sweep("batch")
        assert old is not None
        store.delete_sweep(old.id)
        text = FIXED_B_SPEC % (", batch_size: 1" if fixed == "base" else "")
        spec = parse_spec(text, tmp_path / "fixed" / "batch.yaml")
        sweep_id = store.upsert_sweep(spec.name, spec.workload, text, "batch.yaml")
        trials = expand(spec)
        assert {t.key for t in trials} == set(measured.index)  # the same trials
        store.add_trials(
            sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides) for t in trials]
        )
        names = ["acceptance_length", "tokens_per_s", "ar_tokens_per_s", "speedup"]
        for t in trials:
            info = store.trial(sweep_id, t.key)
            assert info is not None
            store.mark_running(info.id, None)
            store.log_metrics(info.id, {n: float(measured.at[t.key, n]) for n in names})
            store.mark_completed(info.id, 1.0)
        want = choose_sweeps(grid_store, []).decode.table
        got = choose_sweeps(store, []).decode.table
    finally:
        store.close()
        grid_store.close()
    assert list(got["batch_size"]) == [1.0] * 5
    sort = ["num_draft_tokens"]
    assert (
        got.sort_values(sort)
        .reset_index(drop=True)
        .equals(want.sort_values(sort).reset_index(drop=True))
    )
    res = CliRunner().invoke(
        app, ["plan", "--run-root", str(tmp_path / "fixed"), "--resamples", "100"]
    )
    assert res.exit_code == 0, res.output


def test_a_decode_sweep_sampled_at_a_temperature_in_base_is_not_read_as_greedy(
    tmp_path: Path,
) -> None:
    """A decode sweep whose ``base`` sets ``decode.temperature: 0.7`` has no greedy trials: the
    plan does not take its acceptance-vs-k curve for greedy decoding's (it did), and says which
    sweep to run."""
    from orchestrator.planning.inputs import decode_data
    from orchestrator.spec.grid import expand
    from orchestrator.spec.sweep import parse_spec

    store = build_db(tmp_path / "run")
    try:
        old = store.get_sweep("batch")
        assert old is not None
        measured = store.metrics_frame(old.id).set_index("trial_key")
        greedy = decode_data(store, old)
        assert greedy is not None  # the twin at temperature 0 is read
        store.delete_sweep(old.id)
        text = FIXED_B_SPEC % ", batch_size: 1, temperature: 0.7"
        spec = parse_spec(text, tmp_path / "run" / "batch.yaml")
        sweep_id = store.upsert_sweep(spec.name, spec.workload, text, "batch.yaml")
        trials = expand(spec)
        store.add_trials(
            sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides) for t in trials]
        )
        row = measured.iloc[0]
        for t in trials:
            info = store.trial(sweep_id, t.key)
            assert info is not None
            store.mark_running(info.id, None)
            store.log_metrics(
                info.id,
                {n: float(row[n]) for n in ("acceptance_length", "tokens_per_s")}
                | {"ar_tokens_per_s": float(row["ar_tokens_per_s"])},
            )
            store.mark_completed(info.id, 1.0)
        sampled = store.get_sweep("batch")
        assert sampled is not None
        assert decode_data(store, sampled) is None
    finally:
        store.close()
    res = CliRunner().invoke(
        app, ["plan", "--run-root", str(tmp_path / "run"), "--resamples", "100"]
    )
    assert res.exit_code == 2, res.output
    assert "Fix: run orchestrator submit sweeps/batch.yaml" in " ".join(res.output.split())
