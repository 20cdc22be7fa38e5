"""The measured step costs time forwards that see their cached context (as the engine's do).

Tiny random Llama target and draft (:mod:`tests.workloads.tiny`); each step's output is compared
with a from-scratch forward over context + new tokens.
"""

from __future__ import annotations

import torch

from tests.workloads.tiny import V, tiny_draft, tiny_target
from workloads.engine.step_cost import _Steps, measure_step_cost

CONTEXT, TOPK = 24, 4


def _ids(seed: int, changed: bool = False) -> torch.Tensor:
    """[1, CONTEXT + 8] ids; ``changed`` alters the context after its first TOPK positions."""
    ids = torch.randint(0, V, (1, CONTEXT + 8), generator=torch.Generator().manual_seed(seed))
    if changed:
        ids[:, TOPK:CONTEXT] = (ids[:, TOPK:CONTEXT] + 1) % V
    return ids


@torch.inference_mode()
def test_draft_cost_measurement_sees_its_context() -> None:
    target = tiny_target()
    draft = tiny_draft(target)
    a = _Steps(target, draft, _ids(0), context=CONTEXT, topk=TOPK)
    b = _Steps(target, draft, _ids(0, changed=True), context=CONTEXT, topk=TOPK)
    out_a, out_b = a.draft_step(), b.draft_step()
    assert out_a.shape == (1, TOPK, draft.arch.hidden_size)
    assert (out_a - out_b).abs().max() > 1e-3  # the context changes what the step computes
    torch.testing.assert_close(a.draft_step(), out_a)  # every repeat sees the same cache
    # each sibling j sees the whole context and itself: a from-scratch forward over context + j
    h = draft.arch.hidden_size
    for j in range(TOPK):
        ids = torch.cat([a.ids[:, :CONTEXT], a.ids[:, CONTEXT + j : CONTEXT + j + 1]], 1)
        ref = draft(torch.zeros(1, CONTEXT + 1, h), ids, torch.arange(CONTEXT + 1)[None])
        torch.testing.assert_close(out_a[:, j], ref[:, -1], rtol=1e-4, atol=1e-4)


@torch.inference_mode()
def test_unmasked_draft_step_is_blind_to_context() -> None:
    """Control: the old call (no mask over the cache) only sees the first TOPK cached keys."""
    target = tiny_target()
    draft = tiny_draft(target)
    outs = []
    for changed in (False, True):
        s = _Steps(target, draft, _ids(0, changed), context=CONTEXT, topk=TOPK)
        new = slice(CONTEXT, CONTEXT + TOPK)
        outs.append(draft(s.new_h, s.ids[:, new], s.pos[:, new], cache=s.d_cache))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


@torch.inference_mode()
def test_target_cost_measurement_sees_its_context() -> None:
    """The verification (causal over its n tokens) and AR steps equal a full forward."""
    target = tiny_target()
    draft = tiny_draft(target)
    s = _Steps(target, draft, _ids(1), context=CONTEXT, topk=TOPK)
    full = target(input_ids=s.ids).logits
    for n in (1, 6):
        got = s.target_step(n)
        torch.testing.assert_close(got, full[:, CONTEXT : CONTEXT + n], rtol=1e-4, atol=1e-4)


def test_measure_step_cost_runs() -> None:
    target = tiny_target()
    cost = measure_step_cost(
        target, tiny_draft(target), topk=TOPK, num_draft_tokens=6, context=16, warmup=1, repeats=2
    )
    assert min(cost.draft_ms, cost.target_ms, cost.verify_ms) > 0
