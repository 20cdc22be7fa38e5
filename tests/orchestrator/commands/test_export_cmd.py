"""``orchestrator export`` through typer's CliRunner, on a run root laid out like draft_train's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig
from typer.testing import CliRunner

from orchestrator.cli import app
from workloads.models import export as ex
from workloads.models.draft import DraftArch, DraftModel

runner = CliRunner()

KEY_A = "a1b2c3d4e5f60718"  # the better trial (acceptance length 2.0)
KEY_B = "a1b2c3ffff000000"  # shares the 6-character prefix a1b2c3 with KEY_A


def _save_trial(
    run_root: Path,
    key: str,
    config: object,
    *,
    accepted: int,
    output_norm: bool = False,
    vocab: torch.Tensor | None = None,
    fusion_layers: tuple[int, ...] = (),
) -> None:
    """A trial folder as draft_train leaves it: ``draft/`` and ``per_prompt.json``."""
    torch.manual_seed(0)
    arch = DraftArch.from_target(
        config, layers=2, output_norm=output_norm, first_input_norm=False, rope_theta=10000.0,
        fusion_layers=fusion_layers,
    )
    v, h = int(config.vocab_size), int(config.hidden_size)  # type: ignore[attr-defined]
    draft = DraftModel(
        arch,
        embed_weight=torch.zeros(v, h),
        lm_head_weight=torch.zeros(v, h),
        draft_to_target=vocab,
    )
    trial = run_root / "tokens" / "trials" / key
    draft.save(trial / "draft")
    (trial / "per_prompt.json").write_text(json.dumps([{"cycles": 10, "accepted": accepted}]))


@pytest.fixture
def tiny_root(tmp_path: Path) -> Path:
    """Two trials of a tiny target (hidden 64): A without final norm, B with one."""
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=96,
    )
    root = tmp_path / "runs"
    _save_trial(root, KEY_A, config, accepted=10, vocab=torch.arange(0, 96, 2))
    _save_trial(root, KEY_B, config, accepted=5, output_norm=True)
    return root


def _export(root: Path, trial: str, fmt: str, out: Path, *extra: str) -> object:
    return runner.invoke(
        app,
        [
            "export",
            "tokens",
            trial,
            "--format",
            fmt,
            "--out",
            str(out),
            "--run-root",
            str(root),
            *extra,
        ],
    )


def test_help_names_the_formats() -> None:
    res = runner.invoke(app, ["export", "--help"])
    assert res.exit_code == 0
    for needle in ("--format", "--out", "--run-root", "eagle", "sglang", "vllm", "hf", "trial key"):
        assert needle in res.output


def test_hf_export_of_the_best_trial(tiny_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    res = _export(tiny_root, "best", "hf", out)
    assert res.exit_code == 0, res.output
    assert KEY_A in res.output and "config.json" in res.output and "load_hf" in res.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == [ex.HF_ARCHITECTURE] and cfg["draft_vocab_size"] == 48
    assert torch.equal(
        load_file(str(out / "model.safetensors"))["draft_to_target"], torch.arange(0, 96, 2)
    )


@pytest.mark.parametrize(
    ("fmt", "needle"),
    [
        ("eagle", "draft.output_norm: false"),
        ("sglang", "draft.output_norm: false"),
    ],
)
def test_refusal_is_one_line_exit_2_and_writes_nothing(
    tiny_root: Path, tmp_path: Path, fmt: str, needle: str
) -> None:
    out = tmp_path / "refused"
    res = _export(tiny_root, KEY_B[:10], fmt, out)  # trial B has a final norm
    assert res.exit_code == 2, res.output
    assert needle in res.output and "--format hf" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]  # nothing else written


@pytest.mark.parametrize("fmt", ["eagle", "sglang"])
def test_a_fused_draft_is_refused_by_the_eagle_1_formats(
    tiny_root: Path, tmp_path: Path, fmt: str
) -> None:
    """An export format that cannot hold the draft: EAGLE-3's hidden fusion in eagle/sglang."""
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=96)  # fmt: skip
    key = "f0f0f0f0f0f0f0f0"
    _save_trial(tiny_root, key, config, accepted=1, fusion_layers=(0, 1))
    out = tmp_path / "refused"
    res = _export(tiny_root, key, fmt, out, "--target", "/nonexistent/target")
    assert res.exit_code == 2, res.output
    assert "fuses the states of target layers [0, 1]" in res.output
    assert "Fix: use --format vllm" in res.output and "draft.fusion: none" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()


def test_truncated_vocabulary_is_refused_by_eagle_before_the_target_loads(
    tiny_root: Path, tmp_path: Path
) -> None:
    res = _export(tiny_root, KEY_A, "eagle", tmp_path / "o", "--target", "/nonexistent/target")
    assert res.exit_code == 2
    assert "48 tokens" in res.output and "draft.vocab_size: 0" in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosweep", "best", "--format", "hf"], "no trained draft under"),
        (["tokens", "a1b2", "--format", "hf"], "TRIAL 'a1b2' is too short"),
        (["tokens", "a1b2c3", "--format", "hf"], "TRIAL 'a1b2c3' matches several trials"),
        (["tokens", "ffffff", "--format", "hf"], "TRIAL 'ffffff' matches no finished trial"),
        (["tokens", "best", "--format", "onnx"], "--format 'onnx' is not one of"),
        (["tokens", "best", "--format", "hf", "--dtype", "int8"], "--dtype 'int8' is not one of"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(
    tiny_root: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "o"
    res = runner.invoke(app, ["export", *args, "--out", str(out), "--run-root", str(tiny_root)])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_non_empty_out_needs_overwrite(tiny_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep").write_text("x")
    res = _export(tiny_root, KEY_A, "hf", out)
    assert res.exit_code == 2 and "--overwrite" in res.output
    assert (out / "keep").exists()
    assert _export(tiny_root, KEY_A, "hf", out, "--overwrite").exit_code == 0
    assert not (out / "keep").exists()
    res = _export(tiny_root, KEY_A, "hf", out / "config.json")
    assert res.exit_code == 2 and "is a file" in res.output


def test_eagle_export_with_the_real_target(target, cache_dir: Path, tmp_path: Path) -> None:  # noqa: ANN001
    root = tmp_path / "runs"
    _save_trial(root, KEY_A, target.model.config, accepted=10)
    out = tmp_path / "eagle"
    res = _export(root, KEY_A[:8], "eagle", out, "--cache-dir", str(cache_dir))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "pytorch_model.bin",
    ]
    tensors = load_file(str(out / "model.safetensors"))
    arch = ex.read_draft(root / "tokens" / "trials" / KEY_A / "draft").arch
    assert set(tensors) == ex.expected_keys(arch, "eagle")
    assert torch.equal(tensors["embed_tokens.weight"], target.model.get_input_embeddings().weight)


@pytest.mark.parametrize(("given", "loaded"), [((), "gemma-3-270m"), (("--target", "x"), "x")])
def test_the_target_defaults_to_the_one_the_trial_trained_on(
    tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: tuple, loaded: str
) -> None:
    """A Gemma draft exported without --target took SmolLM2's embedding (the old default)."""
    from workloads.models import target as target_module
    from workloads.models.draft import TRAINED_WITH

    draft = tiny_root / "tokens" / "trials" / KEY_B / "draft"
    (draft / TRAINED_WITH).write_text(json.dumps({"target": {"model": "gemma-3-270m"}}))
    names: list[str] = []

    def fake_load(name: str, **_: object) -> None:
        names.append(name)
        raise ValueError("stop here: the name is what this test checks")

    monkeypatch.setattr(target_module, "load_target", fake_load)
    res = _export(tiny_root, KEY_B, "vllm", tmp_path / "out", *given)
    assert names == [loaded] and res.exit_code == 2, res.output
