"""Draft training on several workers: 2 Ray Train workers (DDP, gloo) reproduce 1 process.

The exactness test uses a tiny fresh draft on synthetic features (it tests the math of the
sharded loss, not the data); the global batch, seed and settings are the same in both runs.
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path

import pytest
import torch

from workloads.distributed import Stage, WorkerResources, deepspeed_config, train_stages
from workloads.draft_model import DraftArch, DraftModel
from workloads.features import Features
from workloads.training import StageSettings, train_stage

TOLERANCE = 1e-4
"""max relative difference of any step's loss, 2 workers vs 1 process (measured: README)"""


def tiny_draft(seed: int = 0) -> DraftModel:
    arch = DraftArch(
        hidden_size=32,
        layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=256,
        output_norm=True,
    )
    gen = torch.Generator().manual_seed(seed)
    embed = torch.randn(96, 32, generator=gen) * 0.5
    head = torch.randn(96, 32, generator=gen) * 0.5
    torch.manual_seed(seed)
    return DraftModel(arch, embed_weight=embed, lm_head_weight=head)


def synthetic_features(rows: int, seq_len: int, *, masked: bool, seed: int) -> Features:
    """Random token rows, hidden states and (optionally SFT-like, partial) loss masks."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 96, (rows, seq_len), generator=gen)
    mask = torch.ones(rows, seq_len, dtype=torch.bool)
    if masked:  # assistant spans: each row keeps a random window, one row keeps nothing
        for r in range(rows):
            lo = int(torch.randint(0, seq_len // 2, (1,), generator=gen))
            mask[r, :lo] = False
        mask[1] = False
    hidden = (torch.randn(rows, seq_len, 32, generator=gen) * 0.5).half()
    return Features(input_ids=ids, loss_mask=mask, hidden=hidden)


def settings(*, epochs: int, batch_size: int) -> StageSettings:
    return StageSettings(
        epochs=epochs,
        batch_size=batch_size,
        lr=3e-3,
        warmup_steps=2,
        weight_decay=0.01,
        grad_clip=0.5,
        w_reg=1.0,
        w_cls=0.1,
        seed=7,
    )


STAGES = [
    # 9 rows in batches of 4: the last global batch has 1 row, so rank 1 gets none
    Stage(
        "pretrain",
        synthetic_features(9, 24, masked=False, seed=1),
        settings(epochs=1, batch_size=4),
    ),
    Stage("sft", synthetic_features(10, 24, masked=True, seed=2), settings(epochs=2, batch_size=4)),
]


@pytest.fixture(scope="module")
def local_ray():  # noqa: ANN201 - the ray module
    ray = pytest.importorskip("ray")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level=logging.WARNING,
    )
    yield ray
    ray.shutdown()


@pytest.fixture
def one_thread():  # noqa: ANN201
    """The 1-process reference on 1 thread, like each worker; restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def max_rel(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b, strict=True))


def test_two_workers_reproduce_one_process(local_ray, one_thread, tmp_path: Path) -> None:  # noqa: ANN001
    one = tiny_draft()
    two = copy.deepcopy(one)
    ref = {s.name: train_stage(one, s.feats, s.settings) for s in STAGES}
    t0 = time.perf_counter()
    got = train_stages(
        two,
        STAGES,
        resources=WorkerResources.split(2, 0, 2),
        storage=tmp_path / "ray_train",
    )
    wall = time.perf_counter() - t0
    for s in STAGES:
        r, g = ref[s.name], got[s.name].log
        assert len(g.loss) == len(r.loss) == -(-len(s.feats.input_ids) // 4) * s.settings.epochs
        assert g.tokens_seen == r.tokens_seen
        diffs = {k: max_rel(getattr(r, k), getattr(g, k)) for k in ("loss", "loss_reg", "loss_cls")}
        print(f"{s.name}: max relative difference {diffs}, wall {wall:.1f} s")
        assert max(diffs.values()) < TOLERANCE, diffs
        top1 = max(abs(x - y) for x, y in zip(r.top1, g.top1, strict=True))
        assert top1 < 1e-5
    # the weights loaded back from rank 0 are the trained ones
    for k, v in one.trainable_state().items():
        torch.testing.assert_close(two.trainable_state()[k], v, rtol=1e-4, atol=1e-5)
    assert not (tmp_path / "ray_train").exists()  # storage removed once loaded
    assert not (Path.home() / "ray_results" / "train").exists()


def test_deepspeed_config_mapping() -> None:
    cfg = deepspeed_config(
        {"zero_optimization": {"stage": 2, "overlap_comm": False}},
        batch_size=5,
        world=2,
        grad_clip=0.5,
    )
    assert cfg == {
        "zero_optimization": {"stage": 2, "overlap_comm": False},
        "train_micro_batch_size_per_gpu": 3,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 6,
        "gradient_clipping": 0.5,
    }


def test_worker_resources_split() -> None:
    w = WorkerResources.split(2, 0, 2)
    assert (w.num_cpus, w.num_gpus, w.threads) == (1, 0, 1)
    w = WorkerResources.split(1, 4, 4)
    assert (w.num_cpus, w.num_gpus, w.threads) == (0.25, 1, 1)


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2])
def test_deepspeed_zero_on_two_cpu_workers(
    local_ray,
    one_thread,
    tmp_path: Path,
    stage: int,
) -> None:
    """DeepSpeed ZeRO on CPU (gloo): the first run JIT-builds DeepSpeed's shm comm op (minutes)."""
    pytest.importorskip("deepspeed")
    one = tiny_draft()
    two = copy.deepcopy(one)
    ref = {s.name: train_stage(one, s.feats, s.settings) for s in STAGES}
    got = train_stages(
        two,
        STAGES,
        resources=WorkerResources.split(2, 0, 2),
        storage=tmp_path / "ray_train",
        deepspeed={"zero_optimization": {"stage": stage}},
    )
    for s in STAGES:
        diff = max_rel(ref[s.name].loss, got[s.name].log.loss)
        print(f"ZeRO-{stage} {s.name}: max relative loss difference {diff:.2e}")
        assert diff < TOLERANCE
    for k, v in one.trainable_state().items():
        torch.testing.assert_close(two.trainable_state()[k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)
def test_two_gpu_workers_reproduce_one_process(local_ray, tmp_path: Path) -> None:  # noqa: ANN001
    """DDP over NCCL, one GPU per worker, against 1 process on the CPU (not run yet: no GPU)."""
    one = tiny_draft()
    two = copy.deepcopy(one)
    ref = {s.name: train_stage(one, s.feats, s.settings) for s in STAGES}
    got = train_stages(
        two, STAGES, resources=WorkerResources.split(2, 2, 2), storage=tmp_path / "ray_train"
    )
    for s in STAGES:
        assert max_rel(ref[s.name].loss, got[s.name].log.loss) < 1e-3
