"""Measured cost of one draft step and one target step, in the trial's own process.

The draft's cost per step against its acceptance length: Scylla (arXiv 2505.07858) Thm 1.2 and
Sec. 5. Timings are medians of
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
from typing import cast

import torch
from transformers import DynamicCache, PreTrainedModel

from workloads.models.draft import DraftModel
from workloads.models.kv_cache import CACHE_KW, additive_mask


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


class _Steps:
    """A context of ``context`` positions prefilled into the target's and the draft's KV caches,
    and the timed steps over it; each step drops its new positions again, so every call sees
    the same ``context`` cached positions.

    Args:
        ids: [1, L] token ids, L >= ``context`` + max(``topk``, the largest target step): the
            context, then the new tokens.
    """

    def __init__(
        self,
        target: PreTrainedModel,
        draft: DraftModel,
        ids: torch.Tensor,
        *,
        context: int,
        topk: int,
    ) -> None:
        param = next(target.parameters())
        self.target, self.draft, self.ids = target, draft, ids.to(param.device)
        self.context, self.topk = context, topk
        self.pos = torch.arange(ids.shape[1], device=param.device)[None]
        self.t_cache = DynamicCache(config=target.config)
        target(input_ids=self.ids[:, :context], use_cache=True, **{CACHE_KW: self.t_cache})
        h = draft.arch.hidden_size
        self.d_cache = draft.new_cache()
        hidden = torch.zeros(1, context, h, device=param.device, dtype=param.dtype)
        draft(hidden, self.ids[:, :context], self.pos[:, :context], cache=self.d_cache)
        self.new_h = torch.zeros(1, topk, h, device=param.device, dtype=param.dtype)
        # one tree level: topk siblings at one position, each seeing the context and itself (as
        # the engine's tree mask does); without a mask transformers' SDPA would run top-left
        # causal and crop the keys to the first topk cached positions
        d_weight = draft.fc.weight
        allowed = torch.ones(1, topk, context + topk, dtype=torch.bool, device=d_weight.device)
        allowed[:, :, context:] = torch.eye(topk, dtype=torch.bool, device=d_weight.device)
        self.d_mask = additive_mask(allowed, d_weight.dtype)  # [1, 1, topk, context + topk]
        self.d_pos = self.pos[:, context : context + 1].expand(1, topk)

    def draft_step(self) -> torch.Tensor:
        """One draft step over ``topk`` new tokens, LM head and top-k included; [1, topk, h]."""
        c, k = self.context, self.topk
        ids = self.ids[:, c : c + k]
        out = self.draft(
            self.new_h, ids, self.d_pos, attention_mask=self.d_mask, cache=self.d_cache
        )
        torch.topk(self.draft.logits(out), k, dim=-1)
        self.d_cache.crop(-k)
        return out

    def target_step(self, n: int) -> torch.Tensor:
        """One target forward of ``n`` new tokens (causal among them, after the context, with an
        explicit mask); [1, n, V] logits."""
        c = self.context
        out = self.target(
            input_ids=self.ids[:, c : c + n],
            position_ids=self.pos[:, c : c + n],
            use_cache=True,
            **{CACHE_KW: self.t_cache},
        )
        self.t_cache.crop(-n)
        return cast(torch.Tensor, out.logits)


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
    gen = torch.Generator().manual_seed(0)
    length = context + max(num_draft_tokens, topk)
    ids = torch.randint(0, draft.embed_weight.shape[0], (1, length), generator=gen)
    steps = _Steps(target, draft, ids, context=context, topk=topk)
    return StepCost(
        draft_ms=_median_ms(steps.draft_step, warmup, repeats),
        target_ms=_median_ms(lambda: steps.target_step(1), warmup, repeats),
        verify_ms=_median_ms(lambda: steps.target_step(num_draft_tokens), warmup, repeats),
    )
