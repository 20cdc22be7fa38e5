"""Constraints between config fields, checked at submit (issue 16, items 4 and 9 as kinds).

Each check is a workload's preflight (its ``checks.py``): it sees every distinct trial
config of a sweep (the grid's whole product, not one axis at a time) and names the field to
blame, so the refusal points at the spec's line. Each test has its passing twin beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from workloads import registry
from workloads.config import ConfigError
from workloads.decode_bench import checks as decode_checks
from workloads.decode_bench.checks import (
    check_decode_kernels,
    check_decode_tree,
    check_k_laws,
    draft_vocab_size,
)
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.draft_train.checks import check_tree_vocab
from workloads.draft_train.config import DraftTrainConfig


def _train(vocab_size: int, topk: int) -> DraftTrainConfig:
    return DraftTrainConfig.model_validate(
        {"draft": {"vocab_size": vocab_size}, "eval": {"topk": topk}}
    )


def _decode(**fields: object) -> DecodeBenchConfig:
    return DecodeBenchConfig.model_validate(fields)


def _draft_folder(root: Path, n: int) -> Path:
    """A saved draft folder whose vocabulary map has ``n`` entries (only what preflight reads)."""
    folder = root / "draft"
    folder.mkdir(parents=True)
    (folder / "arch.json").write_text("{}")
    save_file({"draft_to_target": np.arange(n, dtype=np.int64)}, str(folder / "draft.safetensors"))
    return folder


# -- eval.topk vs draft.vocab_size (the case: the draft trained, then evaluation failed) -


def test_eval_topk_over_a_truncated_draft_vocabulary_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        check_tree_vocab([_train(16, 32)], tmp_path)
    assert err.value.field == ("eval", "topk") and err.value.also == (("draft", "vocab_size"),)
    msg = str(err.value)
    assert "eval.topk 32 is larger than the draft vocabulary (draft.vocab_size 16)" in msg
    assert "Fix: eval.topk <= 16, or draft.vocab_size >= 32" in msg


def test_eval_topk_within_the_vocabulary_or_a_full_vocabulary_passes(tmp_path: Path) -> None:
    check_tree_vocab([_train(16, 16), _train(0, 64), _train(8192, 64)], tmp_path)


def test_the_grid_product_is_checked_not_each_axis_alone(tmp_path: Path) -> None:
    """vocab_size 16 with the default topk and topk 32 with the default vocabulary each pass;
    their product does not."""
    configs = [_train(v, k) for v in (16, 8192) for k in (4, 32)]
    with pytest.raises(ConfigError, match=r"eval.topk 32 .*\(draft.vocab_size 16\)"):
        check_tree_vocab(configs, tmp_path)


# -- decode.topk vs a saved draft's vocabulary ----------------------------------------------------


def test_a_saved_drafts_vocabulary_is_read_from_its_header(tmp_path: Path) -> None:
    assert draft_vocab_size(_draft_folder(tmp_path, 12)) == 12
    assert draft_vocab_size(tmp_path / "nowhere") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "draft.safetensors").write_bytes(b"\xff" * 8 + b"{")
    assert draft_vocab_size(tmp_path / "bad") is None


def test_decode_topk_over_a_path_drafts_vocabulary_is_refused(tmp_path: Path) -> None:
    folder = _draft_folder(tmp_path, 3)
    cfg = _decode(draft={"source": "path", "path": str(folder)}, decode={"topk": 4})
    with pytest.raises(ConfigError) as err:
        check_decode_tree([cfg], tmp_path)
    assert err.value.field == ("decode", "topk")
    assert f"vocabulary of the draft in {folder} (3 tokens)" in str(err.value)
    ok = _decode(draft={"source": "path", "path": str(folder)}, decode={"topk": 3})
    check_decode_tree([ok, _decode(), _decode(draft={"source": "oracle"})], tmp_path)


def test_decode_topk_over_a_trial_drafts_vocabulary_is_refused(tmp_path: Path) -> None:
    _draft_folder(tmp_path / "tokens" / "trials" / "abcdef012345", 2)
    cfg = _decode(draft={"source": "trial", "sweep": "tokens", "trial_key": "abcdef"})
    with pytest.raises(ConfigError, match=r"decode.topk 4 .*\(2 tokens\)"):
        check_decode_tree([cfg], tmp_path)


# -- decode.compile and decode.attn_implementation ------------------------------------------------


def test_cuda_graphs_on_a_cpu_are_refused_and_compile_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decode_checks, "_cuda_available", lambda: False)
    for device, why in (("cpu", "device is cpu"), ("auto", "torch sees no CUDA GPU")):
        cfg = _decode(device=device, decode={"compile": "graphs"})
        with pytest.raises(ConfigError) as err:
            check_decode_kernels([cfg], tmp_path)
        assert err.value.field == ("decode", "compile") and why in str(err.value)
        assert "Fix: decode.compile: compile" in str(err.value)
        check_decode_kernels([_decode(device=device, decode={"compile": "compile"})], tmp_path)


def test_cuda_graphs_with_a_gpu_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode_checks, "_cuda_available", lambda: True)
    check_decode_kernels([_decode(decode={"compile": "graphs"})], tmp_path)
    with pytest.raises(ConfigError, match="device is cpu"):  # a GPU does not help device: cpu
        check_decode_kernels([_decode(device="cpu", decode={"compile": "graphs"})], tmp_path)


# -- the k law's fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"), [("k_law", "sweep:batch"), ("hardware", "h200"), ("k_max", 32)]
)
def test_k_law_fields_without_any_auto_trial_are_refused(
    tmp_path: Path, field: str, value: object
) -> None:
    configs = [_decode(decode={"num_draft_tokens": k, field: value}) for k in (2, 4)]
    with pytest.raises(ConfigError) as err:
        check_k_laws(configs, tmp_path)
    assert err.value.field == ("decode", field)
    assert "no trial of this sweep uses auto" in str(err.value)


def test_a_grid_mixing_fixed_k_and_auto_may_set_them(tmp_path: Path) -> None:
    configs = [
        _decode(decode={"num_draft_tokens": k, "hardware": "h200", "k_max": 32})
        for k in (2, 4, "auto")
    ]
    check_k_laws(configs, tmp_path)
    check_k_laws([_decode(), _decode(decode={"num_draft_tokens": 16})], tmp_path)


def test_auto_trials_get_the_k_law_check(tmp_path: Path) -> None:
    bad_hw = _decode(decode={"num_draft_tokens": "auto", "hardware": "h900"})
    with pytest.raises(ConfigError) as err:
        check_k_laws([bad_hw], tmp_path)
    assert err.value.field == ("decode", "hardware") and "not a hardware profile" in str(err.value)
    no_sweep = _decode(decode={"num_draft_tokens": "auto", "k_law": "sweep:nope"})
    with pytest.raises(ConfigError) as err:
        check_k_laws([no_sweep], tmp_path)
    assert err.value.field == ("decode", "k_law") and "no sweep 'nope'" in str(err.value)


def test_the_checks_are_registered_for_their_workloads() -> None:
    train = registry.WORKLOADS["draft_train"].preflight
    decode = registry.WORKLOADS["decode_bench"].preflight
    assert check_tree_vocab in train
    assert {check_decode_tree, check_decode_kernels, check_k_laws} <= set(decode)
