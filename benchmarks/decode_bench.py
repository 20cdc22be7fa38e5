"""Benchmark: the decoding engine against HF ``generate`` and its own AR loop, side by side.

One process, one target (SmolLM2-135M-Instruct, float32), the same threads and prompts, the
methods interleaved prompt by prompt. Prints one table per part:

1. oracle draft (proposes the target's own greedy continuation), b = 1, temperature 0: tokens/s
   of HF ``generate`` greedy, the engine's AR loop and tree speculative decoding at each
   num_draft_tokens k (a chain of k - 1 drafted tokens); the per-cycle split at the best k;
2. the same at b = ``--batch`` against the engine's batched AR loop;
3. a trained draft (``--draft``: a draft_train folder, or ``best`` = the best trial of
   ``<--run-root>/tokens``), b = 1: HF ``generate``, the engine's AR loop and the draft's small
   trees at each k, eager and/or compiled (``--trained-compile``): tokens/s vs HF and vs the
   AR loop, acceptance length, break-even acceptance length, the per-cycle split;
4. memory: RSS before and after ``--memory-prompts`` consecutive speculative prompts;

then a summary line: the oracle's best b=1 ratio over HF ``generate`` and its best b=``--batch``
ratio over the batched AR loop. Every output is checked against HF greedy (``mismatches``).
Each method's first call is an untimed warm-up; ``compile s`` is what ``Steps.prepare``
compiled, ``warm-up s`` the warm-up calls' wall seconds, ``late`` the shapes first met inside a
timed cycle (must be 0). ``--json FILE`` writes every figure.

``--quick``: parts 1 and 2 only, at fewer k (b=1: 8, 16, 32; batched: 4, 8, 16).
``--oracle-accept p`` keeps each oracle proposal with probability p (else a wrong token);
``--compile`` sets parts 1-2's step mode (``graphs`` needs CUDA). Bad arguments: one line on
stderr, exit code 2.

    python -m benchmarks.decode_bench --prompts ../shared/data/specbench --draft best
    python -m benchmarks.decode_bench --quick
    python -m benchmarks.decode_bench --draft best --run-root /tmp/perf/runs --memory-prompts 0
"""

from __future__ import annotations

import argparse
import gc
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil

from benchmarks import harness
from benchmarks.decode_tally import Tally, print_rows
from workloads.data import chat_prompt_ids, load_prompt_sets
from workloads.engine.ar_decode import ar_generate
from workloads.engine.ar_decode import reserve as reserve_ar
from workloads.engine.hf_baseline import hf_generate
from workloads.engine.oracle_draft import OracleDraft
from workloads.engine.steps import Steps
from workloads.engine.tree_decode import (
    TreeShape,
    generate,
    reserve,
)
from workloads.measure.drafts import find_trial_draft
from workloads.models.draft import Draft, DraftModel
from workloads.models.target import DEFAULT_TARGET, Target

QUICK_KS = ([8, 16, 32], [4, 8, 16])
"""--quick: the k measured at b = 1 and at the batched size (the best k of past runs and a
neighbour each side)"""

FULL_KS = ([2, 4, 8, 16, 32], [2, 4, 8, 16])
"""the k measured at b = 1 and at the batched size"""

TRAINED_KS = [2, 3, 4, 6, 8]
"""part 3: num_draft_tokens of the trained draft's small trees"""

WARMUP_TOKENS = 8
"""new tokens of each method's untimed first call (compiling happens there)"""


@dataclass(frozen=True)
class Engine:
    """How the engine is called in parts 1-2: its compile mode and the oracle's acceptance."""

    compile: str = "none"
    """``decode.compile``: none or compile (graphs needs CUDA)"""
    oracle_accept: float = 1.0
    """probability that each oracle proposal is kept (else a wrong token is proposed)"""
    seed: int = 0
    """seed of the oracle's draws"""
    backend: str = "inductor"
    """``torch.compile`` backend (tests: ``eager``, which counts graphs and generates no code)"""

    def steps(self, target: Target, draft: Any = None, mode: str | None = None) -> Steps:
        """A new :class:`Steps` (kept by one method over all its calls) in ``mode`` (default:
        :attr:`compile`)."""
        return Steps(target.model, draft, mode or self.compile, backend=self.backend)

    def oracle(self, sequences: list[list[int]], vocab: int) -> Draft:
        """An oracle draft that knows ``sequences`` (one per row)."""
        return cast(Draft, OracleDraft(sequences, vocab, accept=self.oracle_accept, seed=self.seed))


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def _chain(k: int) -> TreeShape:
    return TreeShape(depth=k - 1, topk=1, num_draft_tokens=k)


def _small_tree(k: int) -> TreeShape:
    """Part 3's tree at k: depth <= 4, topk 4."""
    return TreeShape(depth=min(4, k - 1), topk=4, num_draft_tokens=k)


def _reserve_ar(steps: Steps, rows: int, longest: int, n: int) -> None:
    """The AR loop's caches for every call of up to ``rows`` prompts of up to ``longest``
    tokens (it stages one slot per step)."""
    reserve_ar(steps, rows, longest, n)


def oracle_b1(
    target: Target, prompts: list[list[int]], n: int, ks: list[int], engine: Engine = Engine()
) -> tuple[dict[str, dict[str, float]], list[list[int]]]:
    """Part 1: HF ``generate``, the engine's AR loop and the oracle at each k, b = 1, prompt by
    prompt; the rows and HF's greedy outputs (the references of the other parts)."""
    eos, vocab = target.eos_token_ids, target.model.config.vocab_size
    hf, ar, spec = Tally(), Tally(), {k: Tally() for k in ks}
    longest = max(map(len, prompts))
    ar_steps, spec_steps = engine.steps(target), engine.steps(target)
    _reserve_ar(ar_steps, 1, longest, n)
    for k in ks:
        reserve(spec_steps, 1, longest, n, _chain(k), vocab=vocab)
    refs = []
    for i, p in enumerate(prompts):
        ref, seconds = hf_generate(target.model, p, n, eos_ids=target.eos_token_ids)
        refs.append(ref)
        hf.tokens, hf.seconds, hf.cycles = (
            hf.tokens + len(ref),
            hf.seconds + seconds,
            hf.cycles + len(ref),
        )
        for timed in [False, True] if i == 0 else [True]:  # an untimed first call each
            kw: dict[str, Any] = {"max_new_tokens": n if timed else min(WARMUP_TOKENS, n)}
            kw["eos_ids"] = eos
            ar.call([ref], timed, ar_generate, target.model, [p], steps=ar_steps, **kw)
            for k in ks:
                oracle = engine.oracle([p + ref], vocab)
                spec[k].call(
                    [ref], timed, generate, target.model, oracle, [p], steps=spec_steps,
                    shape=_chain(k), **kw,
                )  # fmt: skip
    rows = {"HF generate": hf.row(), "engine AR": ar.row()}
    rows.update({f"oracle k={k}": t.row() for k, t in spec.items()})
    return rows, refs


def oracle_batched(
    target: Target,
    prompts: list[list[int]],
    refs: list[list[int]],
    n: int,
    b: int,
    ks: list[int],
    engine: Engine = Engine(),
) -> dict[str, dict[str, float]]:
    """Part 2: the engine's batched AR loop and the oracle at each k over the full batches of
    ``b`` prompts (a last partial batch is left out).

    Raises:
        ValueError: fewer than ``b`` prompts (no batch to measure).
    """
    if len(prompts) < b:
        raise ValueError(f"{len(prompts)} prompts give the b={b} part no batch of {b}")
    eos, vocab = target.eos_token_ids, target.model.config.vocab_size
    ar, spec = Tally(), {k: Tally() for k in ks}
    longest = max(map(len, prompts))
    ar_steps, spec_steps = engine.steps(target), engine.steps(target)
    _reserve_ar(ar_steps, b, longest, n)
    for k in ks:
        reserve(spec_steps, b, longest, n, _chain(k), vocab=vocab)
    for i in range(0, len(prompts) - b + 1, b):
        batch, brefs = prompts[i : i + b], refs[i : i + b]
        seqs = [p + r for p, r in zip(batch, brefs, strict=True)]
        for timed in [False, True] if i == 0 else [True]:
            kw: dict[str, Any] = {"max_new_tokens": n if timed else min(WARMUP_TOKENS, n)}
            kw["eos_ids"] = eos
            ar.call(brefs, timed, ar_generate, target.model, batch, steps=ar_steps, **kw)
            for k in ks:
                oracle = engine.oracle(seqs, vocab)
                spec[k].call(
                    brefs, timed, generate, target.model, oracle, batch, steps=spec_steps,
                    shape=_chain(k), **kw,
                )  # fmt: skip
    return {f"engine AR b={b}": ar.row()} | {
        f"oracle b={b} k={k}": t.row() for k, t in spec.items()
    }


def _suffix(mode: str) -> str:
    return "" if mode == "none" else " compiled"


def trained(
    target: Target,
    draft: DraftModel,
    prompts: list[list[int]],
    refs: list[list[int]] | None,
    n: int,
    ks: list[int],
    modes: list[str],
    engine: Engine = Engine(),
) -> dict[str, dict[str, float]]:
    """Part 3, b = 1, prompt by prompt: HF ``generate``, then in each of ``modes`` (none,
    compile) the engine's AR loop and the trained draft's small trees (depth <= 4, topk 4) at
    each k. One :class:`Steps` per method and mode, kept over all calls (one for all of the
    draft's trees); each method's first call is an untimed warm-up. Outputs are checked
    against ``refs`` (HF greedy of part 1), or against this part's HF outputs when None."""
    eos, vocab = target.eos_token_ids, draft.vocab_size
    longest = max(map(len, prompts))
    hf = Tally()
    ar = {m: Tally() for m in modes}
    spec = {(m, k): Tally() for m in modes for k in ks}
    ar_steps = {m: engine.steps(target, None, m) for m in modes}
    spec_steps = {m: engine.steps(target, draft, m) for m in modes}
    for m in modes:
        _reserve_ar(ar_steps[m], 1, longest, n)
        for k in ks:
            reserve(spec_steps[m], 1, longest, n, _small_tree(k), vocab=vocab)
    for i, p in enumerate(prompts):
        out, seconds = hf_generate(target.model, p, n, eos_ids=target.eos_token_ids)
        ref = out if refs is None else refs[i]
        hf.tokens, hf.seconds, hf.cycles = (
            hf.tokens + len(out),
            hf.seconds + seconds,
            hf.cycles + len(out),
        )
        hf.mismatches += out != ref
        for timed in [False, True] if i == 0 else [True]:
            kw: dict[str, Any] = {"max_new_tokens": n if timed else min(WARMUP_TOKENS, n)}
            kw["eos_ids"] = eos
            for m in modes:
                ar[m].call([ref], timed, ar_generate, target.model, [p], steps=ar_steps[m], **kw)
                for k in ks:
                    spec[m, k].call(
                        [ref], timed, generate, target.model, draft, [p], steps=spec_steps[m],
                        shape=_small_tree(k), **kw,
                    )  # fmt: skip
    rows = {"HF generate": hf.row()}
    rows |= {f"engine AR{_suffix(m)}": ar[m].row() for m in modes}
    rows |= {f"trained k={k}{_suffix(m)}": spec[m, k].row() for m in modes for k in ks}
    return rows


def trained_summary(rows: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The best trained row (over k and modes) against HF ``generate`` and against the best
    engine AR loop (compiled where measured)."""
    names = [n for n in rows if n.startswith("trained k=")]
    best = max(names, key=lambda n: rows[n]["tokens_per_s"])
    ar = max((n for n in rows if n.startswith("engine AR")), key=lambda n: rows[n]["tokens_per_s"])
    r = rows[best]
    return {
        "best": best,
        "best_ar": ar,
        "ratio_over_hf": r["tokens_per_s"] / rows["HF generate"]["tokens_per_s"],
        "ratio_over_best_ar": r["tokens_per_s"] / rows[ar]["tokens_per_s"],
        "acceptance_length": r["acceptance_length"],
        "mismatches": sum(v["mismatches"] for v in rows.values()),
        "late": sum(v.get("late", 0.0) for v in rows.values()),
        "compiles_after_warmup": sum(v.get("compiles_after_warmup", 0.0) for v in rows.values()),
        "compile_s": sum(v.get("compile_s", 0.0) for v in rows.values()),
        "warmup_s": sum(v.get("warmup_s", 0.0) for v in rows.values()),
    }


def memory(target: Target, draft: Draft, prompts: list[list[int]], n: int) -> dict[str, float]:
    """Part 4: RSS before and after decoding ``prompts`` one after another (one eager
    :class:`Steps`, its caches reserved for the longest prompt, as the other parts do)."""
    eos = target.eos_token_ids
    shape = TreeShape(depth=3, topk=4, num_draft_tokens=6)
    steps = Steps(target.model, draft, "none")
    vocab = int(draft.draft_to_target.shape[0])
    reserve(steps, 1, max(map(len, prompts)), n, shape, vocab=vocab)
    kw: dict[str, Any] = {"max_new_tokens": n, "shape": shape, "eos_ids": eos, "steps": steps}
    generate(target.model, draft, prompts[:1], **kw)
    gc.collect()
    before = _rss_mb()
    for p in prompts:
        generate(target.model, draft, [p], **kw)
    gc.collect()
    return {"prompts": float(len(prompts)), "rss_before_mb": before, "rss_after_mb": _rss_mb()}


def summary(
    b1: dict[str, dict[str, float]], batched: dict[str, dict[str, float]], b: int
) -> dict[str, float]:
    """The two tracked figures: the oracle's best b=1 tokens/s over HF ``generate`` (with its
    k and bookkeeping share) and its best b=``b`` tokens/s over the engine's batched AR loop."""

    def best(rows: dict[str, dict[str, float]], prefix: str) -> tuple[int, dict[str, float]]:
        ks = {
            int(name.removeprefix(prefix)): r for name, r in rows.items() if name.startswith(prefix)
        }
        k = max(ks, key=lambda k: ks[k]["tokens_per_s"])
        return k, ks[k]

    k1, r1 = best(b1, "oracle k=")
    kb, rb = best(batched, f"oracle b={b} k=")
    return {
        "b1_ratio_over_hf": r1["tokens_per_s"] / b1["HF generate"]["tokens_per_s"],
        "b1_best_k": float(k1),
        "b1_bookkeeping_share": r1["bookkeeping_share"],
        "batched_b": float(b),
        "batched_ratio_over_ar": rb["tokens_per_s"] / batched[f"engine AR b={b}"]["tokens_per_s"],
        "batched_best_k": float(kb),
    }


def _args(argv: list[str]) -> argparse.Namespace:
    ap = harness.parser("decode_bench", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--prompts",
        default="../shared/data/specbench",
        help="dir of *.jsonl or builtin names, comma-separated",
    )
    ap.add_argument(
        "--num-prompts", type=int, default=8, help="MT-bench prompts for parts 1-3 (>= --batch)"
    )
    ap.add_argument("--batch", type=int, default=8, help="b of part 2")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    harness.add_threads(ap)
    ap.add_argument(
        "--draft", default="best", help="trained draft folder, 'best' (runs/tokens) or 'none'"
    )
    harness.add_run_root(ap)
    harness.add_cache(ap)
    ap.add_argument("--memory-prompts", type=int, default=100, help="part 4 (0: skip it)")
    ap.add_argument("--quick", action="store_true", help="parts 1-2 only, fewer k (< 3 min)")
    ap.add_argument(
        "--oracle-accept", type=float, default=1.0, help="P(an oracle proposal is kept)"
    )
    ap.add_argument(
        "--compile",
        choices=["none", "graphs", "compile"],
        default="none",
        help="parts 1-2's engine steps",
    )
    ap.add_argument(
        "--trained-compile",
        choices=["none", "compile", "both"],
        default="both",
        help="part 3's engine steps: eager, compiled (torch.compile) or both side by side",
    )
    ap.add_argument(
        "--trained-only", action="store_true", help="part 3 only (and 4), HF as reference"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the oracle's draws")
    harness.add_json(ap)
    args = ap.parse_args(argv)
    if args.num_prompts < 1 or args.max_new_tokens < 1 or args.threads < 1 or args.batch < 2:
        ap.error(
            "--num-prompts, --max-new-tokens and --threads must be >= 1, --batch >= 2 "
            f"(got {args.num_prompts}, {args.max_new_tokens}, {args.threads}, {args.batch})"
        )
    if args.num_prompts < args.batch:
        ap.error(
            f"--num-prompts {args.num_prompts} gives the b={args.batch} part no batch: it needs "
            f"at least --batch {args.batch} prompts. Fix: --num-prompts {args.batch} "
            f"(or --batch {args.num_prompts})"
            if args.num_prompts >= 2
            else f"--num-prompts {args.num_prompts} gives the b={args.batch} part no batch. "
            f"Fix: --num-prompts {args.batch}"
        )
    if args.memory_prompts < 0:
        ap.error(f"--memory-prompts {args.memory_prompts} must be >= 0 (0 skips part 4)")
    if not 0.0 <= args.oracle_accept <= 1.0:
        ap.error(f"--oracle-accept {args.oracle_accept} must be in [0, 1]. Example: 0.8")
    if args.compile == "graphs":
        ap.error(
            "--compile graphs captures CUDA graphs and this benchmark runs on the CPU. "
            "Fix: --compile compile (torch.compile) or --compile none"
        )
    if args.quick:
        args.draft, args.memory_prompts = "none", 0
        if args.trained_only:
            ap.error("--quick skips part 3 and --trained-only runs only part 3: give one")
    if args.trained_only and args.draft == "none":
        ap.error("--trained-only measures a trained draft. Fix: --draft best or a folder")
    return args


@dataclass(frozen=True)
class Inputs:
    """What the arguments name, read before the target is loaded."""

    set_name: str
    texts: list[str]
    """the main set's prompts (parts 1-3)"""
    memory_texts: list[str]
    """part 4's prompts"""
    draft_folder: Path | None


def _inputs(args: argparse.Namespace) -> Inputs:
    """Read the prompt sets and find the trained draft.

    Raises:
        ValueError: a prompt set that cannot be read or holds fewer than ``--num-prompts``
            prompts; no trained draft where ``--draft`` says (with the fix).
    """
    is_dir = Path(args.prompts).is_dir() or "/" in args.prompts
    src: list[str] | Path = Path(args.prompts) if is_dir else args.prompts.split(",")
    sets = load_prompt_sets(src, n=max(args.num_prompts, args.memory_prompts, 1))
    by_name = {s.name: s for s in sets}
    main_set = by_name.get("mt_bench", sets[0])
    texts = list(main_set.prompts[: args.num_prompts])
    if len(texts) < args.num_prompts:
        raise ValueError(
            f"--prompts {args.prompts}: the set {main_set.name} holds {len(texts)} prompts, "
            f"fewer than --num-prompts {args.num_prompts}. Fix: --num-prompts {len(texts)} "
            f"(and --batch <= {len(texts)}), or a larger set"
        )
    folder: Path | None = None
    if args.draft != "none":
        if args.draft == "best":
            try:
                folder = find_trial_draft(args.run_root, "tokens", "best")
            except ValueError as e:
                raise ValueError(f"--draft best: {e}. Or skip part 3: --draft none") from None
        else:
            folder = Path(args.draft)
            if not (folder / "arch.json").exists():
                raise ValueError(
                    f"--draft {args.draft}: no draft saved there (no arch.json). Fix: a folder "
                    "saved by draft_train, --draft best, or --draft none"
                )
    memory_texts = [t for s in sets for t in s.prompts][: args.memory_prompts]
    return Inputs(main_set.name, texts, memory_texts, folder)


def run(args: argparse.Namespace, inputs: Inputs) -> dict[str, Any]:
    """Parts 1-4 (1-2 with ``--quick``); prints each table and the summary line."""
    engine = Engine(compile=args.compile, oracle_accept=args.oracle_accept, seed=args.seed)
    target = harness.target(args.threads, args.cache_dir)
    prompts = [chat_prompt_ids(target.tokenizer, t) for t in inputs.texts]
    n, b = args.max_new_tokens, args.batch
    ks1, ksb = QUICK_KS if args.quick else FULL_KS
    print(
        f"target {DEFAULT_TARGET} float32, {args.threads} threads, {len(prompts)} "
        f"{inputs.set_name} prompts, {n} new tokens, temperature 0, oracle_accept "
        f"{args.oracle_accept}, compile {args.compile}" + (", quick" if args.quick else "")
    )
    out: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    rows: dict[str, dict[str, float]] = {}
    rows_b: dict[str, dict[str, float]] = {}
    refs: list[list[int]] | None = None
    if not args.trained_only:
        rows, refs = oracle_b1(target, prompts, n, ks1, engine)
        print_rows("1. oracle draft, b=1 (x = vs HF generate greedy)", rows, "HF generate")
        out["oracle_b1"] = rows
        rows_b = oracle_batched(target, prompts, refs, n, b, ksb, engine)
        print_rows(
            f"2. oracle draft, b={b} (x = vs the engine's batched AR)", rows_b, f"engine AR b={b}"
        )
        out[f"oracle_b{b}"] = rows_b
    draft: Draft | None = None
    if inputs.draft_folder is not None:
        folder = inputs.draft_folder
        embed, head = target.frozen_weights()
        dm = DraftModel.load(folder, embed_weight=embed, lm_head_weight=head).eval()
        draft = cast(Draft, dm)
        tc = args.trained_compile
        modes = ["none", "compile"] if tc == "both" else [tc]
        rows_t = trained(target, dm, prompts, refs, n, TRAINED_KS, modes, engine)
        ar_base = "engine AR compiled" if "compile" in modes else "engine AR"
        print_rows(
            f"3. trained draft {folder}, b=1 (x = vs HF generate greedy and vs {ar_base})",
            rows_t, "HF generate", ar_base,
        )  # fmt: skip
        for name, r in rows_t.items():
            if name.startswith("trained"):
                ar_name = "engine AR compiled" if name.endswith("compiled") else "engine AR"
                ar_ms = rows_t[ar_name]["ms_per_cycle"]
                print(
                    f"   {name}: break-even acceptance length = {r['ms_per_cycle'] / ar_ms:.2f} "
                    f"(cycle {r['ms_per_cycle']:.1f} ms = draft {r['draft_ms_per_cycle']:.1f} + "
                    f"verify {r['verify_ms_per_cycle']:.1f} + book "
                    f"{r['bookkeeping_ms_per_cycle']:.1f}; {ar_name} step {ar_ms:.1f} ms), "
                    f"measured {r['acceptance_length']:.2f}"
                )
        ts = trained_summary(rows_t)
        print(
            f"   best: {ts['best']} {ts['ratio_over_hf']:.2f}x HF generate, "
            f"{ts['ratio_over_best_ar']:.2f}x {ts['best_ar']} (tau {ts['acceptance_length']:.2f}); "
            f"mismatches {ts['mismatches']:.0f}, late {ts['late']:.0f}; compiling "
            f"{ts['compile_s']:.0f} s in Steps.prepare, warm-up calls {ts['warmup_s']:.0f} s, "
            f"{ts['compiles_after_warmup']:.0f} graphs compiled after the warm-up"
        )
        out["trained"] = {"draft": str(folder), **rows_t}
        out["trained_summary"] = ts
    if inputs.memory_texts:
        if draft is None:
            draft = cast(Draft, OracleDraft(prompts[0] * 2, target.model.config.vocab_size))
        mem_prompts = [chat_prompt_ids(target.tokenizer, t) for t in inputs.memory_texts]
        mem = memory(target, draft, mem_prompts, 16)
        print(
            f"\n4. memory: {mem['prompts']:.0f} consecutive prompts x 16 tokens: RSS "
            f"{mem['rss_before_mb']:.0f} MB before, {mem['rss_after_mb']:.0f} MB after "
            f"({mem['rss_after_mb'] - mem['rss_before_mb']:+.0f} MB)"
        )
        out["memory"] = mem
    if rows:
        s = summary(rows, rows_b, b)
        out["summary"] = s
        print(
            f"\nsummary: oracle b=1 {s['b1_ratio_over_hf']:.2f}x HF generate "
            f"(k={s['b1_best_k']:.0f}, bookkeeping {s['b1_bookkeeping_share']:.0%}); oracle "
            f"b={b} {s['batched_ratio_over_ar']:.2f}x batched AR (k={s['batched_best_k']:.0f})"
        )
    if args.json:  # NaN (undefined: e.g. HF generate's acceptance length) as null
        harness.write_json(args.json, out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse, check the inputs (one line and exit code 2 when they are wrong), run."""
    args = _args(sys.argv[1:] if argv is None else argv)
    try:
        inputs = _inputs(args)
    except ValueError as e:
        return harness.refusal("decode_bench", f"error: {e}")
    run(args, inputs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
