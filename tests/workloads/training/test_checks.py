"""Acceptance during training: checks land at the asked token counts and at each stage's end,
survive a crash and resume without repeats, and leave the trained draft unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.workloads.training.test_stages import S, _Crash, _draft, _feats, _same, _say, _weights
from workloads.models.draft import DraftModel
from workloads.training.checks import AcceptanceChecks
from workloads.training.stages import run_stage


def _probe(
    draft: DraftModel, calls: list[bool], seen: list[float] | None = None
) -> AcceptanceChecks:
    """A check that reads the draft in eval mode (a forward on fixed rows) and draws from the
    global RNG, as a decoder may; it records whether the draft was in training mode and, in
    ``seen``, each value it measured."""
    ids = torch.arange(12).reshape(1, 12) % 64
    hidden, pos = torch.ones(1, 12, 16), torch.arange(12).reshape(1, 12)

    def measure() -> float:
        calls.append(draft.training)
        draft.eval()
        with torch.no_grad():
            out = draft(hidden, ids, pos)
        torch.rand(3)  # an RNG draw must not change the trained draft
        draft.train()
        value = 1.0 + float(out.abs().mean())
        if seen is not None:
            seen.append(value)
        return value

    return AcceptanceChecks(50, measure, _say, "sft")


def test_checks_land_at_the_asked_tokens_and_leave_the_draft_unchanged(tmp_path: Path) -> None:
    feats = _feats(10)  # 10 rows of 12 tokens, batch 2: 24 tokens a step, 10 steps, 240 tokens
    ref = _draft()
    run_stage("sft", ref, feats, S, ckpt_dir=tmp_path / "ref", checkpoint_every=0, say=_say)
    checked, calls, seen = _draft(), [], []
    out = run_stage(
        "sft", checked, feats, S, ckpt_dir=tmp_path / "c", checkpoint_every=0, say=_say,
        checks=_probe(checked, calls, seen),
    )  # fmt: skip
    # the first step past each multiple of 50 tokens (72, 120, 168, 216), then the end (240)
    assert out.log.check_tokens == [72, 120, 168, 216, 240]
    assert out.log.check_acceptance == seen  # the log holds each check's measure, in order
    # four between training steps (training mode restored after each), one after the stage
    assert calls == [True] * 4 + [False]
    assert len(set(out.log.check_acceptance)) > 1  # the draft changed between checks
    assert _same(_weights(checked), _weights(ref))


def test_a_resumed_stage_keeps_its_checks_and_repeats_none(tmp_path: Path) -> None:
    feats = _feats(10)
    whole, calls = _draft(), []
    ref = run_stage(
        "sft", whole, feats, S, ckpt_dir=tmp_path / "w", checkpoint_every=0, say=_say,
        checks=_probe(whole, calls),
    )  # fmt: skip
    crashed = _draft()
    probe = _probe(crashed, [])
    done = probe.after_step

    def after_step(log) -> None:  # noqa: ANN001
        done(log)
        if len(log.loss) == 7:
            raise _Crash

    probe.after_step = after_step  # type: ignore[method-assign]
    ckpt = tmp_path / "trial"
    with pytest.raises(_Crash):  # dies after step 7; the checkpoint of step 6 holds 2 checks
        run_stage("sft", crashed, feats, S, ckpt_dir=ckpt, checkpoint_every=3, say=_say,
                  checks=probe)  # fmt: skip
    retry = _draft()
    out = run_stage(
        "sft", retry, feats, S, ckpt_dir=ckpt, checkpoint_every=3, say=_say,
        checks=_probe(retry, []),
    )  # fmt: skip
    assert out.resumed_from == 6
    assert out.log.check_tokens == ref.log.check_tokens == [72, 120, 168, 216, 240]
    assert out.log.check_acceptance == pytest.approx(ref.log.check_acceptance, abs=0)


def test_a_stage_without_tokens_is_not_checked(tmp_path: Path) -> None:
    calls: list[bool] = []
    d = _draft()
    out = run_stage("pretrain", d, _feats(0), S, ckpt_dir=tmp_path, checkpoint_every=0, say=_say,
                    checks=_probe(d, calls))  # fmt: skip
    assert out.log.check_tokens == [] and calls == []


def test_every_tokens_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every_tokens=0"):
        AcceptanceChecks(0, lambda: 1.0, _say)
