"""The two training stages of a trial with checkpoints: resume on retry, and wsd-fork trunks.

*Resume*: every ``checkpoint_every`` steps and at the end of a stage the trial writes a
checkpoint into its own folder; a retried trial (same trial folder) continues from the newest
one with the same data order and learning rate, so the result equals an uninterrupted run.

*wsd-fork* (token-budget sweeps; warmup-stable-decay, Hu et al., MiniCPM, arXiv 2404.06395
Sec. 4): the pretraining of a budget of N steps is a shared *trunk* (warmup, then constant peak
learning rate, rows in corpus order) up to step ``N - decay`` and a private *decay branch* for
the last ``decay = round(decay_frac * N)`` steps. Trunks live in the shared cache, one per
(everything but the budget) and seed, with a checkpoint at every branch point; a trial extends
the trunk from the newest checkpoint before its branch point, under a file lock, so the grid
trains the largest budget's trunk once plus one short decay per budget instead of every budget
from scratch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from workloads.draft_train.config import DraftTrainConfig
from workloads.models.draft import DraftModel
from workloads.training.checkpoint import (
    checkpoint_name,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from workloads.training.checks import AcceptanceChecks
from workloads.training.features import FeatureSet
from workloads.training.loop import (
    StageLog,
    StageSettings,
    make_optimizer,
    total_steps,
    train_stage,
)

Say = Callable[[str], None]


@dataclass
class StageOutcome:
    """The log of a finished stage and what this trial itself computed of it."""

    log: StageLog
    steps_trained: int = 0
    """optimiser steps run in this call (excludes steps restored from checkpoints)"""
    tokens_trained: int = 0
    """tokens processed in this call"""
    resumed_from: int = 0
    """step of the trial checkpoint it resumed from (0 = fresh start)"""
    trunk_steps_reused: int = 0
    """wsd-fork: trunk steps taken from a shared checkpoint instead of trained"""


def _log_from(record: dict[str, Any]) -> StageLog:
    return StageLog(**record["log"])


def trunk_key(cfg: DraftTrainConfig) -> str:
    """Identity of a wsd-fork trunk: the trial config without the budget, the decay, SFT and
    evaluation (none of which changes the trunk). 16 hex chars."""
    d = cfg.model_dump(mode="json")
    for k in ("tokens", "decay_frac", "schedule"):
        d["pretrain"].pop(k, None)
    d.pop("sft")
    d.pop("eval")
    d["train"].pop("checkpoint_every", None)
    d["train"].pop("workers", None)
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_stage(
    stage: str,
    draft: DraftModel,
    feats: FeatureSet,
    s: StageSettings,
    *,
    ckpt_dir: Path,
    checkpoint_every: int,
    say: Say,
    keep: int = 2,
    checks: AcceptanceChecks | None = None,
) -> StageOutcome:
    """Train one stage, resuming from the trial's newest ``stage`` checkpoint in ``ckpt_dir``.

    The stage's final state is saved as a checkpoint too, so a retry after the stage skips it;
    only the ``keep`` newest checkpoints of the stage stay on disk. ``checks``: acceptance
    measured during the stage (its points land in the log, hence in the checkpoints).
    """
    total = total_steps(feats.rows, s)
    opt = make_optimizer(draft, s)
    found = latest_checkpoint(ckpt_dir, stage)
    log, start = StageLog(), 0
    if found is not None:
        record = load_checkpoint(found, draft, opt)
        log, start = _log_from(record), int(record["step"])
        say(f"{stage}: resuming from step {start} of {total} ({found.name})")
    out = StageOutcome(log=log, resumed_from=start)
    if start >= total:
        return out

    def save(step: int, lg: StageLog) -> None:
        save_checkpoint(
            ckpt_dir / checkpoint_name(stage, step), draft, opt, {"step": step, "log": lg.to_json()}
        )
        prune_checkpoints(ckpt_dir, stage, keep)

    seen = log.tokens_seen
    train_stage(
        draft,
        feats,
        s,
        opt=opt,
        log=log,
        start=start,
        on_checkpoint=save,
        checkpoint_every=checkpoint_every,
        on_step=None if checks is None else lambda *_: checks.after_step(log),
    )
    if checks is not None:
        checks.at_end(log)
    save(total, log)
    out.steps_trained, out.tokens_trained = total - start, log.tokens_seen - seen
    return out


def run_wsd_fork_pretrain(
    draft: DraftModel,
    feats: FeatureSet,
    s: StageSettings,
    *,
    decay_frac: float,
    trunk_dir: Path,
    ckpt_dir: Path,
    checkpoint_every: int,
    say: Say,
    keep: int = 2,
) -> StageOutcome:
    """Pretrain by wsd-fork: extend the shared trunk to this budget's branch point, then decay.

    Args:
        draft: freshly initialised (seeded) draft; trained in place.
        feats: the first rows of the pretraining stream (this budget's rows).
        s: stage settings; ``schedule``/``order``/``decay_steps`` are set here.
        decay_frac: share of the budget's steps in the decay branch, in (0, 1].
        trunk_dir: the trunk's folder in the shared cache (see :func:`trunk_key`).
        ckpt_dir: this trial's checkpoint folder (the branch resumes from it on retry).
        keep: newest checkpoints of the branch kept in ``ckpt_dir`` (the trunk's checkpoints in
            the shared cache are branch points of other budgets: all are kept).
    """
    total = total_steps(feats.rows, replace(s, epochs=1))
    decay = min(total, max(1, round(decay_frac * total)))
    branch = total - decay
    s = replace(s, epochs=1, schedule="wsd", decay_steps=decay, order="stream")
    mine = latest_checkpoint(ckpt_dir, "pretrain")
    if mine is not None and int(mine.name.rsplit("-", 1)[1]) >= branch:
        return run_stage(
            "pretrain",
            draft,
            feats,
            s,
            ckpt_dir=ckpt_dir,
            checkpoint_every=checkpoint_every,
            say=say,
            keep=keep,
        )
    trunk_dir.mkdir(parents=True, exist_ok=True)
    opt = make_optimizer(draft, s)
    log, trunk_from = StageLog(), 0
    with FileLock(str(trunk_dir / "trunk.lock")):
        found = latest_checkpoint(trunk_dir, "trunk", max_step=branch)
        if found is not None:
            record = load_checkpoint(found, draft, opt)
            log, trunk_from = _log_from(record), int(record["step"])

        def save_trunk(step: int, lg: StageLog) -> None:
            folder = trunk_dir / checkpoint_name("trunk", step)
            save_checkpoint(folder, draft, opt, {"step": step, "log": lg.to_json()})

        say(f"pretrain: wsd-fork trunk from step {trunk_from} to {branch}, then {decay} decay")
        train = functools.partial(
            train_stage, draft, feats, s, opt=opt, log=log, checkpoint_every=checkpoint_every
        )  # the trunk's steps, then the branch's
        train(start=trunk_from, stop=branch, on_checkpoint=save_trunk)
        save_trunk(branch, log)
    out = StageOutcome(log=log, trunk_steps_reused=trunk_from)

    def save(step: int, lg: StageLog) -> None:
        folder = ckpt_dir / checkpoint_name("pretrain", step)
        save_checkpoint(folder, draft, opt, {"step": step, "log": lg.to_json()})
        prune_checkpoints(ckpt_dir, "pretrain", keep)

    train(start=branch, on_checkpoint=save)
    save(total, log)
    reused_tokens = _tokens_of_steps(feats, s, trunk_from)
    out.steps_trained = total - trunk_from
    out.tokens_trained = log.tokens_seen - reused_tokens
    return out


def _tokens_of_steps(feats: FeatureSet, s: StageSettings, steps: int) -> int:
    """Tokens in the rows of the first ``steps`` steps of a single-epoch stream-order stage."""
    rows = min(steps * s.batch_size, feats.rows)
    return rows * feats.seq_len


def clear_checkpoints(ckpt_dir: Path) -> None:
    """Delete a finished trial's checkpoints (its draft is saved separately)."""
    shutil.rmtree(ckpt_dir, ignore_errors=True)
