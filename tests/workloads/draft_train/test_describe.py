"""What a draft_train sweep will cost, told by the dry run: tokens and the feature mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.draft_train.config import DraftTrainConfig
from workloads.draft_train.describe import describe_cost, target_hidden_size
from workloads.training.feature_mode import feature_gib, resolve_feature_mode


def _cfg(**over: object) -> DraftTrainConfig:
    return DraftTrainConfig.model_validate(over)


def test_auto_caches_under_the_limit_and_goes_online_above() -> None:
    # 1B tokens at hidden 4096: 7.45 TiB cached; 1M tokens: 7.8 GiB
    assert feature_gib(10**9, 4096) == pytest.approx(10**9 * 4096 * 2 / 2**30)
    assert resolve_feature_mode("auto", tokens=10**6, hidden=4096, max_cache_gb=20) == "cached"
    assert resolve_feature_mode("auto", tokens=10**9, hidden=4096, max_cache_gb=20) == "online"
    assert resolve_feature_mode("cached", tokens=10**9, hidden=4096, max_cache_gb=20) == "cached"
    assert resolve_feature_mode("online", tokens=1, hidden=4096, max_cache_gb=20) == "online"
    assert resolve_feature_mode("auto", tokens=10**12, hidden=None, max_cache_gb=20) == "cached"


def test_hidden_size_without_loading(tmp_path: Path) -> None:
    assert target_hidden_size("smollm2-135m-instruct") == 576
    assert target_hidden_size("meta-llama/Meta-Llama-3-8B-Instruct") == 4096
    assert target_hidden_size("qwen2.5-72b") == 8192
    cfg = {"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 96, "vocab_size": 100}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert target_hidden_size(str(tmp_path)) == 48
    assert target_hidden_size(str(tmp_path / "missing")) is None


def test_the_lines_name_tokens_disk_and_online() -> None:
    configs = [_cfg(target={"model": "llama-3-8b"}, pretrain={"tokens": t}) for t in (10**6, 10**9)]
    text = "\n".join(describe_cost(configs))
    assert "1B pretraining tokens" in text
    assert "cached on disk up to 1M tokens: 7.63 GiB (hidden 4096" in text
    assert "online for 1 budget(s) up to 1B tokens (no disk; 7.5 TiB if cached)" in text
    assert describe_cost([]) == []
