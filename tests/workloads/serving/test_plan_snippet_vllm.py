"""``orchestrator plan``'s vLLM snippet read by vLLM's own code (the serving environment's
``vllm.v1.spec_decode.dynamic.utils``): the schedule validates and expands to the planned K per
batch size. Skips, with the reason, without the serving environment."""

from __future__ import annotations

import json
import subprocess

import pytest

from orchestrator.planning.snippets import vllm_config
from workloads.serving.env import ServingEnvError, find_env

CHECK = """
import json, sys
from vllm.v1.spec_decode.dynamic.utils import (
    build_dynamic_sd_schedule_lookup, validate_and_normalize_dynamic_sd_schedule)
cfg = json.loads(sys.argv[1])
per = cfg["num_speculative_tokens_per_batch_size"]
validate_and_normalize_dynamic_sd_schedule(per)
print(json.dumps(build_dynamic_sd_schedule_lookup(per, 64, cfg["num_speculative_tokens"])))
"""


def test_vllm_reads_the_plans_schedule() -> None:
    try:
        env = find_env("auto")
    except ServingEnvError as exc:
        pytest.skip(f"no vLLM serving environment: {exc}")
    rows = [{"batch_size": 1, "k": 5}, {"batch_size": 8, "k": 3}, {"batch_size": 32, "k": 1}]
    cfg = vllm_config(rows, "exported/vllm")
    assert cfg is not None
    out = subprocess.run(
        [str(env.python), "-c", CHECK, json.dumps(cfg)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lookup = json.loads(out.stdout.strip().splitlines()[-1])
    # index = batch size: K = k - 1 over the plan's ranges (1-2, 3-16, 17-4096)
    assert lookup[1:3] == [4, 4] and lookup[3:17] == [2] * 14 and lookup[17:65] == [0] * 48


def test_a_plan_without_speculation_writes_no_config() -> None:
    assert vllm_config([{"batch_size": 1, "k": 1}, {"batch_size": 8, "k": 1}], "d") is None
