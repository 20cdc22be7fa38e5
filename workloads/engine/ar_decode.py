"""The engine's own autoregressive loop: the baseline of speculative decoding at batch size b.

Same ragged KV cache and prefill as :mod:`workloads.engine.tree_decode`, one target forward per
token for all rows; rows that emit EOS or reach ``max_new_tokens`` leave the batch. At temperature 0
each row is the target's greedy output.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedModel

from workloads.engine.batch import (
    Placement,
    Timer,
    finished,
    pick,
    prefill,
    row_bucket,
    rows_to_keep,
)
from workloads.engine.steps import StepPlan, Steps
from workloads.engine.tree_decode import BatchResult, Compile
from workloads.models.kv_cache import additive_mask


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
    steps: Steps | None = None,
) -> BatchResult:
    """Generate up to ``max_new_tokens`` per prompt, one token per target forward.

    ``compile``, ``steps`` and ``generator`` as in :func:`~workloads.engine.tree_decode.generate`
    (the one-token step; one host read per step: the tokens).

    Returns:
        A :class:`~workloads.engine.tree_decode.BatchResult` whose ``verify_s`` is the time in
        target forwards after the prefill and whose cycles are decoding steps (one token per row
        each).

    Raises:
        ValueError: an empty prompt list or an empty prompt.
    """
    if not prompts or min(len(p) for p in prompts) < 1:
        raise ValueError("ar_generate needs at least one prompt, each of at least one token")
    steps = steps if steps is not None else Steps(target, None, compile)
    where = Placement.of(target)
    dev, b0 = where.input, len(prompts)
    sizes = sorted({row_bucket(b, b0, steps.fixed) for b in range(1, b0 + 1)})
    cache, dcache = reserve(steps, b0, max(map(len, prompts)), max_new_tokens)
    steps.prepare(StepPlan(buckets=tuple((b, 1, 1) for b in sizes), pending=1), cache, dcache)
    timer = Timer(where.devices)
    res = BatchResult(tokens=[[] for _ in prompts], accept_lengths=[[] for _ in prompts])
    t0 = timer.now()
    _, logits, pos = prefill(target, prompts, cache)
    tok = pick(logits, temperature, generator).to(dev)
    for r, t in enumerate(tok.tolist()):
        res.tokens[r].append(t)
    res.prefill_s = timer.now() - t0
    rows = list(range(b0))
    live = [not finished(res.tokens[r], eos_ids, max_new_tokens) for r in rows]
    self_only = torch.ones(b0, 1, 1, dtype=torch.bool, device=dev)
    one, one_host = torch.ones(b0, dtype=torch.long, device=dev), [True] * b0
    while any(live):
        keep = row_bucket(sum(live), len(rows), steps.fixed)
        if keep < len(rows):
            idx = rows_to_keep(live, keep)
            sel = torch.tensor(idx).to(dev)
            pos, tok, self_only = (x[sel] for x in (pos, tok, self_only))
            cache.select_rows(sel, idx)
            rows, live, one_host = [rows[i] for i in idx], [live[i] for i in idx], []
        cache.stage(1)
        mask = additive_mask(cache.allowed(self_only), target.dtype)
        ta = timer.mark()
        _, logits = steps.verify(tok[:, None], pos[:, None], mask, cache)
        timer.add("verify", ta)
        if live != one_host:  # frozen rows commit nothing (copied when that changes)
            one, one_host = torch.tensor(live, dtype=torch.long).to(dev), list(live)
        cache.commit(None, one, [int(a) for a in live])
        tok = pick(logits[:, -1], temperature, generator).to(dev)
        pos = pos + one
        res.cycles += 1
        for i, t in enumerate(tok.tolist()):  # the step's one host read
            if live[i]:
                res.tokens[rows[i]].append(t)
                res.accept_lengths[rows[i]].append(1)
                live[i] = not finished(res.tokens[rows[i]], eos_ids, max_new_tokens)
    res.total_s = timer.now() - t0
    res.verify_s = timer.seconds("verify")
    return res


def reserve(steps: Steps, rows: int, longest_prompt: int, max_new_tokens: int) -> tuple[Any, Any]:
    """Allocate ``steps``' KV cache for every AR call of up to ``rows`` prompts of up to
    ``longest_prompt`` tokens (one slot staged per step; no draft cache), before the first."""
    return steps.caches(rows, longest_prompt + max_new_tokens, 0)
