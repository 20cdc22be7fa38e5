"""Draft training on cached target features (EAGLE recipe, Scylla two-stage schedule).

Loss per position (EAGLE, arXiv 2401.15077 Sec. 3.2): ``w_reg * SmoothL1(f_t, h_{t+1}) +
w_cls * CE(p_target(x_{t+2}), p_draft(x_{t+2}))`` where ``f_t`` is the draft output at position t,
``h_{t+1}`` the target hidden state, and both distributions are taken over the draft vocabulary
through the frozen LM head. Positions count where ``x_{t+2}`` is in the loss mask (all tokens
in pretraining, assistant tokens in SFT).

Shape legend: B batch, T positions, h hidden, N draft vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from workloads.draft_model import DraftModel
from workloads.features import Features


@dataclass(frozen=True, kw_only=True)
class StageSettings:
    """Optimisation settings of one training stage."""

    epochs: int
    """passes over the rows"""
    batch_size: int
    """rows per optimiser step"""
    lr: float
    """peak learning rate"""
    warmup_steps: int
    weight_decay: float
    grad_clip: float
    w_reg: float
    w_cls: float
    seed: int


@dataclass
class StageLog:
    """Per-step loss (total, regression, classification) and top-1 agreement with the target."""

    loss: list[float] = field(default_factory=list)
    loss_reg: list[float] = field(default_factory=list)
    loss_cls: list[float] = field(default_factory=list)
    top1: list[float] = field(default_factory=list)
    tokens_seen: int = 0


def draft_loss(
    draft: DraftModel,
    ids_bt: torch.Tensor,
    mask_bt: torch.Tensor,
    hid_bth: torch.Tensor,
    *,
    w_reg: float,
    w_cls: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """EAGLE loss on a batch of rows; returns (loss, {loss_reg, loss_cls, top1})."""
    hid = hid_bth.float()
    b, t = ids_bt.shape
    pos = torch.arange(t - 2).expand(b, t - 2)
    f_bth = draft(hid[:, :-2], ids_bt[:, 1:-1], pos)
    target_h = hid[:, 1:-1]
    weight = mask_bt[:, 2:].float()
    denom = weight.sum().clamp_min(1.0)
    reg = (nn.functional.smooth_l1_loss(f_bth, target_h, reduction="none").mean(-1) * weight).sum()
    with torch.no_grad():
        p_target_btn = torch.softmax(draft.logits(target_h), -1)
    logp_draft_btn = torch.log_softmax(draft.logits(f_bth), -1)
    cls = (-(p_target_btn * logp_draft_btn).sum(-1) * weight).sum()
    loss = (w_reg * reg + w_cls * cls) / denom
    with torch.no_grad():
        agree = (logp_draft_btn.argmax(-1) == p_target_btn.argmax(-1)).float()
        top1 = float((agree * weight).sum() / denom)
    parts = {"loss_reg": float(reg.detach() / denom), "loss_cls": float(cls.detach() / denom)}
    return loss, parts | {"top1": top1}


def _lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warmup then cosine decay to 10% of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def train_stage(
    draft: DraftModel,
    feats: Features,
    s: StageSettings,
    on_step: Callable[[int, int, float], None] | None = None,
) -> StageLog:
    """Train ``draft`` in place for ``s.epochs`` passes over ``feats``; AdamW (0.9, 0.95).

    ``on_step(step, total_steps, loss)`` is called after every optimiser step (progress).
    """
    out = StageLog()
    rows = feats.input_ids.shape[0]
    if rows == 0:
        return out
    gen = torch.Generator().manual_seed(s.seed)
    steps_per_epoch = -(-rows // s.batch_size)
    total = steps_per_epoch * s.epochs
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=s.lr, betas=(0.9, 0.95), weight_decay=s.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: _lr_factor(i, total, s.warmup_steps))
    draft.train()
    step = 0
    for _ in range(s.epochs):
        order = torch.randperm(rows, generator=gen)
        for i in range(0, rows, s.batch_size):
            idx = order[i : i + s.batch_size]
            loss, parts = draft_loss(
                draft,
                feats.input_ids[idx],
                feats.loss_mask[idx],
                feats.hidden[idx],
                w_reg=s.w_reg,
                w_cls=s.w_cls,
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, s.grad_clip)
            opt.step()
            sched.step()
            out.loss.append(float(loss.detach()))
            out.loss_reg.append(parts["loss_reg"])
            out.loss_cls.append(parts["loss_cls"])
            out.top1.append(parts["top1"])
            out.tokens_seen += int(feats.input_ids[idx].numel())
            step += 1
            if on_step is not None:
                on_step(step, total, float(loss))
    draft.eval()
    return out
