"""``train.keep_checkpoints``: only the newest checkpoints stay, and a retry still resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workloads.training.test_stages import S, _draft, _feats, _same, _say, _weights
from workloads.training.checkpoint import latest_checkpoint, prune_checkpoints
from workloads.training.stages import run_stage


def _steps(folder: Path, prefix: str) -> list[int]:
    return sorted(int(p.name.rsplit("-", 1)[1]) for p in folder.glob(f"{prefix}-step-*"))


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_only_the_newest_checkpoints_stay(tmp_path: Path, keep: int) -> None:
    feats = _feats(10)  # 10 steps, a checkpoint every 2 and at the end: 2, 4, 6, 8, 10
    run_stage("sft", _draft(), feats, S, ckpt_dir=tmp_path, checkpoint_every=2, say=_say, keep=keep)
    assert _steps(tmp_path, "sft") == [2, 4, 6, 8, 10][-keep:]


def test_pruning_keeps_other_stages_and_unfinished_folders(tmp_path: Path) -> None:
    run_stage("pretrain", _draft(), _feats(4), S, ckpt_dir=tmp_path, checkpoint_every=1,
              say=_say, keep=2)  # fmt: skip
    (tmp_path / "sft-step-0000001.tmp").mkdir()
    assert prune_checkpoints(tmp_path, "sft", 1) == []
    assert _steps(tmp_path, "pretrain") == [3, 4]
    assert (tmp_path / "sft-step-0000001.tmp").is_dir()
    with pytest.raises(ValueError, match="at least the newest"):
        prune_checkpoints(tmp_path, "pretrain", 0)


def test_a_retry_resumes_from_the_newest_kept_checkpoint(tmp_path: Path) -> None:
    feats = _feats(10)
    ref = _draft()
    run_stage("sft", ref, feats, S, ckpt_dir=tmp_path / "ref", checkpoint_every=0, say=_say)
    first = _draft()
    run_stage("sft", first, feats, S, ckpt_dir=tmp_path / "t", checkpoint_every=3, say=_say,
              keep=1)  # fmt: skip
    newest = latest_checkpoint(tmp_path / "t", "sft")
    assert newest is not None and newest.name.endswith("0000010")
    retry = _draft()
    out = run_stage("sft", retry, feats, S, ckpt_dir=tmp_path / "t", checkpoint_every=3,
                    say=_say, keep=1)  # fmt: skip
    assert out.resumed_from == 10 and out.steps_trained == 0
    assert _same(_weights(retry), _weights(ref))
