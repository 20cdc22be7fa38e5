"""Benchmark: the decoding engine against HF ``generate`` and its own AR loop, side by side.

All numbers come from one process, one target (SmolLM2-135M-Instruct, float32), the same
threads, the same prompts, with the methods interleaved prompt by prompt so drift in machine
speed hits all of them alike:

1. oracle draft (proposes the target's own greedy continuation, so acceptance is known and
   only the engine's cost is measured), b = 1, temperature 0: tokens/s of HF ``generate``
   greedy, the engine's AR loop and tree speculative decoding at each num_draft_tokens k
   (a chain of k - 1 drafted tokens); the per-cycle time split at the best k;
2. the same at b = 8 against the engine's batched AR loop;
3. a trained draft (``--draft``: a folder saved by draft_train, or ``best`` = the best trial of
   ``runs/tokens``): tokens/s vs HF and the AR loop, acceptance length, break-even acceptance
   length, the per-cycle split, at each k of a small tree;
4. memory: peak and current RSS before and after 100 consecutive prompts decoded
   speculatively.

Targets (issue 3): oracle b=1 >= 2.5x HF at the best k with bookkeeping <= 15% of the cycle;
oracle b=8 >= 1.5x batched AR; engine AR >= HF. Every output is checked against HF greedy.

    python benchmarks/decode_bench.py --prompts ../shared/data/specbench --draft best
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any, cast

import psutil
import torch

from workloads.ar_decode import ar_generate
from workloads.data import chat_prompt_ids, load_prompt_sets
from workloads.decode_bench import find_trial_draft
from workloads.draft_model import DraftModel
from workloads.oracle_draft import OracleDraft
from workloads.target import DEFAULT_TARGET, Target, load_target
from workloads.tree_decode import BatchResult, Draft, TreeShape, generate


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def _hf(target: Target, prompt: list[int], n: int) -> tuple[list[int], float]:
    eos = sorted(target.eos_token_ids)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(  # type: ignore[operator]
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos[0],
        )
    return out[0, len(prompt) :].tolist(), time.perf_counter() - t0


class Tally:
    """Generated tokens and seconds of one method, plus its cycle split."""

    def __init__(self) -> None:
        self.tokens = self.cycles = 0
        self.seconds = self.draft_s = self.verify_s = self.book_s = self.prefill_s = 0.0
        self.accepted = self.row_cycles = 0
        self.mismatches = 0

    def add(self, r: BatchResult, refs: list[list[int]] | None = None) -> None:
        self.tokens += r.generated
        self.seconds += r.total_s
        self.cycles += r.cycles
        self.draft_s += r.draft_s
        self.verify_s += r.verify_s
        self.book_s += r.bookkeeping_s
        self.prefill_s += r.prefill_s
        self.accepted += sum(sum(a) for a in r.accept_lengths)
        self.row_cycles += sum(len(a) for a in r.accept_lengths)
        if refs is not None:
            self.mismatches += sum(o != ref for o, ref in zip(r.tokens, refs, strict=True))

    def row(self) -> dict[str, float]:
        cyc = self.seconds - self.prefill_s
        return {
            "tokens_per_s": self.tokens / self.seconds,
            "acceptance_length": self.accepted / max(self.row_cycles, 1),
            "ms_per_cycle": 1000 * cyc / max(self.cycles, 1),
            "draft_share": self.draft_s / cyc if cyc else 0.0,
            "verify_share": self.verify_s / cyc if cyc else 0.0,
            "bookkeeping_share": self.book_s / cyc if cyc else 0.0,
            "mismatches": float(self.mismatches),
        }


def _chain(k: int) -> TreeShape:
    return TreeShape(depth=k - 1, topk=1, num_draft_tokens=k)


def _print(title: str, rows: dict[str, dict[str, float]], base: str) -> None:
    print(f"\n{title}")
    print(
        f"{'method':<22}{'tok/s':>9}{'  x ' + base:>22}{'tau':>7}{'ms/cyc':>8}"
        f"{'draft':>7}{'verify':>7}{'book':>7}{'mism':>6}"
    )
    ref = rows[base]["tokens_per_s"]
    for name, r in rows.items():
        print(
            f"{name:<22}{r['tokens_per_s']:>9.2f}{r['tokens_per_s'] / ref:>22.2f}"
            f"{r['acceptance_length']:>7.2f}{r['ms_per_cycle']:>8.1f}{r['draft_share']:>7.0%}"
            f"{r['verify_share']:>7.0%}{r['bookkeeping_share']:>7.0%}{r['mismatches']:>6.0f}"
        )


def oracle_b1(
    target: Target, prompts: list[list[int]], n: int, ks: list[int]
) -> tuple[dict[str, dict[str, float]], list[list[int]]]:
    eos, vocab = target.eos_token_ids, target.model.config.vocab_size
    hf, ar, spec = Tally(), Tally(), {k: Tally() for k in ks}
    refs = []
    for p in prompts:
        ref, seconds = _hf(target, p, n)
        refs.append(ref)
        hf.tokens, hf.seconds, hf.cycles = (
            hf.tokens + len(ref),
            hf.seconds + seconds,
            hf.cycles + len(ref),
        )
        ar.add(ar_generate(target.model, [p], max_new_tokens=n, eos_ids=eos), [ref])
        for k in ks:
            oracle = cast(Draft, OracleDraft(p + ref, vocab))
            spec[k].add(
                generate(target.model, oracle, [p], max_new_tokens=n, shape=_chain(k), eos_ids=eos),
                [ref],
            )
    rows = {"HF generate": hf.row(), "engine AR": ar.row()}
    rows.update({f"oracle k={k}": t.row() for k, t in spec.items()})
    return rows, refs


def oracle_batched(
    target: Target, prompts: list[list[int]], refs: list[list[int]], n: int, b: int, ks: list[int]
) -> dict[str, dict[str, float]]:
    eos, vocab = target.eos_token_ids, target.model.config.vocab_size
    ar, spec = Tally(), {k: Tally() for k in ks}
    for i in range(0, len(prompts) - b + 1, b):
        batch, brefs = prompts[i : i + b], refs[i : i + b]
        ar.add(ar_generate(target.model, batch, max_new_tokens=n, eos_ids=eos), brefs)
        for k in ks:
            seqs = [p + r for p, r in zip(batch, brefs, strict=True)]
            oracle = cast(Draft, OracleDraft(seqs, vocab))
            spec[k].add(
                generate(
                    target.model, oracle, batch, max_new_tokens=n, shape=_chain(k), eos_ids=eos
                ),
                brefs,
            )
    return {f"engine AR b={b}": ar.row()} | {
        f"oracle b={b} k={k}": t.row() for k, t in spec.items()
    }


def trained(
    target: Target,
    draft: DraftModel,
    prompts: list[list[int]],
    refs: list[list[int]],
    n: int,
    ks: list[int],
    hf_row: dict[str, float],
    ar_row: dict[str, float],
) -> dict[str, dict[str, float]]:
    eos = target.eos_token_ids
    spec = {k: Tally() for k in ks}
    for p, ref in zip(prompts, refs, strict=True):
        for k in ks:
            shape = TreeShape(depth=min(4, k - 1), topk=4, num_draft_tokens=k)
            spec[k].add(
                generate(
                    target.model,
                    cast(Draft, draft),
                    [p],
                    max_new_tokens=n,
                    shape=shape,
                    eos_ids=eos,
                ),
                [ref],
            )
    rows = {"HF generate": hf_row, "engine AR": ar_row}
    return rows | {f"trained k={k}": t.row() for k, t in spec.items()}


def memory(target: Target, draft: Draft, prompts: list[list[int]], n: int) -> dict[str, float]:
    eos = target.eos_token_ids
    shape = TreeShape(depth=3, topk=4, num_draft_tokens=6)
    generate(target.model, draft, prompts[:1], max_new_tokens=n, shape=shape, eos_ids=eos)
    gc.collect()
    before = _rss_mb()
    for p in prompts:
        generate(target.model, draft, [p], max_new_tokens=n, shape=shape, eos_ids=eos)
    gc.collect()
    return {"prompts": float(len(prompts)), "rss_before_mb": before, "rss_after_mb": _rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--prompts",
        default="../shared/data/specbench",
        help="dir of *.jsonl or builtin names, comma-separated",
    )
    ap.add_argument("--num-prompts", type=int, default=8, help="MT-bench prompts for parts 1-3")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--draft", default="best", help="trained draft folder, 'best' (runs/tokens) or 'none'"
    )
    ap.add_argument("--run-root", type=Path, default=Path("runs"))
    ap.add_argument("--cache-dir", type=Path, default=Path("runs/cache"))
    ap.add_argument("--memory-prompts", type=int, default=100)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(DEFAULT_TARGET, cache_dir=args.cache_dir)
    src: list[str] | Path = (
        Path(args.prompts) if Path(args.prompts).is_dir() else args.prompts.split(",")
    )
    sets = load_prompt_sets(src, n=max(args.num_prompts, args.memory_prompts))
    by_name = {s.name: s for s in sets}
    main_set = by_name.get("mt_bench", sets[0])
    prompts = [chat_prompt_ids(target.tokenizer, t) for t in main_set.prompts[: args.num_prompts]]
    all_texts = [t for s in sets for t in s.prompts][: args.memory_prompts]
    n = args.max_new_tokens
    print(
        f"target {DEFAULT_TARGET} float32, {args.threads} threads, {len(prompts)} "
        f"{main_set.name} prompts, {n} new tokens, temperature 0"
    )
    out: dict[str, Any] = {}
    # warm-up: first-call allocations
    ar_generate(target.model, prompts[:2], max_new_tokens=4, eos_ids=target.eos_token_ids)
    rows, refs = oracle_b1(target, prompts, n, [2, 4, 8, 16, 32])
    _print("1. oracle draft, b=1 (x = vs HF generate greedy)", rows, "HF generate")
    out["oracle_b1"] = rows
    rows8 = oracle_batched(target, prompts, refs, n, 8, [2, 4, 8, 16])
    _print("2. oracle draft, b=8 (x = vs the engine's batched AR)", rows8, "engine AR b=8")
    out["oracle_b8"] = rows8
    draft: Draft | None = None
    if args.draft != "none":
        folder = (
            find_trial_draft(args.run_root, "tokens", "best")
            if args.draft == "best"
            else Path(args.draft)
        )
        model = target.model
        dm = DraftModel.load(
            folder,
            embed_weight=model.get_input_embeddings().weight,
            lm_head_weight=model.get_output_embeddings().weight,
        ).eval()
        draft = cast(Draft, dm)
        rows_t = trained(
            target, dm, prompts, refs, n, [2, 3, 4, 6, 8], rows["HF generate"], rows["engine AR"]
        )
        _print(f"3. trained draft {folder} (x = vs HF generate greedy)", rows_t, "HF generate")
        ar_ms = rows["engine AR"]["ms_per_cycle"]
        for name, r in rows_t.items():
            if name.startswith("trained"):
                print(
                    f"   {name}: break-even acceptance length = {r['ms_per_cycle'] / ar_ms:.2f} "
                    f"(cycle {r['ms_per_cycle']:.0f} ms / AR step {ar_ms:.0f} ms), "
                    f"measured {r['acceptance_length']:.2f}"
                )
        out["trained"] = {"draft": str(folder), **rows_t}
    if draft is None:
        draft = cast(Draft, OracleDraft(prompts[0] * 2, target.model.config.vocab_size))
    mem_prompts = [chat_prompt_ids(target.tokenizer, t) for t in all_texts]
    mem = memory(target, draft, mem_prompts, 16)
    print(
        f"\n4. memory: {mem['prompts']:.0f} consecutive prompts x 16 tokens: RSS "
        f"{mem['rss_before_mb']:.0f} MB before, {mem['rss_after_mb']:.0f} MB after "
        f"({mem['rss_after_mb'] - mem['rss_before_mb']:+.0f} MB)"
    )
    out["memory"] = mem
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
