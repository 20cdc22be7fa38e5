"""The decode_bench report on stored trials: fits, roofline, dashboard; all-failed sweeps too."""

from __future__ import annotations

import json
import math
from pathlib import Path

from orchestrator.reports.fit import fit_sweep
from orchestrator.store.results import ResultsStore
from workloads.decode_bench.config import DecodeBenchConfig

UNRESOLVED = "the speedup's trend over b is not resolved from 0"


def _store(
    tmp_path: Path, results: dict[tuple[int, int], float | None]
) -> tuple[ResultsStore, int]:
    """A decode_bench sweep whose trial (b, k) completed at ``tokens/s`` or failed (None)."""
    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep("b", "decode_bench", "name: b\n", "b.yaml")
    rows = []
    for b, k in results:
        cfg = DecodeBenchConfig.model_validate(
            {"decode": {"batch_size": b, "num_draft_tokens": k}}
        ).model_dump(mode="json")
        rows.append(
            (f"{b:04d}{k:04d}00000000", cfg, {"decode.batch_size": b, "decode.num_draft_tokens": k})
        )
    store.add_trials(sweep_id, rows)
    for t in store.trials(sweep_id):
        b, k = t.overrides["decode.batch_size"], t.overrides["decode.num_draft_tokens"]
        tps = results[(b, k)]
        if tps is None:
            store.mark_failed(t.id, "ValueError: device 'cuda' asked for but no GPU", 1.0)
            continue
        store.log_metrics(
            t.id,
            {
                "tokens_per_s": tps,
                "ar_tokens_per_s": 10.0 * b**0.5,
                "speedup": tps / (10.0 * b**0.5),
                "hf_tokens_per_s": 10.0 if b == 1 else math.nan,
                "acceptance_length": 1.3,
                "draft_s_per_cycle": 0.01,
                "verify_s_per_cycle": 0.05,
                "bookkeeping_s_per_cycle": 0.005,
                "break_even_acceptance_length": 1.9,
                "hw.peak_flops": 1e11,
                "hw.bandwidth": 4e10,
                "prompt_tokens_mean": 100.0,
                "depth_used": float(min(4, k - 1)),
            },
        )
        store.mark_completed(t.id, 1.0)
    return store, sweep_id


def test_thm13_fit_roofline_and_dashboard(tmp_path: Path) -> None:
    # peak tokens/s at the best k = 20*log2(b) + 8 exactly; k = 4 is best at every b
    results: dict[tuple[int, int], float | None] = {}
    for b in (1, 2, 4, 8):
        for k in (2, 4, 8):
            results[(b, k)] = 20 * math.log2(b) + 8 - (0 if k == 4 else 1)
    store, sweep_id = _store(tmp_path, results)
    rep = fit_sweep(store, sweep_id, "b", tmp_path / "dash.html")
    assert rep.fit.ok and math.isclose(rep.fit.a, 20, rel_tol=1e-9)
    assert math.isclose(rep.fit.b, 8, rel_tol=1e-9)
    *per_b, crossing = rep.lines
    assert [line.split(":")[0] for line in per_b] == ["b=1", "b=2", "b=4", "b=8"]
    assert all("best k 4" in line and "roofline k_opt" in line for line in per_b)
    # speedup 0.80, 1.98, 2.40, 2.40 over log2(b): rising, but HC3 on 4 points leaves the
    # slope unresolved, so no crossing is claimed (the crossings: tests/analysis/test_break_even)
    assert crossing.startswith(f"speedup crossing 1: none supported ({UNRESOLVED}: speedup = ")
    assert "slope 95% CI [" in crossing and "is not a finding)" in crossing
    assert {f["law"] for f in store.fits(sweep_id)} == {"batch", "k_opt", "speedup"}
    stored = next(f for f in store.fits(sweep_id) if f["law"] == "speedup")
    assert stored["details"]["crossing"]["status"] == "unbounded" and stored["a"] > 0
    page = (tmp_path / "dash.html").read_text()
    assert "I_crit" in page and "local CPU" in page


def test_a_sweep_where_every_trial_failed_still_gets_a_report(tmp_path: Path) -> None:
    store, sweep_id = _store(tmp_path, {(1, 2): None, (2, 2): None})
    rep = fit_sweep(store, sweep_id, "b", tmp_path / "dash.html")
    assert not rep.fit.ok and rep.lines == []
    page = (tmp_path / "dash.html").read_text()
    assert "no GPU" in page  # the trials' errors are listed


def test_trials_at_other_temperatures_are_analysed_apart(tmp_path: Path) -> None:
    # greedy: k = 4 best, 20*log2(b) + 8; sampled at T = 0.7: k = 2 best, far slower
    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep("b", "decode_bench", "name: b\n", "b.yaml")
    rows, tps = [], {}
    for t in (0.0, 0.7):
        for b in (1, 2, 4, 8):
            for k in (2, 4):
                fast = 20 * math.log2(b) + 8 - (0 if k == 4 else 1)
                key = f"{b:04d}{k:04d}{int(t * 10):02d}000000"
                tps[key] = fast if t == 0 else fast / 4 + (1 if k == 2 else 0)
                decode = {"batch_size": b, "num_draft_tokens": k, "temperature": t}
                cfg = DecodeBenchConfig.model_validate({"decode": decode}).model_dump(mode="json")
                rows.append((key, cfg, {"decode.batch_size": b, "decode.temperature": t}))
    store.add_trials(sweep_id, rows)
    for trial in store.trials(sweep_id):
        store.log_metrics(trial.id, {"tokens_per_s": tps[trial.key], "prompt_tokens_mean": 9.0})
        store.mark_completed(trial.id, 1.0)
    rep = fit_sweep(store, sweep_id, "b", tmp_path / "b" / "dash.html")
    assert math.isclose(rep.fit.a, 20, rel_tol=1e-9) and math.isclose(rep.fit.b, 8, rel_tol=1e-9)
    assert "analysed apart (never averaged): temperature=0; temperature=0.7" in rep.lines[0]
    greedy, sampled = rep.lines[1:6], rep.lines[6:]
    assert [ln.split(": best")[0] for ln in greedy[:4] + sampled[:4]] == [
        *(f"temperature=0: b={b}" for b in (1, 2, 4, 8)),
        *(f"temperature=0.7: b={b}" for b in (1, 2, 4, 8)),
    ]
    assert all("best k 4" in ln for ln in greedy[:4])
    assert all("best k 2" in ln for ln in sampled[:4])  # not the pooled k = 4
    for label, line in (("temperature=0", greedy[4]), ("temperature=0.7", sampled[4])):
        assert line.startswith(f"{label}: speedup crossing 1: none")  # no speedups logged
    other = tmp_path / "b" / "dash-temperature-0.7.html"
    assert "this page shows temperature=0.7" in other.read_text()
    assert "dash-temperature-0.7.html" in (tmp_path / "b" / "dash.html").read_text()
    law = json.loads((tmp_path / "b" / "k_law.json").read_text())
    assert law["eq4"]["condition"] == "temperature=0"


def test_trials_of_other_prompt_sets_pooled_into_one_point_are_warned_of(tmp_path: Path) -> None:
    """Issue 33: trials of different ``prompts.prompt_sets`` at one (b, k) are pooled as if
    seeds (the figures stay as they were) and the console and the page say so."""
    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep("b", "decode_bench", "name: b\n", "b.yaml")
    rows = []
    for i, sets in enumerate((["humaneval"], ["sharegpt"])):
        for b in (1, 2, 4):
            for k in (2, 4):
                raw = {"decode": {"batch_size": b, "num_draft_tokens": k}, "prompts": {}}
                raw["prompts"] = {"prompt_sets": sets}
                cfg = DecodeBenchConfig.model_validate(raw).model_dump(mode="json")
                over = {"decode.batch_size": b, "decode.num_draft_tokens": k}
                rows.append((f"{b:04d}{k:04d}{i:08d}", cfg, over))
    store.add_trials(sweep_id, rows)
    for trial in store.trials(sweep_id):
        b = trial.overrides["decode.batch_size"]
        tps = (
            20 * math.log2(b)
            + 8
            + (1 if trial.config["prompts"]["prompt_sets"] == ["sharegpt"] else -1)
        )
        store.log_metrics(trial.id, {"tokens_per_s": tps, "prompt_tokens_mean": 9.0})
        store.mark_completed(trial.id, 1.0)
    rep = fit_sweep(store, sweep_id, "b", tmp_path / "b" / "dash.html")
    assert math.isclose(rep.fit.a, 20, rel_tol=1e-9)  # pooled as before: the mean of both
    warned = [ln for ln in rep.lines if ln.startswith("warning: ")]
    assert len(warned) == 1, rep.lines
    assert "differ in prompt sets (humaneval: 6 trials; sharegpt: 6 trials)" in warned[0]
    assert "6 of 6 (b, k) cells" in warned[0] and "Fix: " in warned[0]
    page = (tmp_path / "b" / "dash.html").read_text()
    assert "differ in prompt sets (humaneval: 6 trials; sharegpt: 6 trials)" in page


def test_the_crossing_line_says_below_which_b_speculation_pays() -> None:
    import pandas as pd

    from analysis.break_even import batch_crossing
    from orchestrator.reports.decode import crossing_line

    bs = [1, 2, 4, 8, 16, 32]
    noise = [0.01, -0.012, 0.008, -0.01, 0.012, -0.008]
    speedup = [1.5 - 0.25 * math.log2(b) + e for b, e in zip(bs, noise, strict=True)]
    line = crossing_line(*batch_crossing(pd.DataFrame({"batch_size": bs, "speedup": speedup})))
    assert line.startswith("speculation pays below b* = 4") and "extrapolated" not in line
    never = [0.9, 0.8, 0.62, 0.5, 0.41, 0.3]
    line = crossing_line(*batch_crossing(pd.DataFrame({"batch_size": bs, "speedup": never})))
    assert line.startswith("speculation pays below b* = 0.") and "extrapolated" in line
