"""The engine's own autoregressive loop: the baseline of speculative decoding at batch size b.

Same ragged KV cache and prefill as :mod:`workloads.tree_decode`, one target forward per token for
all rows; rows that emit EOS or reach ``max_new_tokens`` leave the batch. At temperature 0 each
row is the target's greedy output.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from workloads._batch import Timer, pick, prefill, still_going
from workloads._kv import RaggedCache, additive_mask
from workloads.tree_decode import BatchResult


@torch.inference_mode()
def ar_generate(
    target: PreTrainedModel,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_ids: frozenset[int],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> BatchResult:
    """Generate up to ``max_new_tokens`` per prompt, one token per target forward.

    Returns:
        A :class:`~workloads.tree_decode.BatchResult` whose ``verify_s`` is the time in target
        forwards after the prefill and whose cycles are decoding steps (one token per row each).

    Raises:
        ValueError: an empty prompt list or an empty prompt.
    """
    if not prompts or min(len(p) for p in prompts) < 1:
        raise ValueError("ar_generate needs at least one prompt, each of at least one token")
    timer, dev = Timer(target.device), target.device
    res = BatchResult(tokens=[[] for _ in prompts], accept_lengths=[[] for _ in prompts])
    t0 = timer.now()
    cache = RaggedCache(DynamicCache(config=target.config), len(prompts), dev)
    _, logits, pos = prefill(target, prompts, cache)
    cache.compact()
    tok = pick(logits, temperature, generator)
    rows = torch.arange(len(prompts), device=dev)
    for r, t in enumerate(tok.tolist()):
        res.tokens[r].append(t)
    res.prefill_s = timer.now() - t0
    self_only = torch.ones(len(prompts), 1, 1, dtype=torch.bool, device=dev)
    alive = still_going(res.tokens, rows, eos_ids, max_new_tokens)
    while alive is not None:
        if len(alive) < len(rows):
            rows, pos, tok, self_only = rows[alive], pos[alive], tok[alive], self_only[alive]
            cache.select_rows(alive)
        # no padding left (b = 1 always): one query sees every key, no mask needed
        full = bool(cache.valid.all())
        mask = None if full else additive_mask(cache.allowed(self_only), target.dtype)
        ta = timer.now()
        h = target.model(
            input_ids=tok[:, None],
            position_ids=pos[:, None],
            attention_mask=mask,
            cache=cache.cache,
            use_cache=True,
        ).last_hidden_state
        logits = target.lm_head(h[:, -1]).float()
        res.verify_s += timer.now() - ta
        cache.append(self_only[:, :, 0])
        tok, pos = pick(logits, temperature, generator), pos + 1
        res.cycles += 1
        for r, t in zip(rows.tolist(), tok.tolist(), strict=True):
            res.tokens[r].append(t)
            res.accept_lengths[r].append(1)
        alive = still_going(res.tokens, rows, eos_ids, max_new_tokens)
    res.total_s = timer.now() - t0
    return res
