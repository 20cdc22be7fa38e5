"""Training-time test (``train.ttt_steps``): one step is today's loss exactly, the unrolled
steps' mask lets no position see the future (against a reference written apart, and by
perturbing what a chain must not see), a K-step stage trains, and bad K are refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from pydantic import ValidationError

from tests.workloads.training.test_distributed import settings, synthetic_features, tiny_draft
from workloads.data.packing import attention_allowed, segment_ids
from workloads.draft_train.config import DraftTrainConfig
from workloads.training.loop import (
    draft_loss,
    position_losses,
    train_stage,
    ttt_allowed,
    unrolled_losses,
)


def _batch(seed: int = 0, *, packed: bool = False) -> tuple[torch.Tensor, ...]:
    feats = synthetic_features(3, 20, masked=True, seed=seed)
    pos = torch.arange(20).expand(3, 20).clone()
    if packed:  # row 0 holds two documents: 0..8 and 9..19
        pos[0, 9:] = torch.arange(11)
    return feats.input_ids, feats.loss_mask, feats.hidden_states.float(), pos


def test_one_step_is_todays_eagle_loss_exactly() -> None:
    """ttt_steps 1: the loss is the weighted EAGLE loss of position_losses, bit for bit (the
    formula written here apart, as draft_loss computed it before the unrolled steps)."""
    draft = tiny_draft()
    ids, mask, hid, pos = _batch(packed=True)
    loss, parts = draft_loss(draft, ids, mask, hid, w_reg=1.0, w_cls=0.1, pos_bt=pos)
    reg_bt, cls_bt, agree_bt, weight = position_losses(draft, ids, mask, hid, pos)
    denom = float(weight.sum().clamp_min(1.0))
    reg, cls = (reg_bt.float() * weight).sum(), (cls_bt.float() * weight).sum()
    want = (1.0 * reg + 0.1 * cls) / denom
    assert torch.equal(loss, want)
    assert parts["top1"] == float((agree_bt * weight).sum() / denom)
    again, _ = draft_loss(
        draft, ids, mask, hid, w_reg=1.0, w_cls=0.1, pos_bt=pos, ttt_steps=1, ttt_decay=0.5
    )
    assert torch.equal(again, loss)  # the decay weighs steps after the first only


def _reference_allowed(pos: torch.Tensor, step: int) -> torch.Tensor:
    """Query t of step ``step`` may see step 0's key s (s <= t, same document) and, of steps
    1..step, key t only: written with loops, apart from the code under test."""
    seg = segment_ids(pos)
    b, n = pos.shape
    out = torch.zeros(b, n, (step + 1) * n, dtype=torch.bool)
    for r in range(b):
        for q in range(n):
            for s in range(n):
                out[r, q, s] = s <= q and bool(seg[r, s] == seg[r, q])
            for i in range(1, step + 1):
                out[r, q, i * n + q] = True
    return out


@pytest.mark.parametrize("step", [0, 1, 3])
def test_the_mask_matches_a_reference_written_apart(step: int) -> None:
    *_, pos = _batch(packed=True)
    pos_in = pos[:, :18]
    allowed = attention_allowed(pos_in)
    assert allowed is not None
    assert torch.equal(ttt_allowed(allowed[:, 0], step), _reference_allowed(pos_in, step))


@pytest.mark.parametrize("packed", [False, True], ids=["one-document", "packed"])
def test_no_unrolled_step_sees_what_its_chain_has_not_reached(packed: bool) -> None:
    """The chain that left the target at t sees target features at positions <= t only (its
    later inputs are its own outputs) and tokens up to x_{t+1+k}: changing the features at
    t+1 .. t+k and everything past its target h_{t+1+k} leaves step k's losses at t as they
    were."""
    draft = tiny_draft(1).eval()
    ids, mask, hid, pos = _batch(2, packed=packed)
    mask = torch.ones_like(mask)
    before = unrolled_losses(draft, ids, mask, hid, pos, steps=3)
    gen = torch.Generator().manual_seed(5)
    t = 4
    for k in range(3):
        hid2, ids2 = hid.clone(), ids.clone()
        hid2[:, t + 1 : t + 1 + k] += torch.randn(hid2[:, t + 1 : t + 1 + k].shape, generator=gen)
        hid2[:, t + 2 + k :] += torch.randn(hid2[:, t + 2 + k :].shape, generator=gen)
        ids2[:, t + 2 + k :] = torch.randint(0, 96, ids2[:, t + 2 + k :].shape, generator=gen)
        after = unrolled_losses(draft, ids2, mask, hid2, pos, steps=3)
        # step k at t, and at the positions s < t whose target h_{s+1+k} was left alone
        same = [*range(t - k), t]
        for j in (0, 1):  # reg and cls
            torch.testing.assert_close(after[k][j][:, same], before[k][j][:, same])
        # the change reached the positions that do see it (the test can fail)
        assert not torch.allclose(after[k][0][:, t + 2 :], before[k][0][:, t + 2 :])


def test_later_steps_are_fed_the_drafts_own_outputs() -> None:
    """Step 1 at t depends on step 0's output at t: a draft whose step-0 output changes (its
    weights perturbed) changes step 1's loss even where the target features are the same."""
    draft = tiny_draft(2).eval()
    ids, mask, hid, pos = _batch(3)
    one = unrolled_losses(draft, ids, mask, hid, pos, steps=2)
    assert len(one) == 2 and all(x.shape == (3, 18) for x in one[1])
    # the last position of step 1 has no target inside the row: it weighs 0
    assert float(one[1][3][:, -1].sum()) == 0.0 and float(one[0][3][:, -1].sum()) > 0


def test_a_two_step_stage_trains_and_weighs_its_steps() -> None:
    feats = synthetic_features(8, 24, masked=False, seed=4)
    s1 = settings(epochs=2, batch_size=4)
    s2 = dataclasses.replace(s1, ttt_steps=2)
    log1 = train_stage(tiny_draft(3), feats, s1)
    log2 = train_stage(tiny_draft(3), feats, s2)
    assert len(log2.loss) == len(log1.loss) == 4
    assert all(torch.isfinite(torch.tensor(log2.loss)))
    assert log2.loss[0] > log1.loss[0]  # the same first step plus 0.8 x step 1's loss
    assert log2.top1[0] == log1.top1[0]  # top-1 is step 0's


@pytest.mark.parametrize(
    ("train", "seq", "says"),
    [
        ({"ttt_steps": 0}, 256, "greater than or equal to 1"),
        ({"ttt_steps": 2, "workers": 2}, 256, "train.workers: 1"),
        ({"ttt_steps": 15}, 16, "train.ttt_steps: 14"),
        ({"ttt_decay": 0}, 256, "greater than 0"),
    ],
    ids=["zero", "on-workers", "longer-than-rows", "zero-decay"],
)
def test_a_bad_ttt_is_refused_with_the_fix(train: dict, seq: int, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        DraftTrainConfig.model_validate(
            {"train": train, "pretrain": {"seq_len": seq}, "sft": {"seq_len": max(seq, 16)}}
        )
    ok = DraftTrainConfig.model_validate({"train": {"ttt_steps": 3}})
    assert ok.train.ttt_steps == 3


def test_bf16_autocast_keeps_the_weights_float32_and_the_losses_finite() -> None:
    """The unrolled steps in bfloat16 autocast (a GPU trial's default): finite losses, the
    trainable weights and their gradients stay float32 (the master copy)."""
    draft = tiny_draft(4)
    ids, mask, hid, pos = _batch(5, packed=True)
    loss, parts = draft_loss(
        draft, ids, mask, hid, w_reg=1.0, w_cls=0.1, pos_bt=pos, precision="bf16", ttt_steps=3
    )
    loss.backward()
    assert torch.isfinite(loss) and all(v == v for v in parts.values())  # no NaN
    assert {p.dtype for p in draft.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in draft.parameters() if p.grad is not None} == {torch.float32}
