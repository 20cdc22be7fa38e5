"""Acceptance length on held-out prompt sets, and the lossless check against greedy decoding.

For every prompt the target's own greedy output (HF ``generate``, ``do_sample=False``) is computed
once and cached on disk; the speculative output must equal it token for token. A difference is
excused only at a near-tie: the target's top-2 logits at the first differing position are closer
than :func:`near_tie_threshold` (a batched tree forward and a one-token forward round
differently). Any other difference is counted as a mismatch (a bug).

The threshold follows the target dtype's measured rounding: ``max(NEAR_TIE, NEAR_TIE_ULPS[dtype]
* spacing)``, with ``spacing`` the distance between adjacent values of the dtype at the top
logit's magnitude and ``NEAR_TIE_ULPS`` how far a verify-like forward moves the top-2 gap from the
reference's, measured per dtype (``benchmarks/near_tie_rounding.py``). In float32 the floor
``NEAR_TIE`` rules; in bfloat16 (8 significant bits: spacing 0.125 at a logit of 16-32) ties are
real, and greedy speculative output differs from plain greedy decoding
without any bug: EAGLE's authors find speculative and vanilla greedy output identical in
float32 and attribute the differences in half precision to floating-point error
(https://github.com/SafeAILab/EAGLE/issues/75, citing Spec-Bench, arXiv 2401.07851, Appendix E).
A float32 target whose matmuls run in TF32 (on a CUDA GPU, see :func:`uses_tf32`; training
turns it on there) rounds their inputs to TF32's 10 explicit mantissa bits (NVIDIA, "NVIDIA A100
Tensor Core GPU Architecture", 2020, TensorFloat-32; PyTorch notes "TensorFloat-32 (TF32) on
Ampere (and later) devices"), so its spacing is TF32's, ``2**-10``, not float32's.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from filelock import FileLock
from transformers import PreTrainedModel

from workloads.data import PromptSet, chat_prompt_ids
from workloads.data.prompts import check_prompt_room
from workloads.engine.tree_decode import TreeShape, speculative_generate
from workloads.models.draft import DraftModel
from workloads.models.target import input_device, output_device

NEAR_TIE = 1e-4
"""floor of the near-tie threshold (nats): a top-2 logit gap under it is float rounding in any
dtype (float32's threshold)"""

NEAR_TIE_ULPS: dict[str, float] = {"bfloat16": 7, "float16": 8, "float32": 46, "tf32": 16}
"""the near-tie threshold per dtype, in units of its spacing at the top logit: twice the largest
change of the top-2 gap measured between a forward of 8 tokens over a KV cache (a verify step)
and one token at a time (the greedy reference), on 8 spec-bench prompts x 48 greedy tokens of
SmolLM2-135M and Gemma-3-270M on a CPU (``python -m benchmarks.near_tie_rounding``,
2026-12-07): bfloat16 3.5 and 2.0 spacings (argmax flips only at gaps of 0-2), float16 4.0
(SmolLM2; Gemma-3 overflows float16, NaN logits, and is refused at load), float32 23 and 17
(under NEAR_TIE: float32's floor rules). TF32 was not measured (no GPU): its 16 is the earlier
rule's, twice the largest single-logit error seen in bfloat16.
Before 2026-12-07 every dtype used 16, which in bfloat16 excused gaps up to 2.0 at a top
logit of 16-32 while the ties seen in vLLM were 0-0.25 apart"""

TF32_EPS = 2.0**-10
"""machine epsilon of TF32 (10 explicit mantissa bits, as float16; NVIDIA Ampere architecture
whitepaper), the spacing at 1 of a float32 matmul that runs in TF32"""


@dataclass
class EvalResult:
    """Acceptance per prompt, per set and overall, losslessness counts and timings (seconds)."""

    per_prompt: list[dict[str, object]] = field(default_factory=list)
    mismatches: int = 0
    """outputs that differ from greedy decoding where the target's top-2 gap is not a near-tie"""
    near_ties: int = 0
    """outputs that differ from greedy decoding at a near-tie (excused)"""
    near_tie_threshold: float = 0.0
    """largest near-tie threshold (nats) applied at a divergence; 0.0 when no output diverged"""
    dtype: str = ""
    """the target's dtype, which sets the threshold (see :func:`near_tie_threshold`)"""
    tf32: bool = False
    """whether the target's float32 matmuls ran in TF32 (sets the threshold too)"""
    spec_s: float = 0.0
    greedy_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0

    def acceptance_length(self, prompt_set: str | None = None) -> float:
        """Emitted tokens per cycle pooled over all cycles of the set (or of every set): the
        pooled definition of :mod:`workloads.engine.acceptance` (the trial metric)."""
        rows = [r for r in self.per_prompt if prompt_set in (None, r["set"])]
        cycles = sum(int(r["cycles"]) for r in rows)  # type: ignore[call-overload]
        accepted = sum(int(r["accepted"]) for r in rows)  # type: ignore[call-overload]
        return accepted / cycles if cycles else float("nan")


def greedy_key(
    target: PreTrainedModel,
    target_name: str,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    eos_ids: frozenset[int],
) -> str:
    """24 hex chars naming a greedy reference: the target (name, dtype, the device types its
    input and logits are on, whether its matmuls run in TF32), the prompt and the generation
    settings. A reference computed on the CPU is never reused on a GPU (they round
    differently, and the lossless check compares against the reference token for token)."""
    devices = sorted({input_device(target).type, output_device(target).type})
    key = json.dumps(
        [
            target_name,
            str(target.dtype),
            devices,
            target_uses_tf32(target),
            prompt_ids,
            max_new_tokens,
            sorted(eos_ids),
        ]
    )
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def greedy_reference(
    target: PreTrainedModel,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    eos_ids: frozenset[int],
    cache_dir: Path,
    target_name: str,
) -> tuple[list[int], float]:
    """The target's greedy continuation of ``prompt_ids`` and its seconds, cached on disk
    (under :func:`greedy_key`)."""
    key = greedy_key(
        target, target_name, prompt_ids, max_new_tokens=max_new_tokens, eos_ids=eos_ids
    )
    dev = input_device(target)
    path = cache_dir / "greedy" / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists():
            cached = json.loads(path.read_text())
            return cached["tokens"], cached["seconds"]
        t0 = time.perf_counter()
        with torch.inference_mode():
            # PreTrainedModel does not declare generate (GenerationMixin adds it per model)
            out = target.generate(  # type: ignore[operator]
                torch.tensor([prompt_ids], device=dev),
                attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long, device=dev),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=sorted(eos_ids),
                pad_token_id=min(eos_ids),
            )
        seconds = time.perf_counter() - t0
        tokens = out[0, len(prompt_ids) :].tolist()
        path.write_text(json.dumps({"tokens": tokens, "seconds": seconds}))
    return tokens, seconds


def near_tie_threshold(top_logit: float, dtype: torch.dtype, *, tf32: bool = False) -> float:
    """Top-2 logit gap (nats) under which a greedy divergence is rounding, not a bug.

    ``max(NEAR_TIE, NEAR_TIE_ULPS[dtype] * spacing)``, ``spacing = eps * 2**floor(log2|top|)``,
    the distance between adjacent values at the top logit's magnitude (``top_logit`` in nats),
    with ``eps`` the ``dtype``'s or, where ``tf32`` (a float32 target whose matmuls run in TF32,
    see :func:`uses_tf32`), TF32's :data:`TF32_EPS` and its count. E.g. bfloat16 at a top logit
    of 20: 7 * 0.125 = 0.875; float32 in TF32: 16 * 2**-10 * 16 = 0.25; float32: the floor 1e-4.
    """
    if not dtype.is_floating_point or top_logit == 0 or not math.isfinite(top_logit):
        return NEAR_TIE
    name = "tf32" if tf32 and dtype == torch.float32 else str(dtype).removeprefix("torch.")
    eps = TF32_EPS if name == "tf32" else torch.finfo(dtype).eps
    spacing = eps * 2.0 ** math.floor(math.log2(abs(top_logit)))
    return max(NEAR_TIE, NEAR_TIE_ULPS.get(name, max(NEAR_TIE_ULPS.values())) * spacing)


def cuda_matmul_tf32() -> bool:
    """Whether CUDA float32 matmuls run in TF32 now, as set by any of torch's switches
    (``torch.backends.cuda.matmul.allow_tf32``, ``torch.set_float32_matmul_precision`` other
    than ``"highest"``, ``torch.backends[.cuda.matmul].fp32_precision = "tf32"``). Read through
    ``fp32_precision``, which reflects them all; reading the legacy flags raises once the new
    API was used."""
    precision = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    if precision is not None:
        return bool(precision == "tf32")
    return bool(torch.backends.cuda.matmul.allow_tf32)  # torch before the fp32_precision API


def uses_tf32(dtype: torch.dtype, device: torch.device, *, enabled: bool | None = None) -> bool:
    """Whether matmuls of ``dtype`` on ``device`` run in TF32: float32 on a CUDA device while
    TF32 is on (``enabled``; default :func:`cuda_matmul_tf32`, torch's setting now)."""
    if dtype != torch.float32 or device.type != "cuda":
        return False
    return cuda_matmul_tf32() if enabled is None else enabled


def target_uses_tf32(target: PreTrainedModel) -> bool:
    """:func:`uses_tf32` for a target's dtype on the device its logits come out on."""
    return uses_tf32(target.dtype, output_device(target))


@dataclass(frozen=True)
class NearTie:
    """The target's top-2 logits at a divergence and the rule's verdict."""

    gap: float
    """top-1 minus top-2 logit (nats)"""
    threshold: float
    """:func:`near_tie_threshold` at the top logit, for the target's dtype (and TF32 use)"""

    @property
    def is_tie(self) -> bool:
        """Whether the divergence is excused (gap under the threshold)."""
        return self.gap < self.threshold


@torch.inference_mode()
def near_tie(target: PreTrainedModel, ids: list[int]) -> NearTie:
    """The target's top-2 gap after ``ids`` and the near-tie threshold there."""
    ids_t = torch.tensor([ids], device=input_device(target))
    top = target(input_ids=ids_t).logits[0, -1].float().topk(2).values
    threshold = near_tie_threshold(float(top[0]), target.dtype, tf32=target_uses_tf32(target))
    return NearTie(gap=float(top[0] - top[1]), threshold=threshold)


def top2_gap(target: PreTrainedModel, ids: list[int]) -> float:
    """The target's top-1 minus top-2 logit after ``ids`` (see :func:`near_tie`)."""
    return near_tie(target, ids).gap


def max_positions(model: PreTrainedModel) -> int | None:
    """Positions the model attends over (its config's ``max_position_embeddings``), or None."""
    value = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def prompt_ids(
    target: PreTrainedModel,
    tokenizer: object,
    prompt_sets: list[PromptSet],
    *,
    max_new_tokens: int,
    depth: int,
    target_name: str,
) -> list[list[list[int]]]:
    """The chat-template ids of every prompt, per set, each checked to fit the target's
    positions with ``max_new_tokens`` and a tree of ``depth`` (before any is decoded: a prompt
    past them would give meaningless figures, never an error of its own).

    Raises:
        PromptTooLong: the first prompt that does not fit, naming its set and number.
    """
    limit = max_positions(target)
    ids = [[chat_prompt_ids(tokenizer, text) for text in ps.prompts] for ps in prompt_sets]
    for ps, set_ids in zip(prompt_sets, ids, strict=True):
        for i, prompt in enumerate(set_ids):
            if limit is not None:
                check_prompt_room(
                    len(prompt),
                    where=f"eval.prompt_sets {ps.name!r} prompt {i + 1}",
                    max_new_tokens=max_new_tokens,
                    depth=depth,
                    max_positions=limit,
                    field="eval.max_new_tokens",
                    target=target_name,
                )
    return ids


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
    acceptance_length, equal (bool), near_tie (bool), and where the output diverged, the
    target's top-2 ``gap`` there and the ``threshold`` applied (:func:`near_tie_threshold`).
    A float32 draft runs beside a bfloat16 or float16 target (see
    :class:`workloads.models.draft.DraftModel`).

    Raises:
        PromptTooLong: a prompt that does not fit the target's positions (:func:`prompt_ids`),
            before anything is decoded.
    """
    res = EvalResult(dtype=str(target.dtype).removeprefix("torch."), tf32=target_uses_tf32(target))
    draft.eval()
    ids = prompt_ids(
        target,
        tokenizer,
        prompt_sets,
        max_new_tokens=max_new_tokens,
        depth=shape.depth,
        target_name=target_name,
    )
    for ps, set_ids in zip(prompt_sets, ids, strict=True):
        for i, prompt in enumerate(set_ids):
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
            tie: NearTie | None = None
            if not equal:
                first = next(
                    (j for j, (a, b) in enumerate(zip(out.tokens, ref, strict=False)) if a != b),
                    min(len(out.tokens), len(ref)),
                )
                tie = near_tie(target, prompt + ref[:first])
                res.near_ties += int(tie.is_tie)
                res.mismatches += int(not tie.is_tie)
                res.near_tie_threshold = max(res.near_tie_threshold, tie.threshold)
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
                    "near_tie": tie is not None and tie.is_tie,
                    "diverged_at": None if equal else first,
                    "gap": None if tie is None else tie.gap,
                    "threshold": None if tie is None else tie.threshold,
                    "spec_s": out.total_s,
                    "greedy_s": ref_s,
                }
            )
            if on_prompt is not None:
                on_prompt(ps.name, i, out.acceptance_length)
    return res
