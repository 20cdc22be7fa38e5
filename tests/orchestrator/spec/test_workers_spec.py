"""``train.workers`` and ``train.deepspeed`` in a spec: validation, trial keys, task resources."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from orchestrator.driving.runner import extra_gpus, task_options, trains_on_workers
from orchestrator.errors import SpecError
from orchestrator.spec.grid import expand
from orchestrator.spec.sweep import load_spec
from workloads.draft_train.config import DraftTrainConfig, TrainConfig

SWEEPS = Path(__file__).resolve().parents[3] / "sweeps"

SMOKE_KEYS = ["3ca3750b3b811418", "d6f39db7fca09802", "1eb8a0265b987753", "6d1ccc45fb07d1a6"]
"""keys of sweeps/smoke-tokens.yaml before train.workers / train.deepspeed existed (golden)"""


def spec_file(tmp_path: Path, train: str, resources: str = "", grid: str = "") -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: t\n"
        + (f"grid:\n{grid}" if grid else "")
        + f"base:\n  train:\n{train}"
        + (f"resources:\n{resources}" if resources else "")
    )
    return p


def test_new_fields_keep_old_trial_keys(tmp_path: Path) -> None:
    # the smoke sweep with the draft recipe from before issue 13 spelled out: its old keys
    spec = yaml.safe_load((SWEEPS / "smoke-tokens.yaml").read_text())
    spec["base"]["pretrain"]["packing"] = "joined"
    spec["base"]["train"]["feature_noise"] = 0.0
    spec["base"]["sft"]["responses"] = "dataset"
    for field in ("during_training_every", "during_training_prompts"):  # checks came later
        spec["base"]["eval"].pop(field)
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(spec))
    assert [t.key for t in expand(load_spec(tmp_path / "old.yaml"))] == SMOKE_KEYS
    # the new default recipe (isolated packing, feature noise) is other trials
    new = [t.key for t in expand(load_spec(SWEEPS / "smoke-tokens.yaml"))]
    assert not set(new) & set(SMOKE_KEYS)


def test_workers_change_the_key_and_one_worker_does_not(tmp_path: Path) -> None:
    keys = {}
    for workers in (1, 2):
        spec = load_spec(spec_file(tmp_path, f"    workers: {workers}\n"))
        keys[workers] = expand(spec)[0].key
    plain = expand(load_spec(spec_file(tmp_path, "    batch_size: 4\n")))[0].key
    assert keys[1] == plain != keys[2]


def test_deepspeed_on_gpus_is_accepted(tmp_path: Path) -> None:
    train = "    workers: 2\n    deepspeed: {zero_optimization: {stage: 2}}\n"
    spec = load_spec(spec_file(tmp_path, train, "  num_cpus: 4\n  num_gpus: 2\n"))
    trial = expand(spec)[0]
    assert trains_on_workers(trial.config)
    # the workers hold the spec's 2 GPUs; the trial keeps one for its features and evaluation
    assert task_options(spec, hold_gpus=False)["num_gpus"] == 1
    assert task_options(spec)["num_gpus"] == 2
    assert extra_gpus(spec, [trial.config]) == 1
    cpu_only = load_spec(
        spec_file(
            tmp_path,
            train.replace("    deepspeed: {zero_optimization: {stage: 2}}\n", ""),
            "  num_cpus: 4\n",
        )
    )
    assert extra_gpus(cpu_only, [expand(cpu_only)[0].config]) == 0


BAD = {
    "deepspeed without GPUs": (
        "    workers: 2\n    deepspeed: {zero_optimization: {stage: 1}}\n",
        "",
        "",
        5,
        "train.deepspeed is for GPU clusters",
    ),
    "GPUs not whole per worker": (
        "    workers: 2\n",
        "  num_gpus: 1\n",
        "",
        4,
        "each worker needs whole GPUs",
    ),
    "grid point with GPUs not whole": (
        "    batch_size: 4\n",
        "  num_gpus: 2\n",
        "  train.workers: [1, 2, 3]\n",
        3,
        "train.workers 3 cannot share resources.num_gpus 2",
    ),
    "owned key": (
        "    deepspeed: {optimizer: {type: Adam}}\n",
        "  num_gpus: 1\n",
        "",
        4,
        "set by AdamW",
    ),
    "zero 3": (
        "    deepspeed: {zero_optimization: {stage: 3}}\n",
        "  num_gpus: 1\n",
        "",
        4,
        "stage 3 is not supported",
    ),
    "mixed precision": (
        "    deepspeed: {fp16: {enabled: true}}\n",
        "  num_gpus: 1\n",
        "",
        4,
        "float16 mixed precision is not supported",
    ),
    "no workers": ("    workers: 0\n", "", "", 4, "greater than or equal to 1"),
}


@pytest.mark.parametrize("case", sorted(BAD), ids=str)
def test_bad_worker_specs_name_the_line(case: str, tmp_path: Path) -> None:
    train, resources, grid, line, needle = BAD[case]
    path = spec_file(tmp_path, train, resources, grid)
    with pytest.raises(SpecError, match=re.escape(needle)) as err:
        load_spec(path)
    assert f"{path}:{line}:" in str(err.value), str(err.value)


def test_train_config_on_workers() -> None:
    assert not TrainConfig().on_workers
    assert TrainConfig(workers=2).on_workers
    assert TrainConfig(deepspeed={"zero_optimization": {"stage": 0}}).on_workers
    with pytest.raises(ValidationError, match="train.grad_clip"):
        TrainConfig(deepspeed={"gradient_clipping": 1.0})


def test_wsd_fork_stays_in_the_trial_process() -> None:
    with pytest.raises(ValidationError, match="wsd-fork"):
        DraftTrainConfig.model_validate(
            {
                "pretrain": {"schedule": "wsd-fork"},
                "draft": {"vocab_tokens": 4096},
                "train": {"workers": 2},
            }
        )
