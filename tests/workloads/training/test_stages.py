"""Checkpoints, resume after a crash, and wsd-fork trunks, on a tiny draft with synthetic rows.

The math is what is under test (data order, learning rate and optimiser state survive a restart;
a shared trunk gives the same weights as training the budget alone), so a small random draft is
enough; the real workload path runs in tests/orchestrator.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from workloads.draft_train.config import DraftTrainConfig
from workloads.models.draft import DraftArch, DraftModel
from workloads.training.checkpoint import latest_checkpoint
from workloads.training.features import Features
from workloads.training.loop import StageSettings, lr_factor, train_stage
from workloads.training.stages import run_stage, run_wsd_fork_pretrain, trunk_key

V, H, L = 64, 16, 12


def _arch() -> DraftArch:
    return DraftArch(
        hidden_size=H, layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        intermediate_size=32, rms_norm_eps=1e-6, rope_theta=10000.0,
        max_position_embeddings=64, output_norm=True,
    )  # fmt: skip


def _draft(seed: int = 0) -> DraftModel:
    g = torch.Generator().manual_seed(123)
    embed, head = torch.randn(V, H, generator=g), torch.randn(V, H, generator=g)
    torch.manual_seed(seed)
    return DraftModel(_arch(), embed_weight=embed, lm_head_weight=head)


def _feats(rows: int) -> Features:
    """The first ``rows`` rows of one fixed synthetic stream (nested like real budgets)."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, V, (64, L), generator=g)[:rows]
    hidden = torch.randn(64, L, H, generator=g)[:rows].half()
    return Features(ids, torch.ones_like(ids, dtype=torch.bool), hidden)


S = StageSettings(
    epochs=2, batch_size=2, lr=3e-3, warmup_steps=2, weight_decay=0.0, grad_clip=0.5,
    w_reg=1.0, w_cls=0.1, seed=0,
)  # fmt: skip


def _weights(d: DraftModel) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in d.trainable_state().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _say(msg: str) -> None:
    pass


class _Crash(RuntimeError):
    pass


def test_a_crashed_stage_resumes_to_the_same_weights(tmp_path: Path) -> None:
    feats = _feats(10)  # 5 steps per epoch, 10 steps
    ref = _draft()
    ref_log = run_stage("sft", ref, feats, S, ckpt_dir=tmp_path / "ref", checkpoint_every=0,
                        say=_say)  # fmt: skip

    crashed = _draft()

    def crash(step: int, total: int, loss: float) -> None:
        if step == 7:
            raise _Crash

    ckpt = tmp_path / "trial"
    with pytest.raises(_Crash):  # the first attempt dies after step 7, checkpoints every 3
        run_stage_with_hook(crashed, feats, ckpt, crash)
    assert latest_checkpoint(ckpt, "sft") is not None
    retry = _draft()  # a new worker: fresh init, then the checkpoint
    out = run_stage("sft", retry, feats, S, ckpt_dir=ckpt, checkpoint_every=3, say=_say)
    assert out.resumed_from == 6
    assert out.steps_trained == 4
    assert _same(_weights(retry), _weights(ref))
    assert out.log.loss == ref_log.log.loss  # the curve before the crash comes from the checkpoint


def run_stage_with_hook(draft: DraftModel, feats: Features, ckpt: Path, hook) -> None:  # noqa: ANN001
    """run_stage's checkpointing with an on_step hook that can crash the stage."""
    from workloads.training.checkpoint import checkpoint_name, save_checkpoint
    from workloads.training.loop import make_optimizer

    opt = make_optimizer(draft, S)

    def save(step: int, lg) -> None:  # noqa: ANN001
        save_checkpoint(ckpt / checkpoint_name("sft", step), draft, opt,
                        {"step": step, "log": lg.to_json()})  # fmt: skip

    train_stage(draft, feats, S, hook, opt=opt, on_checkpoint=save, checkpoint_every=3)


def test_wsd_lr_before_the_decay_does_not_depend_on_the_budget() -> None:
    s = replace(S, schedule="wsd", decay_steps=4)
    short = [lr_factor(i, 10, s) for i in range(6)]
    long = [lr_factor(i, 40, s) for i in range(6)]
    assert short == long == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert lr_factor(9, 10, s) == pytest.approx(0.1)  # ends at 10% of the peak


def test_wsd_fork_shares_the_trunk_and_matches_a_budget_trained_alone(tmp_path: Path) -> None:
    s = replace(S, epochs=1)
    small, large = _feats(8), _feats(20)  # 4 and 10 steps; large's rows extend small's
    assert torch.equal(large.hidden_states[:8], small.hidden_states)
    common = {"decay_frac": 0.2, "checkpoint_every": 0, "say": _say}
    shared = tmp_path / "trunk"
    a = _draft()
    out_a = run_wsd_fork_pretrain(a, small, s, trunk_dir=shared, ckpt_dir=tmp_path / "a",
                                  **common)  # fmt: skip
    b = _draft()
    out_b = run_wsd_fork_pretrain(b, large, s, trunk_dir=shared, ckpt_dir=tmp_path / "b",
                                  **common)  # fmt: skip
    alone = _draft()
    out_alone = run_wsd_fork_pretrain(alone, large, s, trunk_dir=tmp_path / "own",
                                      ckpt_dir=tmp_path / "c", **common)  # fmt: skip
    # budget 4 steps: trunk 3 + decay 1; budget 10: trunk 8 (3 reused) + decay 2
    assert (out_a.trunk_steps_reused, out_a.steps_trained) == (0, 4)
    assert (out_b.trunk_steps_reused, out_b.steps_trained) == (3, 7)
    assert out_alone.steps_trained == 10
    assert _same(_weights(b), _weights(alone))
    assert out_b.log.loss == out_alone.log.loss
    assert out_a.tokens_trained + out_b.tokens_trained == (4 + 7) * 2 * L  # < (4 + 10) * 2 * L


def test_wsd_fork_needs_a_fixed_vocabulary() -> None:
    with pytest.raises(ValueError, match="draft.vocab_tokens"):
        DraftTrainConfig.model_validate({"pretrain": {"schedule": "wsd-fork"}})
    ok = DraftTrainConfig.model_validate(
        {"pretrain": {"schedule": "wsd-fork"}, "draft": {"vocab_tokens": 4096}}
    )
    other_budget = ok.model_copy(update={"pretrain": ok.pretrain.model_copy(update={"tokens": 9})})
    assert trunk_key(ok) == trunk_key(other_budget)
    other_seed = ok.model_copy(update={"seed": 1})
    assert trunk_key(ok) != trunk_key(other_seed)
