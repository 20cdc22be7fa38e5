"""The lossless check on a GPU (issue 22, fault 2): a float32 target whose matmuls run in TF32
rounds at TF32's spacing, and greedy references are never shared between devices.

Pure functions and a tiny CPU target; CUDA is stood in for by patching where the target's
logits come out (the rule reads the device type only) and the TF32 switch.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from transformers import LlamaForCausalLM

from tests.workloads.tiny import tiny_target
from workloads.training import evaluation
from workloads.training.evaluation import (
    NEAR_TIE,
    TF32_EPS,
    greedy_key,
    near_tie,
    near_tie_threshold,
    uses_tf32,
)

CUDA = torch.device("cuda", 0)


def test_float32_in_tf32_counts_ties_at_tf32_spacing() -> None:
    assert TF32_EPS == 2**-10  # 10 explicit mantissa bits
    assert near_tie_threshold(20.0, torch.float32, tf32=True) == 16 * 2**-10 * 16  # 0.25
    assert near_tie_threshold(3.0, torch.float32, tf32=True) == 16 * 2**-10 * 2
    assert near_tie_threshold(20.0, torch.float32) == NEAR_TIE  # IEEE float32: the floor
    gap = 1e-3  # one TF32 step at a logit of 1: rounding under TF32, a bug under IEEE float32
    assert gap < near_tie_threshold(1.5, torch.float32, tf32=True)
    assert gap > near_tie_threshold(1.5, torch.float32, tf32=False)
    # bfloat16 is coarser than TF32 already: the flag changes nothing there
    assert near_tie_threshold(20.0, torch.bfloat16, tf32=True) == 0.875  # TF32 is float32's


def test_tf32_applies_to_float32_on_cuda_only() -> None:
    assert uses_tf32(torch.float32, CUDA, enabled=True)
    assert not uses_tf32(torch.float32, CUDA, enabled=False)
    assert not uses_tf32(torch.bfloat16, CUDA, enabled=True)
    assert not uses_tf32(torch.float32, torch.device("cpu"), enabled=True)
    assert not uses_tf32(torch.float32, torch.device("meta"), enabled=True)


_SWITCHES = """
import torch
from workloads.training.evaluation import cuda_matmul_tf32
seen = [cuda_matmul_tf32()]
torch.backends.cuda.matmul.allow_tf32 = True  # what draft_train and gpu_check set on CUDA
seen.append(cuda_matmul_tf32())
torch.backends.cuda.matmul.allow_tf32 = False
seen.append(cuda_matmul_tf32())
torch.set_float32_matmul_precision("high")
seen.append(cuda_matmul_tf32())
torch.set_float32_matmul_precision("highest")
seen.append(cuda_matmul_tf32())
torch.backends.cuda.matmul.fp32_precision = "tf32"  # the new API (mixing: legacy reads raise)
seen.append(cuda_matmul_tf32())
print(seen)
"""


def test_every_tf32_switch_of_torch_is_read() -> None:
    # a process of its own: the switches are global, and mixing their APIs is sticky
    done = subprocess.run(
        [sys.executable, "-c", _SWITCHES], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "[False, True, False, True, False, True]"


def test_near_tie_of_a_float32_target_in_tf32_uses_tf32_spacing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = tiny_target()
    ids = [1, 5, 9, 2]
    ieee = near_tie(target, ids)
    assert ieee.threshold == NEAR_TIE  # float32 on the CPU: IEEE
    monkeypatch.setattr(evaluation, "output_device", lambda model: CUDA)  # logits on a GPU
    monkeypatch.setattr(evaluation, "cuda_matmul_tf32", lambda: True)
    tf32 = near_tie(target, ids)
    top = float(target(input_ids=torch.tensor([ids])).logits[0, -1].max())
    assert tf32.gap == ieee.gap
    assert tf32.threshold == near_tie_threshold(top, torch.float32, tf32=True) > 100 * NEAR_TIE


def _key(target: LlamaForCausalLM, prompt: list[int]) -> str:
    return greedy_key(target, "tiny", prompt, max_new_tokens=8, eos_ids=frozenset({0}))


def test_greedy_references_are_keyed_by_device_and_tf32(monkeypatch: pytest.MonkeyPatch) -> None:
    target = tiny_target()
    on_cpu = _key(target, [1, 2, 3])
    assert _key(target, [1, 2, 3]) == on_cpu  # stable
    assert _key(target, [1, 2, 4]) != on_cpu
    with torch.device("meta"):
        elsewhere = _key(tiny_target(), [1, 2, 3])
    assert elsewhere != on_cpu  # same name, dtype and shapes: another device
    monkeypatch.setattr(evaluation, "input_device", lambda model: CUDA)
    monkeypatch.setattr(evaluation, "output_device", lambda model: CUDA)
    on_gpu = _key(target, [1, 2, 3])
    monkeypatch.setattr(evaluation, "cuda_matmul_tf32", lambda: True)
    on_gpu_tf32 = _key(target, [1, 2, 3])
    assert len({on_cpu, elsewhere, on_gpu, on_gpu_tf32}) == 4
