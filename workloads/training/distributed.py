"""Draft training on several workers: Ray Train's TorchTrainer, DDP or DeepSpeed ZeRO.

A trial with ``train.workers: N`` (or a ``train.deepspeed`` config) trains its stages on N Ray
Train workers instead of in its own process: a ``TorchTrainer`` starts the workers, sets up the
``torch.distributed`` process group (gloo on CPU, NCCL on GPU) and runs :func:`_worker_loop` on
each; every worker runs :func:`~workloads.training.loop.train_stage` with its
:class:`~workloads.training.loop.DataParallel` share of each global batch, so the loss curve equals
the single-process one up to the order of float sums (README: "Training on several workers").
Rank 0 reports the trained weights and the logs as a Ray Train checkpoint under
``<trial out_dir>/ray_train``; the caller's draft is updated from it and the folder removed.

Resources: the trial task keeps its ``num_cpus`` for features and evaluation; while it waits for
the trainer, Ray lends those CPUs to the workers (a task blocked in ``ray.get`` releases its
CPUs), which take ``num_cpus / N`` CPUs and ``num_gpus / N`` GPUs each. GPUs are not released
that way, so a trial that trains on workers holds no GPU itself (``orchestrator.driving.runner``).

Features: each stage's :class:`~workloads.training.features.FeatureSet` goes to the workers through
the object store once (``ray.put``). A lazy set pickles small and reads rows only when asked, so
each rank reads its own rows and nothing else: a
:class:`~workloads.training.feature_cache.CachedFeatures` maps only the cache chunks of its rank's
rows (its folder must be readable on every node: on a multi-node cluster, shared storage), an
:class:`~workloads.training.online_features.OnlineFeatures` loads the target inside the worker on
first use, on its ``TargetSpec.device`` (one target per worker: N workers on one node hold N
copies), and runs it on the rank's rows of each step. An in-RAM
:class:`~workloads.training.features.Features` is copied whole to every worker (small sets, tests).

Precision: each stage's ``StageSettings.precision``. ``bf16`` runs the forward and the loss in
bfloat16 autocast on the worker's device while weights, gradients and the optimiser stay float32
(with DDP the gradient all-reduce is float32). A DeepSpeed config with ``bf16: {enabled: true}``
is DeepSpeed's own mixed precision: the engine casts the draft's trainable weights to bfloat16
and keeps the float32 master copy in its (ZeRO-partitioned) optimiser; such a stage always runs
its forward in bfloat16 autocast, and at the end of each stage the float32 master weights are
gathered back into the draft, so what rank 0 hands back (and the next stage starts from) is never
rounded to bfloat16. Both run on CPU workers with gloo (tested on 2 workers: autocast with DDP
and ZeRO-2, DeepSpeed's bf16 with ZeRO-2; its bf16 with ZeRO 0-1 ran in one process, stage 0
through its ``BF16_Optimizer``, about 1% off the autocast losses). fp16 is refused
(:func:`~workloads.draft_train.config.check_deepspeed_config`).

GPUs (not run: no GPU was at hand): workers get ``num_gpus / N`` GPUs, DDP and DeepSpeed use
NCCL, the draft moves to ``ray.train.torch.get_device()`` and bf16 autocast is CUDA's. Untested
there: DeepSpeed's bf16 and the weight gathering over NCCL, and an online target's device on a
worker (``cuda`` is the worker's current CUDA device, which Ray Train sets per worker).
``tests/workloads/training/test_distributed.py`` holds a 2-GPU test (DDP, ZeRO-2 with bf16) that
skips without GPUs.

DeepSpeed on CPU: its comm backend would JIT-compile a shared-memory all-reduce (ninja, ~60 s
on the first engine start on each machine) that only its inference tensor parallelism uses; it is
marked unbuildable before the engine starts (:func:`_deepspeed_engine`), so no op is compiled
and training's collectives run through torch.distributed (gloo, NCCL) as they would anyway.

Ray and DeepSpeed are imported only here, and only when a trial asks for workers.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from workloads.draft_train.config import check_deepspeed_config
from workloads.models.draft import DraftModel
from workloads.training.features import FeatureSet
from workloads.training.loop import (
    DataParallel,
    StageLog,
    StageSettings,
    make_optimizer,
    train_stage,
)

log = logging.getLogger(__name__)


def deepspeed_config(
    ds: dict[str, Any], *, batch_size: int, world: int, grad_clip: float
) -> dict[str, Any]:
    """The DeepSpeed config of one stage: the user's ``train.deepspeed`` plus the owned keys.

    Args:
        ds: ``train.deepspeed`` (checked by :func:`check_deepspeed_config`).
        batch_size: rows per optimiser step over all workers (``train.batch_size``).
        world: number of workers.
        grad_clip: max global gradient norm (``train.grad_clip``), applied by the engine.

    Returns:
        A new dict; the micro batch is ``ceil(batch_size / world)`` rows (DeepSpeed's own
        bookkeeping only: the rows of each step are chosen by ``train_stage``).
    """
    check_deepspeed_config(ds)
    micro = -(-batch_size // world)
    return {
        **ds,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "train_batch_size": micro * world,
        "gradient_clipping": grad_clip,
    }


@dataclass(frozen=True, kw_only=True)
class WorkerResources:
    """Ray resources and torch threads of each training worker."""

    workers: int
    """N, data-parallel workers"""
    num_cpus: float
    """CPUs per worker: the trial's ``num_cpus / N``"""
    num_gpus: float
    """GPUs per worker: the trial's ``num_gpus / N`` (0 = train on CPU with gloo)"""

    @classmethod
    def split(cls, num_cpus: float, num_gpus: float, workers: int) -> WorkerResources:
        """Share a trial's CPUs and GPUs among ``workers`` training workers."""
        return cls(workers=workers, num_cpus=num_cpus / workers, num_gpus=num_gpus / workers)

    @property
    def threads(self) -> int:
        """torch threads per worker (at least 1)."""
        return max(1, int(self.num_cpus))


@dataclass(frozen=True)
class Stage:
    """One training stage for the workers: its name, rows and settings."""

    name: str
    feats: FeatureSet
    """the stage's rows and hidden states; sent to every worker (lazy sets pickle small)"""
    settings: StageSettings


@dataclass(frozen=True)
class StageResult:
    """A stage trained on the workers: its log and its wall seconds there."""

    log: StageLog
    wall_s: float


def train_stages(
    draft: DraftModel,
    stages: Sequence[Stage],
    *,
    resources: WorkerResources,
    storage: Path,
    deepspeed: dict[str, Any] | None = None,
) -> dict[str, StageResult]:
    """Train ``draft`` through ``stages`` on Ray Train workers; its weights are updated in place.

    Args:
        draft: the draft (CPU); every worker starts from a copy of it.
        stages: the stages, trained in order by the same workers.
        resources: workers and their Ray resources.
        storage: Ray Train's ``storage_path`` (under the trial's folder; shared storage on a
            multi-node cluster); emptied first, removed once the weights are loaded.
        deepspeed: a DeepSpeed config (ZeRO stage 0-2, optionally ``bf16: {enabled: true}``)
            instead of DDP; None = DDP.

    Returns:
        Each stage's log (per-step losses of the global batch, tokens seen) and its training
        seconds on the workers (worker start-up not included), by stage name.

    Raises:
        ValueError: a bad ``deepspeed`` config.
        TypeError: a stage's features cannot be pickled (an
            :class:`~workloads.training.online_features.OnlineFeatures` over a model object, not a
            spec).
        ray.train.TrainingFailedError: a worker failed (its error is in the message).
    """
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    if deepspeed is not None:
        check_deepspeed_config(deepspeed)
    shutil.rmtree(storage, ignore_errors=True)
    storage.mkdir(parents=True, exist_ok=True)
    per_worker = {"CPU": resources.num_cpus}
    if resources.num_gpus:
        per_worker["GPU"] = resources.num_gpus
    config = {
        "draft": ray.put(draft),
        "stages": [(s.name, ray.put(s.feats), s.settings) for s in stages],
        "threads": resources.threads,
        "deepspeed": deepspeed,
    }
    trainer = TorchTrainer(
        _worker_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=resources.workers,
            use_gpu=resources.num_gpus > 0,
            resources_per_worker=per_worker,
        ),
        run_config=RunConfig(name="train", storage_path=str(storage.resolve())),
    )
    result = trainer.fit()
    if result.checkpoint is None:
        raise RuntimeError(f"Ray Train finished without a checkpoint under {storage}")
    with result.checkpoint.as_directory() as folder:
        state = load_file(str(Path(folder) / "draft.safetensors"))
        logs_json = json.loads((Path(folder) / "logs.json").read_text())
    missing = set(draft.trainable_state()) - set(state)
    if missing:
        raise RuntimeError(f"the workers' checkpoint lacks weights {sorted(missing)[:5]}")
    draft.load_state_dict(state, strict=False)
    shutil.rmtree(storage, ignore_errors=True)
    return {
        name: StageResult(log=StageLog(**entry["log"]), wall_s=entry["wall_s"])
        for name, entry in logs_json.items()
    }


def _worker_loop(config: dict[str, Any]) -> None:
    """Run on every Ray Train worker: train each stage on this rank's share, rank 0 reports."""
    import ray
    import ray.train
    import ray.train.torch

    torch.set_num_threads(config["threads"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    draft: DraftModel = ray.get(config["draft"]).to(device)
    ds = config["deepspeed"]
    ddp: torch.nn.Module | None = None
    if ds is None:
        # frozen buffers (embedding, LM head) are equal on every rank: no per-step broadcast
        ddp = torch.nn.parallel.DistributedDataParallel(
            draft,
            device_ids=[device] if device.type == "cuda" else None,
            forward_sync_buffers=False,
        )
    logs: dict[str, StageLog] = {}
    wall_s: dict[str, float] = {}
    for name, feats_ref, settings in config["stages"]:
        feats: FeatureSet = ray.get(feats_ref)  # a lazy set reads only this rank's rows
        engine = None
        if ds is not None and deepspeed_bf16(ds):
            settings = replace(settings, precision="bf16")  # bf16 weights need bf16 inputs
        opt = make_optimizer(draft, settings)
        if ds is None:
            assert ddp is not None
            parallel = DataParallel(rank=rank, world=world, model=ddp)
        else:
            engine = _deepspeed_engine(draft, opt, ds, settings, world=world)
            parallel = DataParallel(
                rank=rank, world=world, model=engine, update=functools.partial(_ds_update, engine)
            )
        t0 = time.perf_counter()
        logs[name] = train_stage(draft, feats, settings, opt=opt, parallel=parallel)
        if engine is not None:
            _deepspeed_release(engine, draft)
        wall_s[name] = time.perf_counter() - t0
        if rank == 0:
            log.info("%s: %d steps on %d workers", name, len(logs[name].loss), world)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0:
            state = {k: v.cpu().contiguous() for k, v in draft.trainable_state().items()}
            save_file(state, str(Path(tmp) / "draft.safetensors"))
            record = {k: {"log": asdict(v), "wall_s": wall_s[k]} for k, v in logs.items()}
            (Path(tmp) / "logs.json").write_text(json.dumps(record))
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        steps = {f"{k}.steps": len(v.loss) for k, v in logs.items()}
        ray.train.report(steps, checkpoint=checkpoint)


def deepspeed_bf16(ds: dict[str, Any]) -> bool:
    """Whether a DeepSpeed config turns on DeepSpeed's own bfloat16 (``bf16: {enabled: true}``;
    DeepSpeed also reads the older spelling ``bfloat16``)."""
    block = ds.get("bf16", ds.get("bfloat16"))
    return isinstance(block, dict) and bool(block.get("enabled", False))


def _deepspeed_engine(
    draft: DraftModel,
    opt: torch.optim.Optimizer,
    ds: dict[str, Any],
    s: StageSettings,
    *,
    world: int,
) -> Any:
    """A DeepSpeed engine around ``draft`` and ``opt`` (the learning rate stays ``opt``'s)."""
    import deepspeed  # optional extra: pip install --no-build-isolation 'specscale[deepspeed]'
    import deepspeed.ops

    # DeepSpeed's shared-memory all-reduce serves only its inference tensor parallelism
    # (`inference_all_reduce`); on a CPU accelerator its comm backend JIT-compiles it with ninja
    # (~60 s) at the first engine start on each machine. Training's collectives go through
    # torch.distributed (gloo, NCCL) either way, so mark it unbuildable: no compile, same math.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    cfg = deepspeed_config(ds, batch_size=s.batch_size, world=world, grad_clip=s.grad_clip)
    engine, *_ = deepspeed.initialize(
        model=draft, optimizer=opt, config=cfg, dist_init_required=False
    )
    return engine


def _ds_update(engine: Any, loss: torch.Tensor) -> None:
    """One optimiser step of a DeepSpeed engine on ``loss``."""
    engine.backward(loss)
    engine.step()  # clips to gradient_clipping, steps opt, zeroes the gradients


def _deepspeed_release(engine: Any, draft: DraftModel) -> None:
    """End a stage's engine: the float32 master weights back into ``draft``, hooks removed.

    Every rank must call it (gathering a ZeRO-partitioned weight is a collective). With
    DeepSpeed's bf16 the draft's trainable weights are bfloat16 copies during the stage; they
    become float32 again, with the master values, so the next stage and the weights rank 0 hands
    back are not rounded to bfloat16.
    """
    from deepspeed.utils import safe_get_full_fp32_param

    full = {
        name: safe_get_full_fp32_param(p)
        for name, p in draft.named_parameters()
        if p.requires_grad and hasattr(p, "_hp_mapping")
    }
    engine.destroy()  # removes ZeRO's gradient hooks from the draft's parameters
    with torch.no_grad():
        for name, p in draft.named_parameters():
            if full.get(name) is not None:
                p.data = full[name].to(device=p.device, dtype=torch.float32).view_as(p)
            elif p.requires_grad and p.dtype != torch.float32:
                p.data = p.data.float()
