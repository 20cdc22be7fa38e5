"""Bad input to a serving sweep: refused at submit in one line with a fix, exit 2, nothing
written (no serving environment, a draft the sweep does not have, a port in use, a target vLLM
cannot load); and a served draft found by its budget and seed."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from workloads.config import ConfigError
from workloads.models.draft import TRAINED_WITH
from workloads.serving.bench import find_served_draft
from workloads.serving.checks import check_configs
from workloads.serving.config import ServeBenchConfig
from workloads.serving.server import free_port


def _fake_env(tmp_path: Path) -> str:
    """An interpreter that 'imports vllm and the plugin': a venv-less stand-in for find_env."""
    pkg = tmp_path / "site"
    for name in ("vllm", "specscale_vllm"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("__version__ = '0.0-test'\n")
    exe = tmp_path / "python"
    exe.write_text(f'#!/bin/sh\nPYTHONPATH={pkg} exec {sys.executable} "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def _trial(run_root: Path, key: str, tokens: int, seed: int) -> Path:
    draft = run_root / "tokens" / "trials" / key / "draft"
    draft.mkdir(parents=True)
    (draft / "arch.json").write_text("{}")
    (draft / TRAINED_WITH).write_text(json.dumps({"seed": seed, "pretrain": {"tokens": tokens}}))
    return draft


def test_the_draft_of_a_budget_and_seed_is_found(tmp_path: Path) -> None:
    _trial(tmp_path, "aaaaaaaa", 8192, 0)
    want = _trial(tmp_path, "bbbbbbbb", 8192, 1)
    cfg = ServeBenchConfig(seed=1, pretrain={"tokens": 8192})
    assert find_served_draft(cfg, tmp_path) == want
    with pytest.raises(ValueError, match="pretrain.tokens 4096 with seed 1 matches no finished"):
        find_served_draft(ServeBenchConfig(seed=1, pretrain={"tokens": 4096}), tmp_path)


def test_drafts_saved_before_trained_with_say_how_to_serve_them(tmp_path: Path) -> None:
    old = tmp_path / "tokens" / "trials" / "cccccccc" / "draft"
    old.mkdir(parents=True)
    (old / "arch.json").write_text("{}")
    with pytest.raises(ValueError, match="draft.source: trial with a trial_key"):
        find_served_draft(ServeBenchConfig(pretrain={"tokens": 0}), tmp_path)


@pytest.mark.parametrize(
    ("update", "field", "needle"),
    [
        ({"serve": {"python": "/no/such/python"}}, ("serve", "python"), "no serving environment"),
        ({"pretrain": {"tokens": 999}}, ("pretrain", "tokens"), "matches no finished trial"),
        ({"target": {"weights": "random"}}, ("target", "weights"), "random-weight target"),
    ],
)
def test_each_bad_config_is_refused_naming_its_field(
    tmp_path: Path, update: dict, field: tuple[str, ...], needle: str
) -> None:
    _trial(tmp_path, "aaaaaaaa", 8192, 0)
    good = {"serve": {"python": _fake_env(tmp_path)}, "pretrain": {"tokens": 8192}}
    check_configs([ServeBenchConfig(**good)], tmp_path)  # the passing twin
    cfg = ServeBenchConfig(**(good | update))
    with pytest.raises(ConfigError, match=needle) as err:
        check_configs([cfg], tmp_path)
    assert err.value.field == field and "Fix:" in str(err.value) and "\n" not in str(err.value)


def test_a_draft_trained_on_another_builtin_target_is_refused(tmp_path: Path) -> None:
    draft = _trial(tmp_path, "aaaaaaaa", 8192, 0)
    record = {"seed": 0, "pretrain": {"tokens": 8192}, "target": {"model": "gemma-3-270m"}}
    (draft / TRAINED_WITH).write_text(json.dumps(record))
    good = {"serve": {"python": _fake_env(tmp_path)}, "pretrain": {"tokens": 8192}}
    with pytest.raises(ConfigError, match="trained on 'gemma-3-270m'") as err:
        check_configs([ServeBenchConfig(**good)], tmp_path)  # the default target, SmolLM2
    assert err.value.field == ("target", "model") and "Fix: target.model: gemma-3-270m" in str(
        err.value
    )


def test_a_port_in_use_is_refused(tmp_path: Path) -> None:
    _trial(tmp_path, "aaaaaaaa", 8192, 0)
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        cfg = ServeBenchConfig(
            serve={"python": _fake_env(tmp_path), "port": port}, pretrain={"tokens": 8192}
        )
        with pytest.raises(ConfigError, match=f"serve.port {port} on 127.0.0.1 is in use"):
            check_configs([cfg], tmp_path)


def test_submit_without_a_serving_env_exits_2_naming_the_command(tmp_path: Path) -> None:
    from orchestrator.cli import app

    spec = tmp_path / "serve.yaml"
    spec.write_text(
        "name: serve\nworkload: serve_bench\ngrid:\n  pretrain.tokens: [8192]\nbase:\n"
        "  serve:\n    python: /no/such/python\n"
    )
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["submit", str(spec), "--run-root", str(run), "--yes"])
    assert res.exit_code == 2, res.output
    assert "serve.yaml:7" in res.output and "make serve-env" in res.output
    assert not run.exists()


def test_regeneration_in_vllm_without_a_serving_env_exits_2_naming_its_field(
    tmp_path: Path,
) -> None:
    """``sft.regen_engine: vllm`` is checked at submit like a serving sweep: no environment at
    ``sft.regen_python`` is one line naming that line, the command and the other engine."""
    from orchestrator.cli import app

    spec = tmp_path / "tokens.yaml"
    spec.write_text(
        "name: regen\nworkload: draft_train\ngrid:\n  pretrain.tokens: [8192]\nbase:\n"
        "  sft:\n    regen_engine: vllm\n    regen_python: /no/such/python\n"
    )
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["submit", str(spec), "--run-root", str(run), "--yes"])
    assert res.exit_code == 2, res.output
    assert "tokens.yaml:8" in res.output and "sft.regen_python" in res.output
    assert "sft.regen_engine: engine" in res.output
    assert not run.exists()


def test_regeneration_in_vllm_with_a_random_target_is_refused(tmp_path: Path) -> None:
    from workloads.draft_train.config import DraftTrainConfig
    from workloads.serving.checks import check_regen_configs

    cfg = DraftTrainConfig.model_validate(
        {"target": {"weights": "random"},
         "sft": {"regen_engine": "vllm", "regen_python": _fake_env(tmp_path)}}
    )  # fmt: skip
    with pytest.raises(ConfigError, match="target.weights 'random'"):
        check_regen_configs([cfg])
    check_regen_configs([cfg.model_copy(update={"sft": cfg.sft.model_copy(
        update={"regen_engine": "engine"})})])  # fmt: skip  # the AR loop: nothing to check
