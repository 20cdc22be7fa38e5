"""Benchmark report: how much must a draft be trained until speculation pays, per engine and b?

Reads finished sweeps from the results DB of a run root (``<run root>/results.db``, or
``--db-url``), completed trials only:

- ``--law``: a sweep over ``pretrain.tokens``; its token law ``acceptance_length =
  a*log10(T) + b`` (Scylla Thm 1.1; OLS, HC3, :func:`analysis.laws.fit_log_linear`): a
  ``draft_train`` sweep's, measured in this engine with the sweep's eval tree, or a
  ``serve_bench`` sweep's, measured in vLLM with a chain of K (the law to read vLLM's tau*
  against);
- ``--decode``: ``decode_bench`` sweeps at temperature 0; each trial's break-even tau* from
  its end-to-end speedup over its AR loop (``acceptance_length / speedup``,
  :func:`analysis.break_even.end_to_end_break_even`), beside the cycle-time one
  (``break_even_acceptance_length``: cycle time over AR step time, which leaves out prefill and
  per-batch work), per batch size b and verified tokens k, seeds averaged.
  An oracle draft costs almost nothing to run (its proposals are precomputed), so its tau* is
  a lower bound for a trained draft's at the same (b, k);
- ``--serve`` (optional): ``serve_bench`` sweeps; vLLM's tau* at each b of its
  ``serve.batch_sizes`` is ``acceptance_length / speedup/b{b}``
  (:func:`analysis.break_even.end_to_end_break_even`), k = K + 1 (vLLM verifies a chain of K).

Per row it prints the measured tau*, the trained draft's measured acceptance length there, and
the budget T* where the token law reaches tau* with its 95% interval
(:func:`analysis.break_even.crossing_budget`, Fieller's inverse prediction) and status. A row
whose acceptance is not measured as the law's (another tree, or a vLLM chain) is marked, as is
the k with the lowest tau* at each b. ``--out`` writes the rows as JSON. A missing sweep, one
with no completed trials, or a law with fewer than 3 budgets exits 2 with one line.

    python -m benchmarks.break_even_budget --run-root runs --law gemma-tokens \\
        --decode gemma-oracle gemma-batch --serve serve-gemma serve-gemma-k --out be.json
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.break_even import Crossing, crossing_budget, end_to_end_break_even
from analysis.laws import LogLinearFit, fit_log_linear
from benchmarks import harness
from orchestrator import OrchestratorError
from orchestrator.store.access import find_sweep
from orchestrator.store.results import ResultsStore, TrialInfo

X, Y = "pretrain.tokens", "acceptance_length"
THIS, VLLM = "this engine", "vLLM"
DRAFTS = {"oracle": "oracle", "trial": "trained", "path": "trained", "fresh": "untrained"}
"""decode_bench ``draft.source`` -> the table's draft column"""


class Refused(ValueError):
    """A sweep the report cannot use; the message is the one line the CLI prints."""


@dataclass(frozen=True)
class Law:
    """The token law of a draft_train or serve_bench sweep and how its acceptance was
    measured."""

    sweep: str
    fit: LogLinearFit
    target: str
    """the target model the drafts were trained for"""
    tree: tuple[int, int, int]
    """(depth, topk, num_draft_tokens) of the sweep's eval tree; a vLLM chain of K: (K, 1, K+1)"""
    engine: str = THIS
    """where its acceptance was measured: this engine (draft_train) or vLLM (serve_bench)"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    harness.add_run_root(p, "run root (default: runs)")
    p.add_argument("--db-url", default=None, help="results DB URL instead of the run root's")
    p.add_argument(
        "--law", default="gemma-tokens",
        help="sweep of the token law: a draft_train sweep (this engine's tree acceptance) or a "
        "serve_bench sweep over pretrain.tokens (vLLM's chain acceptance) (default: gemma-tokens)",
    )  # fmt: skip
    p.add_argument("--decode", nargs="*", default=[], help="decode_bench sweeps (default: none)")
    p.add_argument(
        "--serve", nargs="*", default=[], help="serve_bench sweeps (vLLM) (default: none)"
    )
    p.add_argument("--alpha", type=float, default=0.05, help="1 - confidence (default 0.05)")
    harness.add_out(p, None, "write the rows to this JSON file")
    a = p.parse_args(argv)
    if not 0 < a.alpha < 1:
        raise Refused(f"--alpha {a.alpha} is not in (0, 1). Example: --alpha 0.05")
    if not a.decode and not a.serve:
        raise Refused("nothing to compare. Fix: name --decode SWEEP... and/or --serve SWEEP...")
    a.decode, a.serve = list(dict.fromkeys(a.decode)), list(dict.fromkeys(a.serve))  # once each
    if a.out is not None and (a.out.is_dir() or any(p.is_file() for p in a.out.parents)):
        raise Refused(f"--out {a.out} is a folder or lies under a file. Fix: a .json file path")
    return a


def completed(
    store: ResultsStore, name: str, *workloads: str
) -> tuple[pd.DataFrame, dict[str, TrialInfo]]:
    """The sweep's completed trials (metrics table) and their configs by trial key."""
    info = find_sweep(store, name)
    if info.workload not in workloads:
        said = " or ".join(workloads)
        raise Refused(f"sweep {name!r} is a {info.workload} sweep, not {said}. "
                      f"Fix: name a {said} sweep")  # fmt: skip
    done: dict[str, TrialInfo] = {t.key: t for t in store.trials(info.id, {"completed"})}
    if not done:
        raise Refused(f"sweep {name!r} has no completed trials yet. Fix: wait for it, or "
                      f"`orchestrator status {name}`")  # fmt: skip
    df = store.metrics_frame(info.id)
    return df[df["trial_key"].isin(done)].reset_index(drop=True), done


def read_law(store: ResultsStore, name: str, alpha: float) -> Law:
    """Fit the token law on the sweep's completed trials at T > 0 (all seeds): a draft_train
    sweep's (this engine's eval tree) or a serve_bench sweep's (vLLM's chain of K). Raises
    :class:`Refused` for another workload, a sweep varying more than the budget, or no fit."""
    df, trials = completed(store, name, "draft_train", "serve_bench")
    configs = [trials[k].config for k in df["trial_key"]]
    varied = {k for t in trials.values() for k in t.overrides} - {X, "seed"}
    varied = {k for k in varied if len({str(t.overrides.get(k)) for t in trials.values()}) > 1}
    if varied:
        raise Refused(f"sweep {name!r} varies {sorted(varied)} besides {X}: one recipe per "
                      "law. Fix: a sweep over pretrain.tokens (and seeds) only")  # fmt: skip
    data = pd.DataFrame({X: [c["pretrain"]["tokens"] for c in configs],
                         Y: df.get(Y, pd.Series(np.nan, index=df.index))})  # fmt: skip
    fit = fit_log_linear(data, X, Y, law="tokens", alpha=alpha)
    if not fit.ok:
        raise Refused(f"sweep {name!r}: no token law from its completed trials ({fit.status})")
    target = configs[0]["target"]["model"]
    if "serve" in configs[0]:  # vLLM's chain of K
        k = int(configs[0]["serve"]["num_speculative_tokens"])
        return Law(name, fit, target, (k, 1, k + 1), VLLM)
    ev = configs[0]["eval"]
    return Law(name, fit, target, (ev["depth"], ev["topk"], ev["num_draft_tokens"]))


def _dtype(config: dict[str, Any], metrics: pd.Series) -> str:
    """The target's dtype; ``auto`` as the loader resolves it: float32 on a CPU (the trial
    measured a CPU roofline, or ``device: cpu``), bfloat16 on CUDA."""
    dtype = str(config["target"].get("dtype", "float32"))
    if dtype != "auto":
        return dtype
    on_cpu = config.get("device") == "cpu" or math.isfinite(_num(metrics, "hw.peak_flops"))
    return "float32" if on_cpu else "bfloat16" if config.get("device") == "cuda" else "auto"


def _num(row: pd.Series, name: str) -> float:
    value = pd.to_numeric(row.get(name, math.nan), errors="coerce")
    return float(value) if value is not None and not pd.isna(value) else math.nan


def _same_target(law: Law, name: str, trials: Iterable[TrialInfo]) -> None:
    found = {t.config["target"]["model"] for t in trials}
    if found != {law.target}:
        raise Refused(f"sweep {name!r} runs the target {sorted(found)}, the law's drafts are "
                      f"for {law.target!r}. Fix: sweeps of one target")  # fmt: skip


def decode_rows(store: ResultsStore, name: str, law: Law) -> list[dict[str, Any]]:
    """One row per T = 0 trial of a decode_bench sweep (engine, draft, dtype, b, k, tau*s)."""
    df, trials = completed(store, name, "decode_bench")
    _same_target(law, name, trials.values())
    measured = []
    for _, m in df.iterrows():
        c = trials[m["trial_key"]].config
        if float(c["decode"].get("temperature", 0.0)) != 0.0:
            continue
        d = c["decode"]
        k = d["num_draft_tokens"]
        measured.append({
            "engine": THIS, "sweep": name, "draft": DRAFTS.get(c["draft"]["source"], "?"),
            "tree": f"depth {d['depth']}, topk {d['topk']}",
            "dtype": _dtype(c, m), "batch_size": int(d["batch_size"]), "k": k,
            "same_as_law": law.engine == THIS and (d["depth"], d["topk"], k) == law.tree,
            "break_even": end_to_end_break_even(_num(m, Y), _num(m, "speedup")),
            "cycle_break_even": _num(m, "break_even_acceptance_length"),
            "acceptance": _num(m, Y), "speedup": _num(m, "speedup"),
        })  # fmt: skip
    if not measured:
        raise Refused(f"sweep {name!r} has no completed trial at decode.temperature 0 (the "
                      "law's acceptance is greedy). Fix: a greedy decode sweep")  # fmt: skip
    return measured


def serve_rows(store: ResultsStore, name: str, law: Law) -> list[dict[str, Any]]:
    """One row per (trial, b) of a serve_bench sweep, tau* = acceptance / speedup at b (rows of
    one (dtype, b, K) are pooled later, over seeds and the drafts served alike)."""
    df, trials = completed(store, name, "serve_bench")
    _same_target(law, name, trials.values())
    measured = []
    for _, m in df.iterrows():
        c = trials[m["trial_key"]].config
        for b in c["serve"]["batch_sizes"]:
            big_k = _num(m, f"num_speculative_tokens/b{b}")
            big_k = big_k if math.isfinite(big_k) else c["serve"]["num_speculative_tokens"]
            tau, speedup = _num(m, Y), _num(m, f"speedup/b{b}")
            if not math.isfinite(speedup):  # no plain server in the trial: no tau*
                continue
            measured.append({
                "engine": VLLM, "sweep": name, "draft": "trained", "dtype": _dtype(c, m),
                "tree": "chain",
                "batch_size": int(b), "k": int(big_k) + 1,
                "same_as_law": law.engine == VLLM and int(big_k) + 1 == law.tree[2],
                "break_even": end_to_end_break_even(tau, speedup), "acceptance": tau,
                "speedup": speedup, "cycle_break_even": math.nan,
            })  # fmt: skip
    if not measured:
        raise Refused(f"sweep {name!r} has no completed trial with a plain server (no speedup, "
                      "no tau*). Fix: a serving sweep with serve.baseline: true")  # fmt: skip
    return measured


def _pool(measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of equal (engine, draft, dtype, b, k, tree) averaged (NaN-skipping) over trials
    and sweeps, ``trials`` the runs with a finite tau*, ``break_even_se`` the standard error of
    their mean (sd with ddof=1 over sqrt(trials); NaN from one run)."""
    keys = ["engine", "draft", "dtype", "batch_size", "k", "tree", "same_as_law"]
    df = pd.DataFrame(measured).astype({"k": str})
    out = df.groupby(keys, sort=False).agg(
        sweep=("sweep", lambda s: "+".join(dict.fromkeys(s))),
        trials=("break_even", "count"), break_even=("break_even", "mean"),
        break_even_sd=("break_even", "std"),
        cycle_break_even=("cycle_break_even", "mean"), acceptance=("acceptance", "mean"),
        speedup=("speedup", "mean"),
    ).reset_index()  # fmt: skip
    rows = out.to_dict("records")
    for r in rows:
        r["k"] = int(r["k"]) if str(r["k"]).isdigit() else r["k"]
        n = int(r["trials"])
        r["break_even_se"] = float(r.pop("break_even_sd")) / math.sqrt(n) if n > 1 else math.nan
    return sorted(rows, key=lambda r: (r["engine"], r["draft"], r["dtype"], r["batch_size"],
                                       str(r["k"]).zfill(6)))  # fmt: skip


def finish(rows: list[dict[str, Any]], law: Law, alpha: float) -> list[dict[str, Any]]:
    """Each row with its crossing, the trained draft's acceptance at an oracle row's (dtype, b,
    k), and ``best_k`` (the lowest tau* among several k at one engine, draft, dtype and b)."""
    trained = {(r["engine"], r["dtype"], r["batch_size"], r["k"], r["tree"]): r["acceptance"]
               for r in rows if r["draft"] == "trained"}  # fmt: skip
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["draft"] != "trained":
            key = (r["engine"], r["dtype"], r["batch_size"], r["k"], r["tree"])
            r["acceptance"] = trained.get(key, math.nan)
        se = r["break_even_se"]
        spread = {"tau_star_var": se**2, "tau_star_df": r["trials"] - 1} if se == se else {}
        r["crossing"] = crossing_budget(law.fit, r["break_even"], alpha=alpha, **spread)
        groups.setdefault((r["engine"], r["draft"], r["dtype"], r["batch_size"]), []).append(r)
    for members in groups.values():
        finite = [r for r in members if math.isfinite(r["break_even"])]
        low = min(finite, key=lambda r: r["break_even"]) if len(members) > 1 and finite else None
        for r in members:
            r["best_k"] = r is low
    return rows


def _tokens(value: float) -> str:
    """Tokens for a reader: 31.6K, 1.2M; ``inf``; ``-`` when undefined."""
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf"
    if value >= 1e15:  # far past any budget: plain scientific notation
        return f"{value:.1e}"
    for suffix, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= div:
            return f"{value / div:.3g}{suffix}"
    return f"{value:.3g}"


def _num_text(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else "-"


def _speedup_text(r: dict[str, Any]) -> str:
    """A trained draft's measured speedup at its row; ``-`` for other drafts or none."""
    s = r["speedup"]
    return f"{s:.2f}x" if r["draft"] == "trained" and math.isfinite(s) else "-"


def _status(c: Crossing) -> str:
    return c.status + (", extrapolated" if c.extrapolated and c.status == "ok" else "")


def report_lines(law: Law, rows: list[dict[str, Any]], alpha: float) -> list[str]:
    """The printed report: the law, one aligned table, the footnotes."""
    f = law.fit
    budgets = sorted({int(x) for x in f.x})
    level = f"{1 - alpha:.0%}"
    how = (
        f"measured in vLLM with a chain of K = {law.tree[0]}"
        if law.engine == VLLM
        else f"measured with a tree of depth {law.tree[0]}, topk {law.tree[1]}, k {law.tree[2]}"
    )
    head = [
        f"token law ({law.sweep}, {f.n} completed trials at {len(budgets)} budgets "
        f"{_tokens(budgets[0])}..{_tokens(budgets[-1])}): acceptance_length = {f.a:.4f}*log10(T) "
        f"+ {f.b:.4f}; a {level} CI [{f.a_ci[0]:.4f}, {f.a_ci[1]:.4f}], R² {f.r2:.2f}; {how}",
    ]
    cols = ["engine", "draft", "dtype", "b", "k", "runs", "τ*", "± se", "τ* cycle", "τ trained",
            "speedup"]  # fmt: skip
    cols += [f"T* [{level}]", "status"]
    table = [cols]
    for r in rows:
        c: Crossing = r["crossing"]
        mark = ("*" if r["best_k"] else "") + ("" if r["same_as_law"] else "†")
        table.append([
            r["engine"], r["draft"], r["dtype"], str(r["batch_size"]), f"{r['k']}{mark}",
            str(r["trials"]), _num_text(r["break_even"]), _num_text(r["break_even_se"]),
            _num_text(r["cycle_break_even"]),
            _num_text(r["acceptance"]),
            _speedup_text(r),
            f"{_tokens(c.budget)} [{_tokens(c.budget_lo)}, {_tokens(c.budget_hi)}]", _status(c),
        ])  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    body = ["  ".join(cell.ljust(w) if i < 3 or i == len(cols) - 1 else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in table]  # fmt: skip
    notes = [
        "τ*: acceptance length / speedup at b (same run), assuming a cycle costs the same "
        "however many tokens it accepts; τ* cycle: this engine's cycle time / AR step time, "
        "without prefill and per-batch work. k: tokens verified per cycle (vLLM: K + 1).",
        "τ trained and speedup: the trained draft measured at this (b, k) (acceptance length in "
        "this platform's definition); a speedup below 1 where the status says it pays means "
        "the law was read against another acceptance (†) or τ* moved.",
        "runs: trials pooled over the sweeps named; ± se: τ*'s standard error over them, "
        "added to the law's band in T*'s interval ('-': one run, τ* taken as exact).",
        "T*: pretraining tokens where the law reaches τ* (Fieller interval); 'already': the "
        "law's band is above τ* at the smallest budget; 'unbounded': the slope is not resolved.",
        "* lowest τ* among the k at this b.  † acceptance not measured as the law's (another "
        "tree or engine): T* reads the law's acceptance against this τ*.",
    ]
    if any(r["draft"] == "oracle" for r in rows):
        notes.append(
            "oracle: proposals precomputed, the draft costs ~nothing: its τ* is a lower bound for "
            "a trained draft's; its 'τ trained' is the trained draft's at the same (b, k)."
        )
    return [*head, "", *body, "", *notes]


def main(argv: list[str] | None = None) -> int:
    """Run the report; 0, or 2 with one line on stderr for a refusal."""
    try:
        a = parse(argv)
        with harness.results(a.run_root, a.db_url, must_exist=True) as store:
            law = read_law(store, a.law, a.alpha)
            measured = [r for name in a.decode for r in decode_rows(store, name, law)]
            measured += [r for name in a.serve for r in serve_rows(store, name, law)]
    except (Refused, OrchestratorError) as exc:
        return harness.refusal("break_even_budget", str(exc))
    rows = finish(_pool(measured), law, a.alpha)
    if a.law in a.serve:
        print(
            f"warning: {a.law} is both the law and a --serve sweep: its tau* and the law come "
            "from the same trials, which the interval takes as independent",
            file=sys.stderr,
        )
    print("\n".join(report_lines(law, rows, a.alpha)))
    if a.out is not None:  # NaN and infinities as null, each crossing as a dict
        data = {"law": law.fit, "law_sweep": law.sweep, "law_tree": law.tree, "alpha": a.alpha}
        harness.write_json(a.out, data | {"rows": rows})
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
