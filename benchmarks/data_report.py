"""The console report of :mod:`benchmarks.data_bench`: a table per part it measured and its
ratios against the issue's targets."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["print_report"]


def print_report(res: dict[str, Any]) -> None:
    """The tables of the parts in ``res`` (what :func:`benchmarks.data_bench.run` returns) and
    each measured ratio against its target (``res["targets"]``), met or MISSED."""
    targets: dict[str, float] = res["targets"]
    checks: dict[str, bool] = res["checks"]
    if "cache" in res:
        print("\n1. cache build (ensure_features, fresh folder per size; medians)")
        print(
            f"{'chunks':>7} {'rows':>6} {'tokens':>8} {'build s':>8} {'warm s':>7} "
            f"{'rows packed':>11} {'target rows':>11} {'tokenised':>9}"
        )
        for r in res["cache"]:
            print(
                f"{r['chunks']:7d} {r['rows']:6d} {r['tokens']:8d} {r['build_s']:8.2f} "
                f"{r['warm_s']:7.2f} {r['rows_packed']:11d} {r['target_rows']:11d} "
                f"{r['tokenised']:9d}"
            )
        for d in res["cache_doubling"]:
            print(
                f"   {d['from']} -> {d['to']} chunks, per doubling: time {d['time']:.2f}x, "
                f"warm {d['warm']:.2f}x, rows packed {d['rows_packed']:.2f}x, "
                f"target rows {d['target_rows']:.2f}x"
            )
        print(
            f"   worst time per doubling {res['cache_worst']:.2f}x "
            f"(target <= {targets['cache_per_doubling']}x): "
            f"{'met' if checks['cache_linear'] else 'MISSED'}"
        )
    if "tokenize" in res:
        print(
            f"\n2. tokenisation of a {res['corpus']['bytes'] / 1e6:.1f} MB jsonl corpus "
            f"({res['corpus']['documents']} documents) into token shards"
        )
        print(f"{'procs':>6} {'tokens':>10} {'seconds':>8} {'tokens/s':>10}")
        for t in res["tokenize"]:
            print(
                f"{t['procs']:6d} {t['tokens']:10d} {t['seconds']:8.2f} {t['tokens_per_s']:10.0f}"
            )
        if len(res["tokenize"]) > 1:
            print(
                f"   {res['tokenize'][-1]['procs']} vs {res['tokenize'][0]['procs']} "
                f"processes: {res['tokenize_speedup']:.2f}x tokens/s "
                f"({os.cpu_count()} CPUs, TOKENIZERS_PARALLELISM=false)"
            )
    if "online" in res:
        print("\n3. online features: RSS of a fresh process training over a whole budget (MiB)")
        print(
            f"{'budget':>10} {'steps':>6} {'train s':>8} {'tokens/s':>9} {'setup':>7} "
            f"{'train max':>9} {'end':>7} {'peak':>7}"
        )
        for o in res["online"]:
            print(
                f"{o['budget']:10d} {o['steps']:6d} {o['train_s']:8.1f} "
                f"{o['tokens_seen'] / o['train_s']:9.0f} {o['rss_setup_kib'] / 1024:7.1f} "
                f"{o['rss_train_max_kib'] / 1024:9.1f} {o['rss_end_kib'] / 1024:7.1f} "
                f"{o['peak_rss_kib'] / 1024:7.1f}"
            )
        last, first = res["online"][-1]["budget"], res["online"][0]["budget"]
        print(
            f"   {last:,} vs {first:,} tokens: peak RSS {res['rss_ratio']:.3f}x, largest RSS "
            f"while training {res['rss_train_ratio']:.3f}x (target <= {targets['rss_ratio']}x): "
            f"{'met' if checks['rss_flat'] else 'MISSED'}"
        )
    if "equal" in res:
        e = res["equal"]
        print(
            f"\n4. online vs cached features: {e['steps']} steps on {e['rows']} rows "
            f"({e['docs_per_row']:.1f} documents per row, feature noise on)"
        )
        diffs = ", ".join(f"{k} {v:.2e}" for k, v in e["max_abs_diff"].items())
        print(
            f"   max |online - cached| per step: {diffs} "
            f"(target <= {targets['online_vs_cached']:.0e}): "
            f"{'met' if checks['online_equals_cached'] else 'MISSED'}"
        )
