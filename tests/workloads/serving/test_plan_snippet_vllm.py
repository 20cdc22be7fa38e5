"""``orchestrator plan``'s vLLM snippet read by vLLM's own code (the serving environment's
``vllm.v1.spec_decode.dynamic.utils``): the schedule validates and expands to the planned K per
batch size. Skips, with the reason, without the serving environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.planning.snippets import vllm_config
from workloads.serving.bench import server_args
from workloads.serving.config import ServeBenchConfig, ServeConfig
from workloads.serving.env import ServingEnvError, find_env

CHECK = """
import json, sys
from vllm.v1.spec_decode.dynamic.utils import (
    build_dynamic_sd_schedule_lookup, validate_and_normalize_dynamic_sd_schedule)
out = []
for cfg in json.loads(sys.argv[1]):
    per = cfg["num_speculative_tokens_per_batch_size"]
    validate_and_normalize_dynamic_sd_schedule(per)
    out.append(build_dynamic_sd_schedule_lookup(per, 64, cfg["num_speculative_tokens"]))
print(json.dumps(out))
"""
PLAN_ROWS = [{"batch_size": 1, "k": 5}, {"batch_size": 8, "k": 3}, {"batch_size": 32, "k": 1}]
SCHEDULES = [[(1, 2, 4), (3, 16, 2), (17, 4096, 0)], [(1, 3, 2), (8, 16, 4)], [(1, 1, 3)]]


def _spec(schedule: list) -> dict:
    """The speculative config a trial with ``serve.schedule`` passes to its server."""
    serve = ServeConfig(schedule=schedule, num_speculative_tokens=max(k for *_, k in schedule))
    args = server_args(ServeBenchConfig(serve=serve), draft_dir=Path("d"))
    return dict(json.loads(args[args.index("--speculative-config") + 1]))


@pytest.fixture(scope="module")
def lookups() -> list[list[int]]:
    """vLLM's own dense K-by-batch-size lookup of the plan's config, then of each SCHEDULES'
    server config, from one interpreter start."""
    try:
        env = find_env("auto")
    except ServingEnvError as exc:
        pytest.skip(f"no vLLM serving environment: {exc}")
    cfgs = [vllm_config(PLAN_ROWS, "exported/vllm")] + [_spec(s) for s in SCHEDULES]
    out = subprocess.run(
        [str(env.python), "-c", CHECK, json.dumps(cfgs)], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_vllm_reads_the_plans_schedule(lookups: list[list[int]]) -> None:
    lookup = lookups[0]
    # index = batch size: K = k - 1 over the plan's ranges (1-2, 3-16, 17-4096)
    assert lookup[1:3] == [4, 4] and lookup[3:17] == [2] * 14 and lookup[17:65] == [0] * 48


@pytest.mark.parametrize("i", range(len(SCHEDULES)))
def test_a_served_schedule_reports_vllms_k_at_each_batch_size(
    lookups: list[list[int]], i: int
) -> None:
    """``serve.schedule`` is passed to the speculating server as it is, and the K the trial
    records per b (``ServeConfig.k_at``) is vLLM's own lookup (gaps carry the K before them)."""
    schedule = SCHEDULES[i]
    spec = _spec(schedule)
    assert spec["num_speculative_tokens_per_batch_size"] == [list(r) for r in schedule]
    serve = ServeConfig(schedule=schedule, num_speculative_tokens=spec["num_speculative_tokens"])
    assert [serve.k_at(b) for b in range(1, 65)] == lookups[1 + i][1:65]


@pytest.mark.parametrize(
    ("schedule", "k", "needle"),
    [
        ([(2, 8, 3)], 3, "ranges starting at 1"),
        ([(1, 8, 3), (4, 16, 2)], 3, "non-overlapping"),
        ([(1, 8, -1)], 3, "K >= 0"),
        ([(1, 8, 2)], 3, "serve.num_speculative_tokens: 2"),
    ],
)
def test_a_schedule_vllm_would_refuse_is_refused(schedule: list, k: int, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ServeConfig(schedule=schedule, num_speculative_tokens=k)


def test_a_plan_without_speculation_writes_no_config() -> None:
    assert vllm_config([{"batch_size": 1, "k": 1}, {"batch_size": 8, "k": 1}], "d") is None


def test_this_engine_compares_with_the_servers_k_at_batch_size_one() -> None:
    """The greedy pass runs one request at a time, so the engine's chain is the schedule's K at
    b = 1, not its largest."""
    from workloads.serving.bench import engine_config

    serve = ServeConfig(schedule=[(1, 1, 2), (2, 4096, 4)], num_speculative_tokens=4)
    d = engine_config(ServeBenchConfig(serve=serve), None).decode
    assert (d.depth, d.topk, d.num_draft_tokens) == (2, 1, 3)
    d = engine_config(ServeBenchConfig(), None).decode
    assert (d.depth, d.num_draft_tokens) == (3, 4)  # no schedule: num_speculative_tokens


def test_the_plans_method_is_the_exports(tmp_path: Path) -> None:
    """A fused draft's export is served with eagle3; eagle would run it at acceptance 1."""
    from workloads.models.export import VLLM_FUSED_ARCHITECTURE, VLLM_PLUGIN_ARCHITECTURE

    for arch, method in ((VLLM_FUSED_ARCHITECTURE, "eagle3"), (VLLM_PLUGIN_ARCHITECTURE, "eagle")):
        folder = tmp_path / method
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
        cfg = vllm_config(PLAN_ROWS, str(folder))
        assert cfg is not None and cfg["method"] == method
    cfg = vllm_config(PLAN_ROWS, "org/hub-draft")  # a hub id: not read
    assert cfg is not None and cfg["method"] == "eagle"
