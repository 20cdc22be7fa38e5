"""Measured cost of one draft step and one target step, in the trial's own process.

The draft's cost per step is what a deeper draft pays for its higher acceptance length
(Scylla, arXiv 2505.07858, Thm 1.2 and Sec. 5 leave the trade-off open). Timings are medians of
``repeats`` forwards after ``warmup`` ones, with a KV cache of ``context`` positions, batch 1,
on the threads the trial was given. The net speedup estimate below combines them with a
measured acceptance length (EAGLE-2 cycle: ``depth`` draft steps, then one verification of
``num_draft_tokens`` tokens)::

    speedup = acceptance_length * t_target(1) / (depth * t_draft + t_target(num_draft_tokens))
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from workloads._kv import CACHE_KW
from workloads.draft_model import DraftModel


@dataclass(frozen=True)
class StepCost:
    """Milliseconds per forward at batch 1 with ``context`` cached positions."""

    draft_ms: float
    """one draft step over ``topk`` new tokens, LM head and top-k included"""
    target_ms: float
    """one autoregressive target step (1 new token)"""
    verify_ms: float
    """one target verification of ``num_draft_tokens`` new tokens"""

    def speedup(self, acceptance_length: float, depth: int) -> float:
        """Net speedup over autoregressive decoding implied by the step costs (module doc)."""
        cycle = depth * self.draft_ms + self.verify_ms
        return acceptance_length * self.target_ms / cycle


def _sync() -> None:
    """Wait for queued CUDA kernels (launches are asynchronous; a CPU run has none)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _median_ms(fn: Callable[[], object], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


@torch.inference_mode()
def measure_step_cost(
    target: PreTrainedModel,
    draft: DraftModel,
    *,
    topk: int,
    num_draft_tokens: int,
    context: int = 128,
    warmup: int = 3,
    repeats: int = 15,
) -> StepCost:
    """Time one draft step, one target AR step and one verification (see :class:`StepCost`).

    The cached context is random token ids (costs do not depend on the values). Each timed call
    drops its new positions again, so every repeat sees ``context`` positions.
    """
    device = next(target.parameters()).device
    dtype = next(target.parameters()).dtype
    h = draft.arch.hidden_size
    gen = torch.Generator().manual_seed(0)
    length = context + max(num_draft_tokens, topk)
    ids = torch.randint(0, draft.embed_weight.shape[0], (1, length), generator=gen).to(device)
    pos = torch.arange(length, device=device)[None]

    t_cache = DynamicCache(config=target.config)
    target(input_ids=ids[:, :context], use_cache=True, **{CACHE_KW: t_cache})

    def target_step(n: int) -> Callable[[], object]:
        def run() -> object:
            out = target(
                input_ids=ids[:, context : context + n],
                position_ids=pos[:, context : context + n],
                use_cache=True,
                **{CACHE_KW: t_cache},
            )
            t_cache.crop(-n)
            return out

        return run

    d_cache = draft.new_cache()
    hidden = torch.zeros(1, context, h, device=device, dtype=dtype)
    draft(hidden, ids[:, :context], pos[:, :context], cache=d_cache)
    new_h = torch.zeros(1, topk, h, device=device, dtype=dtype)

    def draft_step() -> object:
        out = draft(new_h, ids[:, context : context + topk], pos[:, context : context + topk],
                    cache=d_cache)  # fmt: skip
        top = torch.topk(draft.logits(out), topk, dim=-1)
        d_cache.crop(-topk)
        return top

    return StepCost(
        draft_ms=_median_ms(draft_step, warmup, repeats),
        target_ms=_median_ms(target_step(1), warmup, repeats),
        verify_ms=_median_ms(target_step(num_draft_tokens), warmup, repeats),
    )
