"""Acceptance length on held-out prompt sets, and the lossless check against greedy decoding.

For every prompt the target's own greedy output (HF ``generate``, ``do_sample=False``) is computed
once and cached on disk; the speculative output must equal it token for token. A difference is
excused only at a near-tie: the target's top-2 logits at the first differing position are within
``NEAR_TIE`` of each other (a batched forward and a one-token forward differ by float rounding).
Any other difference is counted as a mismatch (a bug).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from filelock import FileLock
from transformers import PreTrainedModel

from workloads.data import PromptSet, chat_prompt_ids
from workloads.draft_model import DraftModel
from workloads.tree_decode import TreeShape, speculative_generate

NEAR_TIE = 1e-4
"""top-2 logit gap (nats) under which a greedy divergence is float rounding, not a bug"""


@dataclass
class EvalResult:
    """Acceptance per prompt, per set and overall, losslessness counts and timings (seconds)."""

    per_prompt: list[dict[str, object]] = field(default_factory=list)
    mismatches: int = 0
    near_ties: int = 0
    spec_s: float = 0.0
    greedy_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0

    def acceptance_length(self, prompt_set: str | None = None) -> float:
        """Mean accepted tokens per cycle over all cycles of the set (or of every set)."""
        rows = [r for r in self.per_prompt if prompt_set in (None, r["set"])]
        cycles = sum(int(r["cycles"]) for r in rows)  # type: ignore[call-overload]
        accepted = sum(int(r["accepted"]) for r in rows)  # type: ignore[call-overload]
        return accepted / cycles if cycles else float("nan")


def greedy_reference(
    target: PreTrainedModel,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    eos_ids: frozenset[int],
    cache_dir: Path,
    target_name: str,
) -> tuple[list[int], float]:
    """The target's greedy continuation of ``prompt_ids`` and its seconds, cached on disk."""
    key = json.dumps([target_name, str(target.dtype), prompt_ids, max_new_tokens, sorted(eos_ids)])
    path = cache_dir / "greedy" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists():
            cached = json.loads(path.read_text())
            return cached["tokens"], cached["seconds"]
        t0 = time.perf_counter()
        with torch.inference_mode():
            # PreTrainedModel does not declare generate (GenerationMixin adds it per model)
            out = target.generate(  # type: ignore[operator]
                torch.tensor([prompt_ids], device=target.device),
                attention_mask=torch.ones(
                    1, len(prompt_ids), dtype=torch.long, device=target.device
                ),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=sorted(eos_ids),
                pad_token_id=min(eos_ids),
            )
        seconds = time.perf_counter() - t0
        tokens = out[0, len(prompt_ids) :].tolist()
        path.write_text(json.dumps({"tokens": tokens, "seconds": seconds}))
    return tokens, seconds


@torch.inference_mode()
def top2_gap(target: PreTrainedModel, ids: list[int]) -> float:
    """The target's top-1 minus top-2 logit after ``ids`` (a near-tie when < NEAR_TIE)."""
    logits = target(input_ids=torch.tensor([ids], device=target.device)).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def evaluate(
    target: PreTrainedModel,
    tokenizer: object,
    draft: DraftModel,
    prompt_sets: list[PromptSet],
    *,
    shape: TreeShape,
    max_new_tokens: int,
    eos_ids: frozenset[int],
    cache_dir: Path,
    target_name: str,
    on_prompt: Callable[[str, int, float], None] | None = None,
) -> EvalResult:
    """Decode every prompt speculatively and compare with the target's greedy output.

    Returns per-prompt rows: set, index, cycles, accepted (sum of acceptance lengths), tokens,
    acceptance_length, equal (bool), near_tie (bool).
    """
    res = EvalResult()
    draft.eval()
    for ps in prompt_sets:
        for i, text in enumerate(ps.prompts):
            prompt = chat_prompt_ids(tokenizer, text)
            ref, ref_s = greedy_reference(
                target,
                prompt,
                max_new_tokens=max_new_tokens,
                eos_ids=eos_ids,
                cache_dir=cache_dir,
                target_name=target_name,
            )
            out = speculative_generate(
                target,
                draft,
                prompt,
                max_new_tokens=max_new_tokens,
                depth=shape.depth,
                topk=shape.topk,
                num_draft_tokens=shape.num_draft_tokens,
                eos_ids=eos_ids,
            )
            equal = out.tokens == ref
            near_tie = False
            if not equal:
                first = next(
                    (j for j, (a, b) in enumerate(zip(out.tokens, ref, strict=False)) if a != b),
                    min(len(out.tokens), len(ref)),
                )
                near_tie = top2_gap(target, prompt + ref[:first]) < NEAR_TIE
                res.near_ties += int(near_tie)
                res.mismatches += int(not near_tie)
            res.spec_s += out.total_s
            res.greedy_s += ref_s
            res.draft_s += out.draft_s
            res.verify_s += out.verify_s
            res.per_prompt.append(
                {
                    "set": ps.name,
                    "index": i,
                    "cycles": len(out.accept_lengths),
                    "accepted": sum(out.accept_lengths),
                    "tokens": len(out.tokens),
                    "acceptance_length": out.acceptance_length,
                    "equal": equal,
                    "near_tie": near_tie,
                    "spec_s": out.total_s,
                    "greedy_s": ref_s,
                }
            )
            if on_prompt is not None:
                on_prompt(ps.name, i, out.acceptance_length)
    return res
