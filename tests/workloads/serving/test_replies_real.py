"""``sft.regen_engine: vllm`` on the real target and a real vLLM server: the SFT stage's rows
built from vLLM's greedy replies equal those built from this platform's AR loop, token for token,
and the server is gone when the stage returns. Slow (a server start-up, ~2.5 min on 2 cores):
``make test-slow``; the requests and the server's lifecycle are checked against the fake in the
default suite (``test_replies.py``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from workloads.draft_train.config import DraftTrainConfig
from workloads.draft_train.run import _vllm_replies
from workloads.serving.env import ServingEnvError, find_env
from workloads.training.stage_data import stage_data, target_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_vllm_replies_build_the_rows_the_ar_loop_builds(
    target,
    cache_dir: Path,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    try:
        find_env("auto")
    except ServingEnvError as exc:
        pytest.skip(f"no vLLM serving environment: {exc}")
    sft = {"tokens": 1024, "seq_len": 128, "regen_max_new_tokens": 32}
    rows = {}
    for engine in ("engine", "vllm"):
        cfg = DraftTrainConfig.model_validate(
            {"sft": sft | {"regen_engine": engine}, "features": {"mode": "online"}}
        )
        spec = target_spec(cfg, cache_dir, torch.device("cpu"))
        out = tmp_path / engine
        replies = _vllm_replies(cfg, target, tmp_path / "cache", out, print)
        data = stage_data(cfg, target, spec, tmp_path / "cache", "sft", 1024, print, replies)
        rows[engine] = data.rows.packed(torch.arange(data.rows.rows))
    assert torch.equal(rows["vllm"].input_ids, rows["engine"].input_ids)
    assert torch.equal(rows["vllm"].loss_mask, rows["engine"].loss_mask)
    log = tmp_path / "vllm" / "regen-server.log"
    assert "/v1/completions" in log.read_text()  # the replies came from the server
    # stopped when the stage returned: nothing runs under the guard that holds this log
    left = subprocess.run(["pgrep", "-f", str(log)], capture_output=True, text=True).stdout
    assert left.strip() == ""
