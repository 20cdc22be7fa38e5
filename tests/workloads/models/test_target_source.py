"""Where a target comes from, checked before a sweep starts: nothing is loaded or downloaded.

Also the random-weight targets' names (builtin shapes or config.json folders).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.models.target_source import (
    DEFAULT_TARGET,
    TOKENIZER_VOCAB,
    check_random_target,
    check_target_source,
)

CLOSED = "http://127.0.0.1:1"
"""an endpoint where nothing listens: the hub is unreachable"""


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)


def test_the_builtin_target_and_a_local_folder_pass_offline(tmp_path: Path) -> None:
    check_target_source(DEFAULT_TARGET, offline=True)
    check_target_source(str(tmp_path), offline=True)


def test_a_missing_local_path_is_refused() -> None:
    # issue 23: it used to pass submit and fail every trial; hub ids are not paths
    with pytest.raises(ValueError, match="looks like a local path, and nothing is there. Fix:"):
        check_target_source("/nonexistent/model", offline=True, endpoint=CLOSED)


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "no-network"])
def test_an_unknown_hub_id_is_refused_with_the_fix(offline: bool) -> None:
    with pytest.raises(ValueError) as err:
        check_target_source("acme/no-such-model", offline=offline, endpoint=CLOSED)
    msg = str(err.value)
    assert "'acme/no-such-model'" in msg and DEFAULT_TARGET in msg and "local model folder" in msg
    assert ("HF_HUB_OFFLINE is set" if offline else "cannot reach 127.0.0.1:1") in msg
    assert "\n" not in msg


def test_a_hub_id_in_the_local_cache_passes_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    repo = tmp_path / "models--acme--cached-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    check_target_source("acme/cached-model", offline=True, endpoint=CLOSED)
    with pytest.raises(ValueError, match="acme/other-model"):
        check_target_source("acme/other-model", offline=True, endpoint=CLOSED)


def test_random_targets_accept_builtin_shapes_aliases_and_config_folders(tmp_path: Path) -> None:
    assert check_random_target("llama-3-8b") == "llama-3-8b"
    assert check_random_target("Qwen/Qwen2.5-7B-Instruct") == "qwen2.5-7b"
    assert check_random_target(DEFAULT_TARGET) == "smollm2-135m"
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": TOKENIZER_VOCAB}))
    assert check_random_target(str(tmp_path)) == tmp_path


@pytest.mark.parametrize(
    ("name", "needles"),
    [
        ("lama-3-8b", ["'lama-3-8b'", "did you mean 'llama-3-8b'?", "qwen2.5-72b", "Fix:"]),
        ("acme/mystery", ["'acme/mystery'", "neither a builtin shape", "config.json", "Fix:"]),
    ],
)
def test_random_targets_refuse_unknown_names_with_choices_and_fix(
    name: str, needles: list[str]
) -> None:
    with pytest.raises(ValueError) as err:
        check_random_target(name)
    msg = str(err.value)
    assert all(n in msg for n in needles), msg
    assert "\n" not in msg


def test_random_targets_refuse_a_folder_without_config_or_with_a_small_vocab(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="folder without a config.json"):
        check_random_target(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 32}))
    with pytest.raises(ValueError, match=f"vocab_size 32 .* {TOKENIZER_VOCAB}"):
        check_random_target(str(tmp_path))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        check_random_target(str(tmp_path))


def test_the_submit_checks_import_no_torch() -> None:
    code = "import sys, workloads.models.target_source; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
