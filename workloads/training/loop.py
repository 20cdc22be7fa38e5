"""Draft training on cached target features (EAGLE recipe, Scylla two-stage schedule).

Loss per position (EAGLE, arXiv 2401.15077 Sec. 3.2): ``w_reg * SmoothL1(f_t, h_{t+1}) +
w_cls * CE(p_target(x_{t+2}), p_draft(x_{t+2}))`` where ``f_t`` is the draft output at position t,
``h_{t+1}`` the target hidden state, and both distributions are taken over the draft vocabulary
through the frozen LM head. Positions count where ``x_{t+2}`` is in the loss mask (all tokens
in pretraining, assistant tokens in SFT) and t..t+2 lie in one document of the packed row.
Training adds EAGLE's uniform noise to the input hidden states (``feature_noise``), never
evaluation. With training-time test (``ttt_steps`` K > 1) the draft is unrolled K steps on its
own outputs (:func:`unrolled_losses`), step k's loss weighted ``ttt_decay ** k``.

Shape legend: B batch, T positions, h hidden, N draft vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from workloads.data.packing import PackedRows, attention_allowed, same_segment
from workloads.models.draft import DraftModel
from workloads.models.fusion import last_layer
from workloads.models.kv_cache import additive_mask
from workloads.training.features import FeatureSet


@dataclass(frozen=True, kw_only=True)
class DataParallel:
    """This process's place in data-parallel training over a ``torch.distributed`` group.

    Every rank draws the same seeded global batch of ``batch_size`` rows and trains on its
    contiguous share (``torch.tensor_split(batch, world)[rank]``). A rank's summed loss is
    divided by the weighted positions of the whole global batch over ``world``, so the gradient
    averaging of ``model`` (DDP, DeepSpeed) gives the single-process gradient, up to the order of
    float sums. Logged losses are summed over the ranks (all-reduce), so every rank logs the
    numbers one process would. A rank left without rows by a short last batch runs one row with
    zero weight, so it still joins the gradient all-reduce.
    """

    rank: int
    world: int
    model: nn.Module
    """the wrapper whose forward syncs gradients (DDP or a DeepSpeed engine around the draft)"""
    update: Callable[[torch.Tensor], None] | None = None
    """backward and optimiser step of a loss when ``model`` owns them (a DeepSpeed engine:
    backward, clipping, step); None = zero_grad, backward, clip, the stage's AdamW step"""


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
    schedule: Literal["cosine", "wsd"] = "cosine"
    """cosine: linear warmup, cosine decay to 10% of the peak over the stage; wsd:
    warmup-stable-decay, constant peak then linear decay to 10% over the last ``decay_steps``"""
    decay_steps: int = 0
    """wsd: steps of the final decay"""
    order: Literal["shuffle", "stream"] = "shuffle"
    """shuffle: a seeded permutation per epoch; stream: rows in corpus order, so the first n
    steps of a longer run see exactly the rows of a shorter one (a shared wsd trunk)"""
    feature_noise: float = 0.0
    """EAGLE's uniform noise on the input hidden states (see :func:`input_noise`); 0 = off.
    Drawn from a generator seeded by (seed, step, rank), so a resumed run draws the same"""
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32: float32 throughout; bf16: the forward and loss in bfloat16 autocast on the draft's
    device (weights, gradients and the optimiser stay float32: the master copy)"""
    ttt_steps: int = 1
    """training-time test: unrolled draft steps per row (:func:`unrolled_losses`); 1 = off"""
    ttt_decay: float = 0.8
    """weight of unrolled step k's loss: ``ttt_decay ** k``"""


@dataclass
class StageLog:
    """Per-step loss (total, regression, classification) and top-1 agreement with the target."""

    loss: list[float] = field(default_factory=list)
    loss_reg: list[float] = field(default_factory=list)
    loss_cls: list[float] = field(default_factory=list)
    top1: list[float] = field(default_factory=list)
    tokens_seen: int = 0
    check_tokens: list[int] = field(default_factory=list)
    """acceptance during training: the stage's tokens seen at each check
    (:mod:`workloads.training.checks`)"""
    check_acceptance: list[float] = field(default_factory=list)
    """the acceptance length measured at each check, tokens per cycle"""

    def to_json(self) -> dict[str, Any]:
        """The log as a JSON-serialisable dict (kept in checkpoints)."""
        return asdict(self)


def input_noise(
    shape: torch.Size,
    amount: float,
    gen: torch.Generator,
    *,
    seq_len: int,
    device: torch.device | None = None,
) -> torch.Tensor:
    """EAGLE's uniform feature noise for input hidden states of ``shape`` [B, T-2, h].

    ``(U[0, 1) - 0.5) * amount * 512 / T`` per element, T = ``seq_len`` (tokens per row):
    EAGLE's ``AddUniformNoise`` in ``eagle/train/main.py`` (SafeAILab/EAGLE), with
    ``train_config`` ``data_noise: True``, ``noise: "uniform"``, ``std: 0.2``; its
    ``tensor.shape[1]`` is the training sequence length, here T. It makes the draft tolerate
    its own predicted features at depth 2 and beyond.

    Drawn in float32 (the dtype the draft's input is summed in), in place on ``device``
    (default ``gen.device``; ``gen`` must be a generator of that device type): one allocation,
    no host tensor and no copy when training on a GPU. The numbers follow ``gen``'s seed on
    one device: a CPU and a CUDA generator with the same seed give different numbers (and
    CUDA's may differ between GPU models, its kernels' grids follow the SM count), so a run
    resumes to the same numbers on the machine kind it started on.
    """
    half = amount * 256 / seq_len
    dev = gen.device if device is None else device
    return torch.empty(shape, device=dev).uniform_(-half, half, generator=gen)


def training_device(draft: DraftModel) -> torch.device:
    """Where a training step's tensors live: the draft's (its frozen embedding's) device."""
    return draft.embed_weight.device


def position_losses(
    draft: DraftModel,
    ids_bt: torch.Tensor,
    mask_bt: torch.Tensor,
    hid_bth: torch.Tensor,
    pos_bt: torch.Tensor | None = None,
    *,
    noise_bth: torch.Tensor | None = None,
    forward: nn.Module | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-position EAGLE losses of a batch of rows (the alignment of EAGLE Sec. 3.2).

    Input at position t is ``(h_t, x_{t+1})``; it predicts ``h_{t+1}`` (SmoothL1) and
    ``x_{t+2}`` (cross-entropy against the target's distribution from ``h_{t+1}``). A position
    counts (weight 1) where ``x_{t+2}`` is in the loss mask and t, t+1, t+2 are in one document
    (segments from ``pos_bt``, see :mod:`workloads.data.packing`); the draft attends within
    its document only, at the document's own positions.

    Args:
        ids_bt, mask_bt, hid_bth: [B, T] ids, [B, T] loss mask, [B, T, h] target hidden states.
        pos_bt: [B, T] position ids; None = every row one document at ``0..T-1``.
        noise_bth: [B, T-2, h] added to the input hidden states (training only; see
            :func:`input_noise`).
        forward: runs the draft's forward (default ``draft``; a DDP or DeepSpeed wrapper).

    Returns:
        ``reg``, ``cls`` (per-position losses, graph attached), ``agree`` (draft top-1 equals
        the target's, no graph) and ``weight``, each [B, T-2] float.
    """
    ids_bt, mask_bt, hid, pos_bt, hid_in = _on_device(
        draft, ids_bt, mask_bt, hid_bth, pos_bt, noise_bth
    )
    pos_in = pos_bt[:, :-2]
    allowed = attention_allowed(pos_in)
    mask = None if allowed is None else additive_mask(allowed[:, 0], hid.dtype)
    f_bth = (forward or draft)(hid_in, ids_bt[:, 1:-1], pos_in, attention_mask=mask)
    target_h = hid[:, 1:-1]
    weight = (mask_bt[:, 2:] & same_segment(pos_bt, 2)).float()
    return (*_prediction_losses(draft, f_bth, target_h), weight)


def _on_device(
    draft: DraftModel,
    ids_bt: torch.Tensor,
    mask_bt: torch.Tensor,
    hid_bth: torch.Tensor,
    pos_bt: torch.Tensor | None,
    noise_bth: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch on the draft's device: ids, loss mask, hidden states (float32), positions
    (default ``0..T-1`` per row) and the input hidden states [B, T-2, h] (noise added)."""
    dev = training_device(draft)
    ids_bt, mask_bt, hid = ids_bt.to(dev), mask_bt.to(dev), hid_bth.to(dev).float()
    b, t = ids_bt.shape
    pos_bt = (torch.arange(t).expand(b, t) if pos_bt is None else pos_bt).to(dev)
    hid_in = hid[:, :-2] if noise_bth is None else hid[:, :-2] + noise_bth.to(dev)
    return ids_bt, mask_bt, hid, pos_bt, hid_in


def _prediction_losses(
    draft: DraftModel, f_bth: torch.Tensor, target_bth: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SmoothL1 [B, T] of the predicted hidden states and :func:`vocab_cross_entropy`'s
    ``cls`` and ``agree`` [B, T]; ``target_bth`` [B, T, F] target features, of which the
    last-layer states are the target (:func:`~workloads.models.fusion.last_layer`)."""
    target_bth = last_layer(target_bth, len(draft.arch.fusion_layers))
    reg = nn.functional.smooth_l1_loss(f_bth, target_bth, reduction="none").mean(-1)
    return (reg, *vocab_cross_entropy(draft, f_bth, target_bth))


def ttt_allowed(base_bqq: torch.Tensor, step: int) -> torch.Tensor:
    """Which keys a query of unrolled step ``step`` may attend (training-time test).

    The keys are step 0's, then each later step's, T apiece. The query at t continues the chain
    that left the target at position t: it sees step 0's keys as ``base_bqq`` allows (causal
    within a document) and, of each step i in 1..``step``, only key t (its own chain's step-i
    token), as the decoder's KV cache holds them (EAGLE-3 arXiv 2503.01840 Sec. 3; the mask of
    SpecForge's ``generate_eagle3_mask``).

    Args:
        base_bqq: [B, T, T] bool, step 0's mask (True = may attend).

    Returns:
        [B, T, (step + 1) * T] bool.
    """
    b, t, _ = base_bqq.shape
    own = torch.eye(t, dtype=torch.bool, device=base_bqq.device).expand(b, t, t)
    return torch.cat([base_bqq, *([own] * step)], dim=-1)


def _ahead(x: torch.Tensor, k: int, n: int) -> torch.Tensor:
    """``x[:, k : k + n]`` along dim 1, zero-padded at the end to length ``n``."""
    part = x[:, k : k + n]
    pad = n - part.shape[1]
    if pad <= 0:
        return part
    return torch.cat([part, part.new_zeros((part.shape[0], pad, *part.shape[2:]))], 1)


def unrolled_losses(
    draft: DraftModel,
    ids_bt: torch.Tensor,
    mask_bt: torch.Tensor,
    hid_bth: torch.Tensor,
    pos_bt: torch.Tensor | None = None,
    *,
    noise_bth: torch.Tensor | None = None,
    forward: nn.Module | None = None,
    steps: int = 1,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """:func:`position_losses` of each of ``steps`` unrolled draft steps (training-time test).

    Step 0 is :func:`position_losses` (``steps`` 1: exactly it). Step k at position t is fed
    step k-1's output at t, token ``x_{t+1+k}`` at position ``t+k``, and predicts ``h_{t+1+k}``
    and ``x_{t+2+k}``; it attends as :func:`ttt_allowed` says, through a KV cache that holds
    every step's keys (gradients flow through it and through the fed outputs). Its weight: the
    loss mask at ``t+2+k`` with t..t+2+k in one document; positions past the row weigh 0. Noise
    is added to step 0's target features only.

    Returns:
        One ``(reg, cls, agree, weight)`` per step, each [B, T-2] float.
    """
    if steps == 1:
        return [
            position_losses(
                draft, ids_bt, mask_bt, hid_bth, pos_bt, noise_bth=noise_bth, forward=forward
            )
        ]
    ids_bt, mask_bt, hid, pos_bt, x_in = _on_device(
        draft, ids_bt, mask_bt, hid_bth, pos_bt, noise_bth
    )
    b, n = x_in.shape[:2]
    pos_in = pos_bt[:, :n]
    allowed = attention_allowed(pos_in)
    base = (
        torch.ones(n, n, dtype=torch.bool, device=hid.device).tril().expand(b, n, n)
        if allowed is None
        else allowed[:, 0]
    )
    run, cache = forward or draft, draft.new_cache()
    out = []
    for k in range(steps):
        mask = additive_mask(ttt_allowed(base, k), hid.dtype)
        f_bth = run(x_in, _ahead(ids_bt[:, 1:], k, n), pos_in + k, attention_mask=mask, cache=cache)
        target_h = _ahead(hid[:, 1:], k, n)
        weight = _ahead((mask_bt[:, 2 + k :] & same_segment(pos_bt, 2 + k)).float(), 0, n)
        out.append((*_prediction_losses(draft, f_bth, target_h), weight))
        x_in = f_bth
    return out


CE_CHUNK_ELEMENTS = 1 << 26
"""logits held at once by :func:`vocab_cross_entropy`: positions per chunk x vocabulary (64M
elements, 256 MiB in float32; [16, 2048, 128K] would be 16 GiB per copy)"""


def _soft_ce(
    draft: DraftModel, f_ph: torch.Tensor, target_ph: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy [P] of the draft's distribution from ``f_ph`` against the target's from
    ``target_ph``, and top-1 agreement [P] (no graph), over the draft vocabulary."""
    with torch.no_grad():
        p_target_pn = torch.softmax(draft.logits(target_ph), -1)
    logp_draft_pn = torch.log_softmax(draft.logits(f_ph), -1)
    cls = -(p_target_pn * logp_draft_pn).sum(-1)
    with torch.no_grad():
        agree = (logp_draft_pn.argmax(-1) == p_target_pn.argmax(-1)).float()
    return cls, agree


def vocab_cross_entropy(
    draft: DraftModel,
    f_bth: torch.Tensor,
    target_bth: torch.Tensor,
    *,
    chunk_elements: int = CE_CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE's classification loss per position without a whole [B, T, N] logit tensor.

    The positions are cut into chunks of ``chunk_elements // N`` positions; each chunk's logits
    are computed, reduced to [chunk] and dropped, and recomputed in the backward pass (activation
    checkpointing), so at most one chunk's logits live at a time in either pass. A batch that
    fits one chunk runs as one piece, without recomputation.

    Args:
        f_bth: [B, T, h] draft outputs (graph attached).
        target_bth: [B, T, h] target hidden states at the same positions.

    Returns:
        ``cls`` [B, T] (graph attached) and ``agree`` [B, T] (draft top-1 = target top-1).
    """
    b, t, h = f_bth.shape
    per_chunk = max(1, chunk_elements // max(1, draft.vocab_size))
    if b * t <= per_chunk:
        return _soft_ce(draft, f_bth, target_bth)
    f_ph, target_ph = f_bth.reshape(b * t, h), target_bth.reshape(b * t, h)
    cls, agree = [], []
    for lo in range(0, b * t, per_chunk):
        c, a = checkpoint(
            _soft_ce,
            draft,
            f_ph[lo : lo + per_chunk],
            target_ph[lo : lo + per_chunk],
            use_reentrant=False,
        )
        cls.append(c)
        agree.append(a)
    return torch.cat(cls).view(b, t), torch.cat(agree).view(b, t)


def draft_loss(
    draft: DraftModel,
    ids_bt: torch.Tensor,
    mask_bt: torch.Tensor,
    hid_bth: torch.Tensor,
    *,
    w_reg: float,
    w_cls: float,
    pos_bt: torch.Tensor | None = None,
    noise_bth: torch.Tensor | None = None,
    denom: float | None = None,
    forward: nn.Module | None = None,
    precision: Literal["fp32", "bf16"] = "fp32",
    ttt_steps: int = 1,
    ttt_decay: float = 0.8,
) -> tuple[torch.Tensor, dict[str, float]]:
    """EAGLE loss on a batch of rows; returns (loss, {loss_reg, loss_cls, top1}).

    The weighted sum of :func:`unrolled_losses` (see there and :func:`position_losses` for
    ``pos_bt``, ``noise_bth`` and ``forward``), step k's times ``ttt_decay ** k``, divided by
    ``denom`` (default: step 0's weighted positions in this batch, at least 1; a data-parallel
    rank passes the global batch's over the world size, see :class:`DataParallel`). ``top1``
    is step 0's. Inputs move to the draft's device.
    """
    dev = training_device(draft)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        steps = unrolled_losses(
            draft,
            ids_bt,
            mask_bt,
            hid_bth,
            pos_bt,
            noise_bth=noise_bth,
            forward=forward,
            steps=ttt_steps,
        )
    _, _, agree_bt, weight = steps[0]
    if denom is None:
        denom = float(weight.sum().clamp_min(1.0))
    reg = cls = torch.zeros((), device=dev)
    for k, (reg_bt, cls_bt, _, w_bt) in enumerate(steps):
        step_reg, step_cls = (reg_bt.float() * w_bt).sum(), (cls_bt.float() * w_bt).sum()
        if k == 0:  # one step: exactly the EAGLE loss
            reg, cls = step_reg, step_cls
        else:
            reg, cls = reg + ttt_decay**k * step_reg, cls + ttt_decay**k * step_cls
    loss = (w_reg * reg + w_cls * cls) / denom
    top1 = float((agree_bt * weight).sum() / denom)
    parts = {"loss_reg": float(reg.detach() / denom), "loss_cls": float(cls.detach() / denom)}
    return loss, parts | {"top1": top1}


def lr_factor(step: int, total: int, s: StageSettings) -> float:
    """Learning-rate multiplier of optimiser step ``step`` (0-based) of ``total``.

    cosine: linear warmup then cosine decay to 0.1; wsd (Hu et al., MiniCPM, arXiv 2404.06395
    Sec. 4): linear warmup, 1.0 until ``total - decay_steps``, then linear decay to 0.1. Before
    its decay a wsd factor does not depend on ``total``, which is what lets budgets share a trunk.
    """
    warmup = s.warmup_steps
    if step < warmup:
        return (step + 1) / warmup
    if s.schedule == "wsd":
        decay_start = total - s.decay_steps
        if step < decay_start:
            return 1.0
        return 1.0 - 0.9 * (step - decay_start + 1) / max(s.decay_steps, 1)
    progress = (step - warmup) / max(total - warmup, 1)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def total_steps(rows: int, s: StageSettings) -> int:
    """Optimiser steps of a stage over ``rows`` rows."""
    return -(-rows // s.batch_size) * s.epochs


def make_optimizer(draft: DraftModel, s: StageSettings) -> torch.optim.AdamW:
    """AdamW (0.9, 0.95) over the draft's trainable parameters (EAGLE's settings)."""
    params = [p for p in draft.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=s.lr, betas=(0.9, 0.95), weight_decay=s.weight_decay)


class _RowOrder:
    """Row indices of each step: per-epoch seeded permutations (replayed on resume) or stream.

    Epoch e's permutation is the e-th ``randperm`` of a generator seeded by ``s.seed``; only the
    current epoch's is kept (R longs, the one thing here proportional to the stage)."""

    def __init__(self, rows: int, s: StageSettings) -> None:
        self.rows, self.s = rows, s
        self.per_epoch = -(-rows // s.batch_size)
        self._gen = torch.Generator().manual_seed(s.seed)
        self._epoch, self._perm = -1, torch.zeros(0, dtype=torch.long)

    def __call__(self, step: int) -> torch.Tensor:
        epoch, i = divmod(step, self.per_epoch)
        lo, hi = i * self.s.batch_size, min((i + 1) * self.s.batch_size, self.rows)
        if self.s.order == "stream":
            return torch.arange(lo, hi)
        if epoch < self._epoch:  # an earlier epoch: replay the generator from the seed
            self._gen.manual_seed(self.s.seed)
            self._epoch = -1
        while self._epoch < epoch:
            self._perm = torch.randperm(self.rows, generator=self._gen)
            self._epoch += 1
        return self._perm[lo:hi]


def _share(
    feats: FeatureSet, idx: torch.Tensor, par: DataParallel | None
) -> tuple[torch.Tensor, PackedRows, torch.Tensor, float | None]:
    """This rank's rows of the global batch ``idx`` (indices and packed rows), a loss-mask
    factor and the denominator; reads the packed rows of ``idx`` once."""
    rows = feats.packed(idx)
    if par is None:
        return idx, rows, torch.tensor(True), None
    at = torch.tensor_split(torch.arange(len(idx)), par.world)[par.rank]  # places in idx
    weight = torch.tensor(len(at) > 0)
    if len(at) == 0:  # a short last batch: one row with zero weight joins the all-reduce
        at = torch.zeros(1, dtype=torch.long)
    counted = rows.loss_mask[:, 2:] & same_segment(rows.position_ids, 2)
    positions = float(counted.sum().clamp_min(1))
    mine = PackedRows(rows.input_ids[at], rows.loss_mask[at], rows.position_ids[at])
    return idx[at], mine, weight, positions / par.world


def _summed(
    loss: torch.Tensor, parts: dict[str, float], par: DataParallel | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The global batch's loss and parts: each rank's share summed over the ranks."""
    if par is None or par.world == 1:
        return loss, parts
    keys = sorted(parts)
    dev = loss.device
    vals = torch.tensor([float(loss.detach())] + [parts[k] for k in keys], device=dev)
    torch.distributed.all_reduce(vals)
    vals = vals.cpu() / par.world
    return vals[0], {k: float(v) for k, v in zip(keys, vals[1:], strict=True)}


def train_stage(
    draft: DraftModel,
    feats: FeatureSet,
    s: StageSettings,
    on_step: Callable[[int, int, float], None] | None = None,
    *,
    opt: torch.optim.Optimizer | None = None,
    log: StageLog | None = None,
    start: int = 0,
    stop: int | None = None,
    on_checkpoint: Callable[[int, StageLog], None] | None = None,
    checkpoint_every: int = 0,
    parallel: DataParallel | None = None,
) -> StageLog:
    """Train ``draft`` in place over steps ``[start, stop)`` of a stage on ``feats``.

    Args:
        draft: the draft, trained in place.
        feats: the stage's rows and hidden states (cached, online or in RAM); each step reads
            its own rows only.
        s: optimisation settings; the stage has ``total_steps(rows, s)`` steps.
        on_step: ``(step, total_steps, loss)`` after every optimiser step (progress).
        opt: the optimiser to continue (its state restored from a checkpoint); default a new
            AdamW from :func:`make_optimizer`.
        log: the stage's log so far (appended to); default empty.
        start: first step to run (resume); data order and learning rate are those of an
            uninterrupted run.
        stop: step to stop before; default the end of the stage.
        on_checkpoint: ``(steps_done, log)`` every ``checkpoint_every`` steps (the caller saves).
        checkpoint_every: steps between checkpoint calls; 0 = never.
        parallel: this process's share of data-parallel training (see
            :class:`DataParallel`); every rank calls with the same ``feats`` and settings.

    Returns:
        The log: per-step losses, top-1 agreement and tokens seen.
    """
    out = log if log is not None else StageLog()
    rows = feats.rows
    if rows == 0:
        return out
    total = total_steps(rows, s)
    stop = total if stop is None else min(stop, total)
    opt = opt if opt is not None else make_optimizer(draft, s)
    params = [p for g in opt.param_groups for p in g["params"]]
    order = _RowOrder(rows, s)
    dev = training_device(draft)
    gen = torch.Generator(device=dev)  # the noise is drawn where it is added (see input_noise)
    draft.train()
    for step in range(start, stop):
        for group in opt.param_groups:
            group["lr"] = s.lr * lr_factor(step, total, s)
        idx = order(step)
        mine, packed, weight, denom = _share(feats, idx, parallel)
        hidden = feats.hidden(mine, packed)
        noise = None
        if s.feature_noise > 0:
            rank = parallel.rank if parallel else 0
            gen.manual_seed(s.seed * 1_000_003 + step * 1_009 + rank)  # per step: resumable
            b, t, h = hidden.shape
            shape = torch.Size((b, t - 2, h))
            noise = input_noise(shape, s.feature_noise, gen, seq_len=t, device=dev)
        loss, parts = draft_loss(
            draft,
            packed.input_ids,
            packed.loss_mask & weight,
            hidden,
            w_reg=s.w_reg,
            w_cls=s.w_cls,
            pos_bt=packed.position_ids,
            noise_bth=noise,
            denom=denom,
            forward=parallel.model if parallel else None,
            precision=s.precision,
            ttt_steps=s.ttt_steps,
            ttt_decay=s.ttt_decay,
        )
        if parallel is not None and parallel.update is not None:
            parallel.update(loss)
        else:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(params, s.grad_clip)
            opt.step()
        loss, parts = _summed(loss, parts, parallel)
        value = float(loss.detach())
        out.loss.append(value)
        out.loss_reg.append(parts["loss_reg"])
        out.loss_cls.append(parts["loss_cls"])
        out.top1.append(parts["top1"])
        out.tokens_seen += len(idx) * feats.seq_len
        if on_step is not None:
            on_step(step + 1, total, value)
        if on_checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0:
            on_checkpoint(step + 1, out)
    draft.eval()
    return out
