"""benchmarks/break_even_budget.py on a results DB built through the store with known truths:
a token law ``acceptance_length = 0.2*log10(T) + 0.5`` (+ noise), an oracle decode sweep whose
break-even tau* at b = 1, 4, 16 is 1.1, 1.4 and 2.0 (so T* is below the budgets measured,
10^4.5 tokens, and 10^7.5 tokens), a trained-draft decode sweep over (b, k), and a vLLM serving
sweep; and its refusals, each one line and exit code 2."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analysis.break_even import crossing_budget
from benchmarks.break_even_budget import main, read_law
from orchestrator.spec.grid import expand
from orchestrator.spec.sweep import parse_spec
from orchestrator.store.results import ResultsStore

TOKENS = """name: tokens
workload: draft_train
seeds: [0, 1]
grid:
  pretrain.tokens: [0, 8192, 16384, 32768, 65536, 131072]
base:
  eval: {depth: 3, topk: 4, num_draft_tokens: 8}
"""
ORACLE = """name: oracle
workload: decode_bench
grid:
  decode.batch_size: [1, 4, 16]
base:
  device: cpu
  draft: {source: oracle}
  decode: {depth: 3, topk: 4, num_draft_tokens: 8}
"""
BATCH = """name: batch
workload: decode_bench
grid:
  decode.batch_size: [1, 4]
  decode.num_draft_tokens: [4, 8]
base:
  device: cpu
  draft: {source: trial, sweep: tokens, trial_key: best}
  decode: {depth: 3, topk: 4}
"""
SERVE = """name: serve
workload: serve_bench
grid:
  pretrain.tokens: [131072]
base:
  draft: {source: sweep, sweep: tokens}
  serve: {num_speculative_tokens: 3, batch_sizes: [1, 4]}
"""
SERVE_LAW = """name: serve-law
workload: serve_bench
grid:
  pretrain.tokens: [8192, 16384, 32768, 65536, 131072]
base:
  draft: {source: sweep, sweep: tokens}
  serve: {num_speculative_tokens: 3, batch_sizes: [1], baseline: false}
"""
ORACLE_TAU = {1: 1.1, 4: 1.4, 16: 2.0}
"""break-even acceptance length of the oracle sweep by b"""
BATCH_TAU = {(1, 4): 1.3, (1, 8): 1.2, (4, 4): 1.5, (4, 8): 1.6}
"""break-even of the trained-draft sweep by (b, k): k = 8 is best at b = 1, k = 4 at b = 4"""


def _sweep(
    store: ResultsStore,
    text: str,
    metrics: Callable[[dict[str, Any]], dict[str, float] | None],
) -> None:
    """Record the spec and its trials; complete those ``metrics`` gives metrics for (a config
    dict -> metrics, None: left pending)."""
    spec = parse_spec(text, Path(f"{text.split()[1]}.yaml"))
    sweep_id = store.upsert_sweep(spec.name, spec.workload, text, f"{spec.name}.yaml")
    trials = expand(spec)
    store.add_trials(
        sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides) for t in trials]
    )
    for t in trials:
        m = metrics(t.config.model_dump(mode="json"))
        info = store.trial(sweep_id, t.key)
        if m is None or info is None:
            continue
        store.mark_running(info.id, None)
        store.log_metrics(info.id, m)
        store.mark_completed(info.id, 1.0)


def _law(
    rng: np.random.Generator, done_up_to: float = math.inf
) -> Callable[..., dict[str, float] | None]:
    def metrics(c: dict[str, Any]) -> dict[str, float] | None:
        tokens = c["pretrain"]["tokens"]
        if tokens > done_up_to:  # still running: must not enter the law
            return None
        tau = 0.2 * math.log10(max(tokens, 1)) + 0.5 if tokens else 1.25
        return {"acceptance_length": tau + float(rng.normal(0.0, 0.02))}

    return metrics


def _oracle(c: dict[str, Any]) -> dict[str, float]:
    b = c["decode"]["batch_size"]
    return {"break_even_acceptance_length": ORACLE_TAU[b], "acceptance_length": 7.9,
            "speedup": 7.9 / ORACLE_TAU[b], "hw.peak_flops": 1e11}  # fmt: skip


def _batch(c: dict[str, Any]) -> dict[str, float]:
    d = c["decode"]
    tau = BATCH_TAU[(d["batch_size"], d["num_draft_tokens"])]
    accepted = 1.5 + 0.01 * d["batch_size"]
    # the cycle-time tau* leaves out prefill: 0.8 of the end-to-end one (gemma-batch, b = 4, k = 4)
    return {"break_even_acceptance_length": 0.8 * tau, "acceptance_length": accepted,
            "speedup": accepted / tau, "hw.peak_flops": 1e11}  # fmt: skip


def _serve(c: dict[str, Any]) -> dict[str, float]:
    return {"acceptance_length": 2.0, "speedup/b1": 1.6, "speedup/b4": 1.0,
            "num_speculative_tokens/b1": 3.0, "num_speculative_tokens/b4": 3.0}  # fmt: skip


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    store = ResultsStore.sqlite_under(root)
    rng = np.random.default_rng(7)
    _sweep(store, TOKENS, _law(rng))
    _sweep(store, TOKENS.replace("name: tokens", "name: tokens-early"), _law(rng, 16384))
    _sweep(store, ORACLE, _oracle)
    _sweep(store, BATCH, _batch)
    again = BATCH.replace("name: batch", "name: batch-again").replace("[1, 4]", "[4]", 1)
    _sweep(store, again, lambda c: {**_batch(c), "speedup": _batch(c)["speedup"] / 1.1})
    _sweep(store, SERVE, _serve)
    _sweep(store, SERVE_LAW, _law(rng))
    k2 = SERVE_LAW.replace("name: serve-law", "name: serve-law-k2").replace(
        "tokens: 3", "tokens: 2"
    )
    _sweep(store, k2, _law(rng))
    _sweep(store, ORACLE.replace("name: oracle", "name: pending"), lambda c: None)
    store.close()
    return root


def _run(root: Path, *args: str) -> int:
    return main(["--run-root", str(root), "--law", "tokens", *args])


def test_the_report_crosses_each_measured_break_even_with_the_law(
    run_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rows.json"
    code = _run(run_root, "--decode", "oracle", "batch", "--serve", "serve", "--out", str(out))
    printed = capsys.readouterr().out
    assert code == 0
    assert "acceptance_length = 0.2" in printed and "10 completed trials at 5 budgets" in printed
    data = json.loads(out.read_text())
    rows = {(r["engine"], r["draft"], r["batch_size"], r["k"]): r for r in data["rows"]}
    assert len(rows) == len(data["rows"]) == 3 + 4 + 2
    by_b = {b: rows[("this engine", "oracle", b, 8)] for b in ORACLE_TAU}
    assert by_b[1]["crossing"]["status"] == "already"
    mid = by_b[4]["crossing"]
    assert mid["status"] == "ok" and not mid["extrapolated"]
    assert abs(math.log10(mid["budget"]) - 4.5) < 0.15
    assert mid["budget_lo"] < 10**4.5 < mid["budget_hi"]
    far = by_b[16]["crossing"]
    assert far["extrapolated"] and abs(math.log10(far["budget"]) - 7.5) < 0.6
    assert by_b[4]["dtype"] == "float32" and by_b[4]["same_as_law"]
    # an oracle row shows the trained draft's acceptance at its (b, k), when measured
    assert by_b[4]["acceptance"] == pytest.approx(1.54) and by_b[16]["acceptance"] is None
    best = {b: [k for k in (4, 8) if rows[("this engine", "trained", b, k)]["best_k"]]
            for b in (1, 4)}  # fmt: skip
    assert best == {1: [8], 4: [4]}
    assert not rows[("this engine", "trained", 1, 4)]["same_as_law"]
    for (b, k), tau in BATCH_TAU.items():  # T* reads the end-to-end tau*, the cycle one beside
        row = rows[("this engine", "trained", b, k)]
        assert row["break_even"] == pytest.approx(tau)
        assert row["cycle_break_even"] == pytest.approx(0.8 * tau)
    vllm = {b: rows[("vLLM", "trained", b, 4)] for b in (1, 4)}  # k = K + 1
    assert vllm[1]["break_even"] == pytest.approx(1.25) and vllm[4]["break_even"] == 2.0
    assert vllm[1]["acceptance"] == 2.0 and not vllm[1]["same_as_law"]
    assert "vLLM" in printed and "8*" in printed and "4*†" in printed


def test_only_completed_trials_enter_the_law(
    run_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--run-root", str(run_root), "--law", "tokens-early", "--decode", "oracle"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "need >= 3 distinct x values, got 2" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--decode", "gemma-oracle"], "no sweep named 'gemma-oracle'"),
        (["--decode", "pending"], "'pending' has no completed trials"),
        (["--decode", "serve"], "'serve' is a serve_bench sweep, not decode_bench"),
        (["--decode"], "nothing to compare"),
    ],
)
def test_a_sweep_it_cannot_use_is_refused_in_one_line(
    run_root: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert _run(run_root, *args) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and says in captured.err and captured.out == ""


def test_a_run_root_without_a_db_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path / "none", "--decode", "oracle") == 2
    assert "no results DB" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def test_runs_of_one_cell_in_two_sweeps_pool_and_widen_the_interval(
    run_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """batch-again measures b = 4 once more at 10% lower speedups (tau* x 1.1): the two runs
    pool into one row (sweeps named, runs 2, tau* their mean, se = |difference| / 2) whose T*
    interval holds the one-run interval; b = 1, measured once, keeps tau* exact."""
    out = tmp_path / "pooled.json"
    assert _run(run_root, "--decode", "batch", "batch-again", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert "± se" in printed and "τ* taken as exact" in printed
    rows = {(r["batch_size"], r["k"]): r for r in json.loads(out.read_text())["rows"]}
    store = ResultsStore.sqlite_under(run_root)
    law = read_law(store, "tokens", 0.05)
    store.close()
    for k in (4, 8):
        tau = BATCH_TAU[(4, k)]
        r = rows[(4, k)]
        assert r["trials"] == 2 and r["sweep"] == "batch+batch-again"
        assert r["break_even"] == pytest.approx(1.05 * tau)
        assert r["break_even_se"] == pytest.approx(0.05 * tau)
        assert r["crossing"]["tau_star_var"] == pytest.approx((0.05 * tau) ** 2)
        exact = crossing_budget(law.fit, r["break_even"])
        assert r["crossing"]["log_lo"] < exact.log_lo and r["crossing"]["log_hi"] > exact.log_hi
    assert rows[(1, 4)]["trials"] == 1 and rows[(1, 4)]["break_even_se"] is None
    assert rows[(1, 4)]["crossing"]["tau_star_var"] == 0.0


def test_a_vllm_token_law_reads_vllm_rows_of_its_own_k(
    run_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--law a serve_bench sweep over pretrain.tokens: the law is vLLM's chain acceptance;
    vLLM rows of its K are read as the law's (no †), this engine's rows are not."""
    out = tmp_path / "vllm.json"
    args = ["--run-root", str(run_root), "--law", "serve-law", "--decode", "batch"]
    assert main([*args, "--serve", "serve", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "(serve-law, 5 completed trials at 5 budgets" in printed
    assert "measured in vLLM with a chain of K = 3" in printed
    rows = json.loads(out.read_text())["rows"]
    assert {r["same_as_law"] for r in rows if r["engine"] == "vLLM"} == {True}
    assert {r["same_as_law"] for r in rows if r["engine"] == "this engine"} == {False}
    assert json.loads(out.read_text())["law_tree"] == [3, 1, 4]


def test_vllm_rows_of_another_k_are_not_the_laws_and_a_law_without_speedups_is_refused(
    run_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k2.json"
    args = ["--run-root", str(run_root), "--law", "serve-law-k2", "--decode"]
    assert main([*args, "--serve", "serve", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert rows and {r["same_as_law"] for r in rows} == {False}  # served K = 3, the law's 2
    capsys.readouterr()
    assert main([*args, "--serve", "serve-law"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no completed trial with a plain server" in err
    assert main([*args, "--serve", "serve", "serve-law-k2", "--out", str(out)]) == 2
