"""draft_train on the real target with tiny budgets: a retried trial resumes from its checkpoint,
wsd-fork budgets share the trunk, and the step-cost metrics are measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.draft_train import run as draft_train
from workloads.draft_train.config import DraftTrainConfig

TINY = {
    "pretrain": {"tokens": 1024, "seq_len": 128},
    "sft": {"tokens": 256, "epochs": 1, "seq_len": 128},
    "draft": {"vocab_size": 2048, "vocab_tokens": 1024},
    "train": {"batch_size": 2, "warmup_steps": 2, "checkpoint_every": 2},
    "eval": {"prompt_sets": ["sharegpt"], "num_prompts": 1, "max_new_tokens": 8, "depth": 2,
             "topk": 2, "num_draft_tokens": 3},
}  # fmt: skip


def _cfg(**pretrain: object) -> DraftTrainConfig:
    return DraftTrainConfig.model_validate(TINY | {"pretrain": TINY["pretrain"] | pretrain})


class _StopAfterPretrain(RuntimeError):
    pass


def _crash_after_pretrain(msg: str) -> None:
    if msg.startswith("pretrain:") and "steps" in msg and "resuming" not in msg:
        raise _StopAfterPretrain(msg)


@pytest.mark.slow  # real target; the stub-based resume tests in test_stages.py stay in CI
def test_a_retried_trial_resumes_and_matches_an_uninterrupted_one(
    target: object, cache_dir: Path, tmp_path: Path
) -> None:
    cfg = _cfg()
    whole = draft_train.run(cfg, cache_dir=cache_dir, out_dir=tmp_path / "whole")
    trial = tmp_path / "trial"
    with pytest.raises(_StopAfterPretrain):  # the worker dies once pretraining is done
        draft_train.run(cfg, cache_dir=cache_dir, out_dir=trial, progress=_crash_after_pretrain)
    assert (trial / "checkpoints").is_dir()
    retry = draft_train.run(cfg, cache_dir=cache_dir, out_dir=trial)
    m, w = retry.metrics, whole.metrics
    assert m["pretrain.resumed_from_step"] == m["pretrain.steps"] == 4
    assert m["pretrain.tokens_trained"] == 0 and w["pretrain.tokens_trained"] == 1024
    assert m["acceptance_length"] == w["acceptance_length"]
    assert retry.series["pretrain/loss"] == whole.series["pretrain/loss"]
    assert retry.series["sft/loss"] == whole.series["sft/loss"]
    assert not (trial / "checkpoints").exists()  # cleared once the draft is saved
    for k in ("draft.ms_per_step", "target.ms_per_step", "speedup"):
        assert m[k] > 0


@pytest.mark.slow  # real target; test_stages.py checks trunk sharing on stubs in CI
def test_wsd_fork_budgets_share_the_trunk(cache_dir: Path, tmp_path: Path) -> None:
    small = draft_train.run(
        _cfg(schedule="wsd-fork", tokens=512), cache_dir=cache_dir, out_dir=tmp_path / "a"
    )
    large = draft_train.run(
        _cfg(schedule="wsd-fork", tokens=1024), cache_dir=cache_dir, out_dir=tmp_path / "b"
    )
    # 512 tokens = 2 steps: trunk 2 - round(0.4) = 2 steps, no decay < 1 -> decay 1, trunk 1
    assert small.metrics["pretrain.trunk_steps_reused"] == 0
    assert large.metrics["pretrain.trunk_steps_reused"] == 1
    assert large.metrics["pretrain.tokens_trained"] == 1024 - 256
    assert large.metrics["pretrain.tokens_seen"] == 1024


def test_acceptance_metrics_per_set_from_the_per_prompt_rows() -> None:
    """Issue 24: the trial's acceptance metrics, overall and per set, from ``EvalResult``'s
    per-prompt rows (fixed counts): pooled under the old names, the per-prompt mean beside."""
    from workloads.draft_train.run import _acceptance

    rows: list[dict[str, object]] = [
        {"set": "humaneval", "cycles": 10, "accepted": 40},
        {"set": "humaneval", "cycles": 3, "accepted": 3},
        {"set": "specbench/sum", "cycles": 2, "accepted": 4},
    ]
    overall = _acceptance(rows)
    assert overall["acceptance_length"] == pytest.approx(47 / 15)
    assert overall["acceptance_length_prompt_mean"] == pytest.approx(7 / 3)
    one = _acceptance(rows[:2], suffix="/humaneval")
    assert one["acceptance_length/humaneval"] == pytest.approx(43 / 13)
    assert one["acceptance_length_prompt_mean/humaneval"] == pytest.approx(2.5)
    assert (
        _acceptance(rows[2:], suffix="/specbench/sum")["acceptance_length_ci_low/specbench/sum"]
        == 2.0
    )
