"""The engine's decoding benchmark: throughput and acceptance of tree speculative decoding at
batch b, the trial of ``decode_bench`` and the engine's side of a ``serve_bench`` trial.

For one tree shape and batch size it decodes the same prompts three ways, interleaved batch by
batch: the engine's tree speculative decoding, the engine's own autoregressive loop at the same
batch size, and (at b = 1) HF ``generate`` greedy with the same dtype and threads. Config in
(:class:`~workloads.decode_bench.config.DecodeBenchConfig`), metrics and artifacts out.
Source: Scylla (arXiv 2505.07858) Sec. 3.2 and Thm 1.3 (throughput vs batch size).
"""

from __future__ import annotations

import json
import logging
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import torch

from workloads.data import chat_prompt_ids, load_prompt_sets
from workloads.data.prompts import check_prompt_room, round_robin
from workloads.decode_bench.config import DecodeBenchConfig, DraftSourceConfig
from workloads.engine.acceptance import acceptance_metrics
from workloads.engine.ar_decode import ar_generate
from workloads.engine.ar_decode import reserve as reserve_ar
from workloads.engine.hf_baseline import hf_generate
from workloads.engine.k_law import make_k_law
from workloads.engine.oracle_draft import OracleDraft
from workloads.engine.steps import Steps
from workloads.engine.tree_decode import (
    BatchResult,
    ShapePolicy,
    TreeShape,
    generate,
    reserve,
)
from workloads.measure.drafts import check_draft_folder, find_trial_draft
from workloads.models.draft import Draft, DraftArch, DraftModel
from workloads.models.target import (
    Target,
    embedding_scale,
    load_target,
    output_device,
)
from workloads.result import Progress, TrialResult
from workloads.roofline.hardware import HardwareProfile, cached_local_cpu
from workloads.training.evaluation import greedy_reference, max_positions, near_tie

log = logging.getLogger(__name__)


def _draft(
    cfg: DraftSourceConfig, target: Target, run_root: Path | None, seed: int
) -> tuple[DraftModel | None, str]:
    """The draft to decode with (None for the oracle, built per batch) and where it came from."""
    model = target.model
    embed = cast(torch.Tensor, model.get_input_embeddings().weight)
    head = cast(torch.Tensor, model.get_output_embeddings().weight)
    if cfg.source == "oracle":
        return None, "oracle"
    if cfg.source == "fresh":
        arch = DraftArch.from_target(
            model.config, layers=cfg.layers, output_norm=cfg.output_norm,
            embed_scale=embedding_scale(model),
        )  # fmt: skip
        torch.manual_seed(seed)
        draft, where = DraftModel(arch, embed_weight=embed, lm_head_weight=head), "fresh"
    else:
        if cfg.source == "path":
            folder = Path(cast(str, cfg.path)).expanduser()
        else:
            if run_root is None:
                raise ValueError("draft.source 'trial' needs the run root (run it via submit)")
            folder = find_trial_draft(run_root, cast(str, cfg.sweep), cast(str, cfg.trial_key))
        check_draft_folder(folder)
        draft = DraftModel.load(folder, embed_weight=embed, lm_head_weight=head)
        where = str(folder)
    return draft.cast_to(model.dtype, device=model.device).eval(), where  # RoPE stays fp32


def _vocab(draft: DraftModel | None, target: Target) -> int:
    """The draft vocabulary (the oracle proposes over the target's)."""
    if draft is None:
        return int(target.model.config.vocab_size)
    return int(draft.draft_to_target.shape[0])


def bench_prompts(cfg: DecodeBenchConfig, target: Target) -> list[list[int]]:
    """``num_prompts`` prompts round-robin over the sets, cycled to fill whole batches, each
    checked to fit the target's positions with ``max_new_tokens`` and the tree's depth.

    Raises:
        workloads.data.prompts.PromptTooLong: the first prompt that does not fit, naming its
            set and number.
    """
    sets = load_prompt_sets(cfg.prompts.prompt_sets, n=cfg.prompts.num_prompts)
    texts = round_robin(sets, cfg.prompts.num_prompts)
    ids = [chat_prompt_ids(target.tokenizer, t) for t in texts]
    limit = max_positions(target.model)
    d = cfg.decode
    depth = d.depth if d.num_draft_tokens == "auto" else min(d.depth, d.num_draft_tokens - 1)
    where = {t: (s.name, i) for s in reversed(sets) for i, t in enumerate(s.prompts)}
    for text, prompt in zip(texts, ids, strict=True):
        if limit is not None:
            name, i = where[text]
            check_prompt_room(
                len(prompt), where=f"prompts.prompt_sets {name!r} prompt {i + 1}",
                max_new_tokens=d.max_new_tokens, depth=depth, max_positions=limit,
                field="decode.max_new_tokens", target=cfg.target.model,
            )  # fmt: skip
    b = d.batch_size
    n = -(-len(ids) // b) * b
    return [ids[i % len(ids)] for i in range(n)]


def divergence(
    target: Target, prompt: list[int], ref: list[int], out: list[int]
) -> dict[str, object] | None:
    """Where and by how much ``out`` left the greedy ``ref``: None when equal, else
    ``{"kind": "near_tie" | "mismatch", "at": first differing token (0 = the first generated),
    "gap": the target's top-2 logit gap there (nats), "threshold": the dtype's near-tie
    threshold there}`` (DESIGN.md); a length difference (one a prefix of the other) is a
    mismatch with gap and threshold None."""
    if out == ref:
        return None
    i = next((j for j, (a, b) in enumerate(zip(out, ref, strict=False)) if a != b), None)
    if i is None:
        return {"kind": "mismatch", "at": min(len(out), len(ref)), "gap": None, "threshold": None}
    with torch.inference_mode():
        tie = near_tie(target.model, prompt + ref[:i])  # threshold set by the target's dtype
    kind = "near_tie" if tie.is_tie else "mismatch"
    return {"kind": kind, "at": i, "gap": tie.gap, "threshold": tie.threshold}


def mismatch_kind(target: Target, prompt: list[int], ref: list[int], out: list[int]) -> str:
    """'' if ``out`` equals the greedy ``ref``, else 'near_tie' or 'mismatch' (DESIGN.md)."""
    found = divergence(target, prompt, ref, out)
    return "" if found is None else str(found["kind"])


def run(
    cfg: DecodeBenchConfig,
    *,
    cache_dir: Path,
    out_dir: Path,
    run_root: Path | None = None,
    progress: Progress | None = None,
) -> TrialResult:
    """Run one trial.

    Args:
        cfg: the trial config.
        cache_dir: shared cache (converted target, greedy references, the CPU's roofline).
        out_dir: this trial's artifact folder (``per_batch.json``).
        run_root: where ``draft.source: trial`` looks for draft_train trials.
        progress: called with one-line progress messages.

    Returns:
        metrics (tokens/s are generated tokens per wall second over the whole batch, prefill
        included; seconds per cycle are batch cycles): ``tokens_per_s``, ``ar_tokens_per_s``,
        ``speedup`` (over the AR loop), ``hf_tokens_per_s`` and ``speedup_vs_hf`` (b = 1, else
        NaN), ``acceptance_length`` (pooled over verify steps: emitted tokens / row-cycles
        over every decoded row, SGLang's and vLLM's definition) with its 95% bootstrap CI over
        rows ``acceptance_length_ci_low`` / ``_ci_high``, the mean of per-row means
        ``acceptance_length_prompt_mean`` (SpecForge's) with ``_ci_low`` / ``_ci_high`` (a
        prompt cycled to fill the last batch counts once per row; see
        :mod:`workloads.engine.acceptance`), ``cycles``, ``draft_s_per_cycle``,
        ``verify_s_per_cycle``, ``bookkeeping_s_per_cycle``, ``bookkeeping_share`` (of cycle time),
        ``ar_s_per_step``, ``break_even_acceptance_length`` (cycle time / AR step time: the
        acceptance length at which speculation matches AR), ``mismatches``, ``near_ties`` (T = 0,
        against the target's greedy output; NaN when sampling), ``generated_tokens``,
        ``peak_rss_mb`` (this process's peak RSS), ``prompt_tokens_mean``, ``depth_used`` (the
        deepest tree after the cap at num_draft_tokens - 1), ``num_draft_tokens_mean`` (k per
        cycle, averaged over the timed cycles: the fixed k, or what ``auto`` picked), and on
        CPU ``hw.peak_flops`` (FLOP/s), ``hw.bandwidth`` (bytes/s) and ``hw.cached``
        (:func:`_cpu_profile`); ``compile.captures``,
        ``compile.capture_s``, ``compile.compiles``, ``compile.compile_s``,
        ``compile.fallbacks`` (shapes whose capture failed: they ran eagerly), ``compile.late``
        (shapes first met inside the timers) of the speculative steps
        (:class:`~workloads.engine.steps.StepStats`; all outside the timed figures), and the
        same for the AR loop as ``ar_compile.*``.

    Raises:
        ValueError: a bad draft source, prompt set or device; a prompt that does not fit the
            target's positions (:func:`_prompts`).
    """
    say = progress or (lambda msg: log.info("%s", msg))
    d = cfg.decode
    t = cfg.target
    target = load_target(
        t.model, cache_dir=cache_dir, dtype=t.dtype, device=cfg.device, weights=t.weights,
        device_map=t.device_map, seed=cfg.seed,
    )  # fmt: skip
    if d.attn_implementation != "sdpa":
        target.model.set_attn_implementation(d.attn_implementation)
    draft, where = _draft(cfg.draft, target, run_root, cfg.seed)
    prompts = bench_prompts(cfg, target)
    cpu = _cpu_profile(target, cache_dir)
    shape = _tree_shape(cfg, target, prompts, run_root, cache_dir, say)
    b, greedy = d.batch_size, d.temperature == 0
    oracle = cfg.draft.source == "oracle"  # it proposes from the greedy references
    refs = _references(cfg, target, prompts, cache_dir) if greedy or oracle else []
    say(f"target on {target.model.device}, draft {where}, {len(prompts)} prompts, b={b}")
    dec = _decoders(cfg, target, draft, refs, shape, longest=max(map(len, prompts)))
    batches = [list(range(i, i + b)) for i in range(0, len(prompts), b)]
    for idx in batches[: cfg.warmup]:  # untimed: first-call allocations and kernel selection
        dec.warm_up([prompts[i] for i in idx], idx)
    timed = _timed_batches(cfg, dec, prompts, batches, say)
    result = _trial_result(cfg, dec, prompts, timed, out_dir)
    if cpu is not None:  # the roofline of this machine, at this dtype and threads
        prof, cached = cpu
        result.metrics.update(
            {"hw.peak_flops": prof.peak_flops, "hw.bandwidth": prof.bandwidth, "hw.cached": cached}
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "per_batch.json").write_text(json.dumps(timed.per_batch, indent=1))
    return result


def _cpu_profile(target: Target, cache_dir: Path) -> tuple[HardwareProfile, float] | None:
    """On a CPU, this machine's ``local-cpu`` roofline at the target's dtype and torch's threads,
    measured once for every trial sharing ``cache_dir``, and 1.0 when it was read from that
    cache (0.0: measured by this trial); None on a GPU."""
    if target.model.device.type != "cpu":
        return None
    dtype = str(target.model.dtype).removeprefix("torch.")
    prof, cached = cached_local_cpu(cache_dir, dtype=dtype)
    return prof, float(cached)


def _tree_shape(
    cfg: DecodeBenchConfig,
    target: Target,
    prompts: list[list[int]],
    run_root: Path | None,
    cache_dir: Path,
    say: Progress,
) -> TreeShape | ShapePolicy:
    """The tree of every cycle: fixed, or with ``num_draft_tokens: auto`` a k per live batch
    size from the k law (:func:`~workloads.engine.k_law.make_k_law`, its description said),
    at the trial's mean context (prompt tokens plus half the new ones)."""
    d = cfg.decode
    law = make_k_law(
        d,
        model_config=target.model.config,
        device=target.model.device,
        dtype=str(target.model.dtype),
        run_root=run_root,
        context_len=round(sum(map(len, prompts)) / len(prompts) + d.max_new_tokens / 2),
        cache_dir=cache_dir,
    )
    shape: TreeShape | ShapePolicy = (
        TreeShape(depth=d.depth, topk=d.topk, num_draft_tokens=d.num_draft_tokens)
        if isinstance(d.num_draft_tokens, int)
        else lambda live: TreeShape(depth=d.depth, topk=d.topk, num_draft_tokens=law(live))
    )
    if d.num_draft_tokens == "auto":
        say(f"num_draft_tokens auto: {law.description}")
    return shape


def _references(
    cfg: DecodeBenchConfig, target: Target, prompts: list[list[int]], cache_dir: Path
) -> list[list[int]]:
    """The target's greedy output of each prompt (cached in ``cache_dir`` under the target's
    name, its random-weight seed and device): what T = 0 outputs are compared with and what the
    oracle draft proposes from."""
    random = f"@random-seed{cfg.seed}" if target.random_weights else ""
    refs: list[list[int]] = []
    for p in prompts:
        refs.append(
            greedy_reference(
                target.model,
                p,
                max_new_tokens=cfg.decode.max_new_tokens,
                eos_ids=target.eos_token_ids,
                cache_dir=cache_dir,
                target_name=f"{target.name}{random}@{target.model.device.type}",
            )[0]
        )
    return refs


@dataclass(frozen=True)
class _Decoders:
    """What a trial decodes with, kept over all its batches.

    Attributes:
        draft: the draft; None: the oracle, built per batch from the greedy references ``refs``.
        gen: the sampling RNG, where the logits come out (a spread target's last device).
        spec_steps, ar_steps: the steps and KV caches of the speculative and the AR decoder,
            compiled / captured once, outside the timers.
    """

    cfg: DecodeBenchConfig
    target: Target
    draft: DraftModel | None
    refs: list[list[int]]
    shape: TreeShape | ShapePolicy
    gen: torch.Generator
    spec_steps: Steps
    ar_steps: Steps

    def spec(self, batch: list[list[int]], idx: list[int], n: int) -> BatchResult:
        """Tree speculative decoding of ``batch``, the prompts ``idx``: ``n`` new tokens each."""
        cfg, model = self.cfg, self.target.model
        dr: Draft = cast(Draft, self.draft)
        if self.draft is None:
            seqs = [batch[i] + self.refs[j] for i, j in enumerate(idx)]
            vocab = model.config.vocab_size
            dr = OracleDraft(seqs, vocab, accept=cfg.draft.oracle_accept, seed=cfg.seed + idx[0])
            dr = dr.to(model.device)
        return generate(
            model,
            dr,
            batch,
            max_new_tokens=n,
            shape=self.shape,
            eos_ids=self.target.eos_token_ids,
            temperature=cfg.decode.temperature,
            generator=self.gen,
            steps=self.spec_steps,
        )

    def warm_up(self, batch: list[list[int]], idx: list[int]) -> None:
        """Both decoders on ``batch`` (the prompts ``idx``) for up to 4 new tokens, untimed: the
        first-call allocations and kernel selection (the AR loop greedy, without the RNG)."""
        n = min(4, self.cfg.decode.max_new_tokens)
        self.spec(batch, idx, n)
        if self.cfg.baselines.autoregressive:
            ar_generate(
                self.target.model,
                batch,
                max_new_tokens=n,
                eos_ids=self.target.eos_token_ids,
                steps=self.ar_steps,
            )

    def ar(self, batch: list[list[int]]) -> BatchResult:
        """The AR baseline of ``batch``: the engine's own one-token loop, timed."""
        d = self.cfg.decode
        return ar_generate(
            self.target.model,
            batch,
            max_new_tokens=d.max_new_tokens,
            eos_ids=self.target.eos_token_ids,
            temperature=d.temperature,
            generator=self.gen,
            steps=self.ar_steps,
        )


def _decoders(
    cfg: DecodeBenchConfig,
    target: Target,
    draft: DraftModel | None,
    refs: list[list[int]],
    shape: TreeShape | ShapePolicy,
    *,
    longest: int,
) -> _Decoders:
    """The trial's decoders, their KV caches reserved for batches of prompts of up to
    ``longest`` tokens."""
    d = cfg.decode
    # sampling runs where the logits come out (a spread target's last device)
    gen = torch.Generator(device=output_device(target.model)).manual_seed(cfg.seed)
    # steps and KV caches kept over every call: compiled / captured once, outside the timers
    spec_steps = Steps(target.model, draft, d.compile)
    ar_steps = Steps(target.model, None, d.compile)
    b = d.batch_size
    reserve(spec_steps, b, longest, d.max_new_tokens, shape, vocab=_vocab(draft, target))
    reserve_ar(ar_steps, b, longest, d.max_new_tokens)
    return _Decoders(cfg, target, draft, refs, shape, gen, spec_steps, ar_steps)


@dataclass
class _Timed:
    """The timed batches of a trial: per batch the speculative run and (when asked for) the AR
    one; the HF ``generate`` seconds and tokens (b = 1); the greedy comparisons' verdict counts
    (``mismatch``, ``near_tie``, ``ar_mismatch``); the ``per_batch.json`` rows."""

    spec_runs: list[BatchResult] = field(default_factory=list)
    ar_runs: list[BatchResult] = field(default_factory=list)
    hf_s: float = 0.0
    hf_tokens: int = 0
    counts: dict[str, int] = field(
        default_factory=lambda: {"mismatch": 0, "near_tie": 0, "ar_mismatch": 0}
    )
    per_batch: list[dict[str, object]] = field(default_factory=list)


def _timed_batches(
    cfg: DecodeBenchConfig,
    dec: _Decoders,
    prompts: list[list[int]],
    batches: list[list[int]],
    say: Progress,
) -> _Timed:
    """Decode each batch (prompt indices) the three ways, interleaved: the AR loop, tree
    speculative decoding, HF ``generate`` (b = 1); at T = 0 each row compared with the
    target's greedy output."""
    d, target, refs = cfg.decode, dec.target, dec.refs
    out = _Timed()
    for k, idx in enumerate(batches):
        batch = [prompts[i] for i in idx]
        ar = dec.ar(batch) if cfg.baselines.autoregressive else None
        sp = dec.spec(batch, idx, d.max_new_tokens)
        if d.batch_size == 1 and cfg.baselines.hf_generate:
            hf_out, seconds = hf_generate(
                target.model, batch[0], d.max_new_tokens, eos_ids=target.eos_token_ids,
                temperature=d.temperature,
            )  # fmt: skip
            out.hf_s += seconds
            out.hf_tokens += len(hf_out)
        diverged = []
        if d.temperature == 0:
            for row, j in enumerate(idx):
                found = divergence(target, prompts[j], refs[j], sp.tokens[row])
                verdict = "" if found is None else str(found["kind"])
                out.counts[verdict] = out.counts.get(verdict, 0) + 1
                diverged += [] if found is None else [{"prompt": j, **found}]
                if ar and mismatch_kind(target, prompts[j], refs[j], ar.tokens[row]) == "mismatch":
                    out.counts["ar_mismatch"] += 1
        out.spec_runs.append(sp)
        out.ar_runs += [ar] if ar else []
        out.per_batch.append(
            {
                "batch": k,
                "prompts": idx,
                "tokens_per_s": sp.generated / sp.total_s,
                "ar_tokens_per_s": ar.generated / ar.total_s if ar else None,
                "acceptance_length": sp.acceptance_length,
                "accept_lengths": sp.accept_lengths,
                "cycles": sp.cycles,
                "divergences": diverged,
            }
        )
        vs_ar = f" vs AR {ar.generated / ar.total_s:.1f}" if ar else ""
        say(
            f"batch {k + 1}/{len(batches)}: {sp.generated / sp.total_s:.1f} tok/s{vs_ar}, "
            f"acceptance length {sp.acceptance_length:.2f}"
        )
    return out


def _trial_result(
    cfg: DecodeBenchConfig,
    dec: _Decoders,
    prompts: list[list[int]],
    timed: _Timed,
    out_dir: Path,
) -> TrialResult:
    """The trial's metrics (see :func:`run`) from its timed batches, with ``per_batch.json`` in
    ``out_dir`` as its artifact (written by the caller)."""
    d, target = cfg.decode, dec.target
    t = timed
    result = TrialResult(artifact_paths=[out_dir / "per_batch.json"])
    result.metrics.update(_metrics(t.spec_runs, t.ar_runs, t.hf_s, t.hf_tokens, t.counts))
    result.metrics["prompt_tokens_mean"] = sum(map(len, prompts)) / len(prompts)
    ks = [k for r in t.spec_runs for k in r.num_draft_tokens]
    result.metrics["num_draft_tokens_mean"] = sum(ks) / len(ks) if ks else float("nan")
    result.metrics["depth_used"] = float(min(d.depth, max(ks, default=2) - 1))
    result.metrics["target.random_weights"] = float(target.random_weights)  # the page says so
    result.metrics.update(dec.spec_steps.stats.metrics())  # compile / capture cost and fallbacks
    result.metrics.update({f"ar_{k}": v for k, v in dec.ar_steps.stats.metrics().items()})
    if d.temperature != 0:  # sampled outputs are not compared with greedy ones
        for name in ("mismatches", "near_ties", "ar_mismatches"):
            result.metrics[name] = float("nan")
    return result


def _metrics(
    spec: list[BatchResult],
    ar: list[BatchResult],
    hf_s: float,
    hf_tokens: int,
    counts: dict[str, int],
) -> dict[str, float]:
    """Sum the batches' counts and seconds into the trial's metrics (see :func:`run`)."""
    nan = float("nan")
    gen = sum(r.generated for r in spec)
    total = sum(r.total_s for r in spec)
    cycles = sum(r.cycles for r in spec)
    cycle_s = total - sum(r.prefill_s for r in spec)
    ar_gen, ar_total = sum(r.generated for r in ar), sum(r.total_s for r in ar)
    ar_steps = sum(r.cycles for r in ar)  # no AR runs: the AR metrics are NaN
    ar_step_s = (ar_total - sum(r.prefill_s for r in ar)) / ar_steps if ar_steps else nan
    rows = [a for r in spec for a in r.accept_lengths]
    tau_n = sum(len(a) for a in rows)
    tps, ar_tps = gen / total, (ar_gen / ar_total if ar_total else nan)
    hf_tps = hf_tokens / hf_s if hf_s else nan
    per_cycle = (lambda x: x / cycles) if cycles else (lambda x: nan)
    m = {
        "tokens_per_s": tps,
        "ar_tokens_per_s": ar_tps,
        "speedup": tps / ar_tps if ar_total else nan,
        "hf_tokens_per_s": hf_tps,
        "speedup_vs_hf": tps / hf_tps if hf_s else nan,
        "acceptance_length": sum(sum(a) for a in rows) / tau_n if tau_n else nan,
        "cycles": float(cycles),
        "draft_s_per_cycle": per_cycle(sum(r.draft_s for r in spec)),
        "verify_s_per_cycle": per_cycle(sum(r.verify_s for r in spec)),
        "bookkeeping_s_per_cycle": per_cycle(sum(r.bookkeeping_s for r in spec)),
        "bookkeeping_share": sum(r.bookkeeping_s for r in spec) / cycle_s if cycle_s else nan,
        "ar_s_per_step": ar_step_s,
        "break_even_acceptance_length": per_cycle(cycle_s) / ar_step_s if cycles else nan,
        "mismatches": float(counts.get("mismatch", 0)),
        "near_ties": float(counts.get("near_tie", 0)),
        "ar_mismatches": float(counts.get("ar_mismatch", 0)),
        "generated_tokens": float(gen),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    # both definitions with CIs, a decoded row (one prompt) the bootstrap's unit; the pooled
    # value is the acceptance_length above
    m.update(acceptance_metrics([sum(a) for a in rows], [len(a) for a in rows]))
    return m
