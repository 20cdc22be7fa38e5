"""A serving sweep's best K per batch size and Thm 1.3's crossing in vLLM: console lines, the
stored ``serve_speedup`` fit, the page's section, and ``orchestrator compare --law speedup``."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.reports.fit import fit_sweep
from orchestrator.store.results import ResultsStore
from workloads.draft_train.config import DraftTrainConfig
from workloads.serving.config import ServeBenchConfig

BS = (1, 2, 4, 8, 16)
SPEC = "name: {name}\nworkload: serve_bench\ngrid:\n  serve.num_speculative_tokens: [1, 2, 3]\n"


def _speedup(k: int, b: int, slope: float) -> float:
    """K = 3 best at b = 1, K = 2 at b = 2, K = 1 from b = 4; the best = 1.3 + slope*log2(b)
    (within 0.01)."""
    best_k = 3 if b == 1 else 2 if b == 2 else 1
    return 1.3 + slope * math.log2(b) - 0.05 * abs(k - best_k)


def _serve_sweep(store: ResultsStore, name: str, slope: float, seed: int) -> int:
    rng = np.random.default_rng(seed)
    sweep_id = store.upsert_sweep(name, "serve_bench", SPEC.format(name=name), f"{name}.yaml")
    rows = []
    for k in (1, 2, 3):
        raw = {"pretrain": {"tokens": 131072}, "serve": {"num_speculative_tokens": k}}
        cfg = ServeBenchConfig.model_validate(raw).model_dump(mode="json")
        rows.append((f"{name}-k{k}", cfg, {"serve.num_speculative_tokens": k}))
    store.add_trials(sweep_id, rows)
    for t in store.trials(sweep_id):
        k = int(t.overrides["serve.num_speculative_tokens"])
        m: dict[str, float] = {}
        for b in BS:
            s = _speedup(k, b, slope) + float(rng.normal(0, 0.005))
            m |= {
                f"speedup/b{b}": s,
                f"tokens_per_s/b{b}": 10.0 * b * s,
                f"baseline.tokens_per_s/b{b}": 10.0 * b,
                f"num_speculative_tokens/b{b}": k,
                f"bench.acceptance_length/b{b}": 1.0 + 0.2 * k,
            }
        store.log_metrics(t.id, {"acceptance_length": 1.2, **m})
        store.mark_completed(t.id, 1.0)
    return sweep_id


def test_serving_sweep_reports_the_best_k_per_b_and_where_speculation_stops(
    tmp_path: Path,
) -> None:
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    sweep_id = _serve_sweep(store, "serve-k", -0.15, 0)  # crosses 1 at b* = 2**2 = 4
    page = tmp_path / "runs" / "serve-k" / "dashboard.html"
    rep = fit_sweep(store, sweep_id, "serve-k", page)
    text = "\n".join(rep.lines)
    for b, k in ((1, 3), (2, 2), (4, 1), (16, 1)):
        assert re.search(rf"vLLM b={b}: best K {k}\b", text), text
    assert "at the edge of the K measured" in text  # K = 3 at b = 1, K = 1 from b = 4
    assert "K=1 " in text and "K=3 " in text
    found = re.search(r"speculation pays below b\* = (\S+) \[(\S+), (\S+)\]", text)
    assert found is not None and "over the plain server" in text, text
    assert float(found[1]) == pytest.approx(4.0, rel=0.1)
    assert float(found[2]) < 4.0 < float(found[3])
    stored = {f["law"]: f for f in store.fits(sweep_id)}
    assert stored["serve_speedup"]["a"] == pytest.approx(-0.15, abs=0.01)
    details = stored["serve_speedup"]["details"]
    assert details["crossing"]["status"] == "decreasing"
    assert [r["best_num_speculative_tokens"] for r in details["best"]] == [3, 2, 1, 1, 1]
    html = page.read_text()
    assert "<h2 id='serving'>Best K per batch size in vLLM</h2>" in html
    assert 'id="serving-k"' in html and "id='serving-k'" not in html  # the figure's div only
    store.close()


def test_a_sweep_without_per_b_speedups_gets_no_serving_lines(tmp_path: Path) -> None:
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    spec = "name: tok\ngrid:\n  pretrain.tokens: [8192, 32768, 131072]\n"
    sid = store.upsert_sweep("tok", "draft_train", spec, "tok.yaml")
    cfg = DraftTrainConfig().model_dump(mode="json")
    store.add_trials(sid, [(f"t{t}", cfg, {"pretrain.tokens": t}) for t in (8192, 32768, 131072)])
    for t in store.trials(sid):
        tau = 0.1 * math.log10(t.overrides["pretrain.tokens"]) + 0.8
        store.log_metrics(t.id, {"acceptance_length": tau})
        store.mark_completed(t.id, 1.0)
    rep = fit_sweep(store, sid, "tok", tmp_path / "runs" / "tok" / "dashboard.html")
    assert not any("vLLM" in line for line in rep.lines)
    assert "serve_speedup" not in {f["law"] for f in store.fits(sid)}
    store.close()


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, " ".join(res.output.split())


def test_compare_law_speedup_gives_the_slope_difference_of_two_targets(tmp_path: Path) -> None:
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    _serve_sweep(store, "smol", -0.05, 0)
    _serve_sweep(store, "gemma", -0.20, 1)
    sid = store.upsert_sweep("tok", "draft_train", "name: tok\n", "tok.yaml")
    store.add_trials(sid, [("t0", DraftTrainConfig().model_dump(mode="json"), {"seed": 0})])
    store.close()
    root = str(tmp_path / "runs")
    code, text = _cli("compare", "smol", "gemma", "--law", "speedup", "--run-root", root)
    assert code == 0, text
    diff = re.search(r"slope difference a\(B\) - a\(A\) = (\S+) \[(\S+), (\S+)\]", text)
    assert diff is not None and "the slopes differ" in text, text
    assert float(diff[1]) == pytest.approx(-0.15, abs=0.02)
    assert "speedup = a*log2(batch_size) + b" in text
    assert (tmp_path / "runs" / "compare" / "smol--vs--gemma--speedup.html").is_file()
    code, text = _cli("compare", "smol", "tok", "--law", "speedup", "--run-root", root)
    assert code == 2 and "measured no speedup per batch size" in text, text
    code, text = _cli("compare", "smol", "gemma", "--law", "tokens", "--run-root", root)
    assert code == 2 and "--law 'tokens': unknown. Fix: --law main or --law speedup" in text


def test_drafts_of_several_budgets_give_where_the_speedup_reaches_one(tmp_path: Path) -> None:
    """speedup at b = 1 = 0.3*log10(T) - 0.35 (+ noise) over 5 budgets: it reaches 1 at
    T* = 10^4.5 tokens, inside its interval; no best K is taken across drafts."""
    rng = np.random.default_rng(3)
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    budgets = (0, 8192, 16384, 32768, 65536, 131072)
    spec = "name: st\nworkload: serve_bench\ngrid:\n  pretrain.tokens: [0, 8192]\n"
    sid = store.upsert_sweep("st", "serve_bench", spec, "st.yaml")
    rows = []
    for t in budgets:
        cfg = ServeBenchConfig.model_validate({"pretrain": {"tokens": t}}).model_dump(mode="json")
        rows.append((f"st-{t}", cfg, {"pretrain.tokens": t}))
    store.add_trials(sid, rows)
    for t in store.trials(sid):
        tokens = t.overrides["pretrain.tokens"]
        s = 0.6 if tokens == 0 else 0.3 * math.log10(tokens) - 0.35 + rng.normal(0, 0.01)
        store.log_metrics(
            t.id, {"acceptance_length": 1.2, "speedup/b1": s, "num_speculative_tokens/b1": 3.0}
        )
        store.mark_completed(t.id, 1.0)
    rep = fit_sweep(store, sid, "st", tmp_path / "runs" / "st" / "dashboard.html")
    text = "\n".join(rep.lines)
    assert "best K" not in text
    assert "vLLM b=1, K=3: speedup over the plain server per budget 0: 0.60x, 8192: " in text, text
    assert "*log10(T) - 0.3" in text
    found = re.search(r"speculation pays above T\* = (\S+) \[(\S+), (\S+)\] pretraining", text)
    assert found is not None, text
    assert math.log10(float(found[1])) == pytest.approx(4.5, abs=0.1)
    assert float(found[2]) < 10**4.5 < float(found[3])
    store.close()


def test_trials_serving_other_drafts_are_never_pooled(tmp_path: Path) -> None:
    """Two drafts (``draft.sweep``) x K = 1, 2 at b = 1, 2, 4: each draft gets its own best K
    per b, labelled, however the other's speedups compare."""
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    spec = "name: two\nworkload: serve_bench\ngrid:\n  draft.sweep: [a, b]\n"
    sid = store.upsert_sweep("two", "serve_bench", spec, "two.yaml")
    rows = []
    for sweep in ("a", "b"):
        for k in (1, 2):
            raw = {
                "pretrain": {"tokens": 131072},
                "draft": {"sweep": sweep},
                "serve": {"num_speculative_tokens": k},
            }
            cfg = ServeBenchConfig.model_validate(raw).model_dump(mode="json")
            over = {"draft.sweep": sweep, "serve.num_speculative_tokens": k}
            rows.append((f"{sweep}-k{k}", cfg, over))
    store.add_trials(sid, rows)
    for t in store.trials(sid):
        k = t.overrides["serve.num_speculative_tokens"]
        good = (t.overrides["draft.sweep"] == "a") == (k == 1)  # a: K = 1 best; b: K = 2 best
        m = {f"speedup/b{b}": (2.0 if good else 1.0) / b for b in (1, 2, 4)}
        store.log_metrics(t.id, {**m, **{f"num_speculative_tokens/b{b}": k for b in (1, 2, 4)}})
        store.mark_completed(t.id, 1.0)
    rep = fit_sweep(store, sid, "two", tmp_path / "runs" / "two" / "dashboard.html")
    text = "\n".join(rep.lines)
    for b in (1, 2, 4):
        assert f"draft.sweep=a: vLLM b={b}: best K 1" in text, text
        assert f"draft.sweep=b: vLLM b={b}: best K 2" in text, text
    assert "vLLM b=4: best K 1 (no K pays: serve without speculation), 0.50x" in text
    assert text.count(": vLLM: ") == 2  # one crossing line per draft
    stored = {f["law"]: f for f in store.fits(sid)}["serve_speedup"]
    assert stored["details"]["condition"] == "draft.sweep=a"
    store.close()
