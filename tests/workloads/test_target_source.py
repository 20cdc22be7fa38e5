"""Where a target comes from, checked before a sweep starts: nothing is loaded or downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.target_source import DEFAULT_TARGET, check_target_source

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


def test_a_missing_local_path_is_left_to_the_trial() -> None:
    # not a hub id: loading it fails in the trial, whose error names the path
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
