"""The engine's own autoregressive loop: the baseline of speculative decoding at batch size b.

Same ragged KV cache and prefill as :mod:`workloads.tree_decode`, one target forward per token for
all rows; rows that emit EOS or reach ``max_new_tokens`` leave the batch. At temperature 0 each
row is the target's greedy output.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from workloads._batch import Timer, pick, prefill, still_going
from workloads._kv import RaggedStaticCache, additive_mask
from workloads._steps import Steps, capacity
from workloads.tree_decode import BatchResult, Compile


@torch.inference_mode()
def ar_generate(
    target: PreTrainedModel,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_ids: frozenset[int],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    compile: Compile = "none",
) -> BatchResult:
    """Generate up to ``max_new_tokens`` per prompt, one token per target forward.

    ``compile`` as in :func:`~workloads.tree_decode.generate` (the one-token step).

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
    room = max(map(len, prompts)) + max_new_tokens
    fixed = compile != "none"
    cache = RaggedStaticCache(len(prompts), capacity(room, compile), dev, fixed_width=fixed)
    steps = Steps(target, None, compile)
    _, logits, pos = prefill(target, prompts, cache)
    tok = pick(logits, temperature, generator)
    rows = torch.arange(len(prompts), device=dev)
    for r, t in enumerate(tok.tolist()):
        res.tokens[r].append(t)
    res.prefill_s = timer.now() - t0
    self_only = torch.ones(len(prompts), 1, 1, dtype=torch.bool, device=dev)
    one = torch.ones(len(prompts), dtype=torch.long, device=dev)
    alive = still_going(res.tokens, rows, eos_ids, max_new_tokens)
    while alive is not None:
        if len(alive) < len(rows):
            rows, pos, tok, self_only, one = (x[alive] for x in (rows, pos, tok, self_only, one))
            cache.select_rows(alive)
        cache.stage(1)
        mask = additive_mask(cache.allowed(self_only), target.dtype)
        ta = timer.now()
        _, logits = steps.verify(tok[:, None], pos[:, None], mask, cache)
        res.verify_s += timer.now() - ta
        cache.commit(None, one)
        tok, pos = pick(logits[:, -1], temperature, generator), pos + 1
        res.cycles += 1
        for r, t in zip(rows.tolist(), tok.tolist(), strict=True):
            res.tokens[r].append(t)
            res.accept_lengths[r].append(1)
        alive = still_going(res.tokens, rows, eos_ids, max_new_tokens)
    res.total_s = timer.now() - t0
    return res
