"""The decode_bench workload: draft lookup by trial key, and one real run with the oracle draft."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from workloads.config import ConfigError
from workloads.decode_bench import checks
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.measure import decode as engine_bench
from workloads.measure import drafts


def _trial(root: Path, key: str, accepted: int, cycles: int) -> Path:
    folder = root / "tokens" / "trials" / key
    (folder / "draft").mkdir(parents=True)
    (folder / "draft" / "arch.json").write_text("{}")
    rows = [{"cycles": cycles, "accepted": accepted}]
    (folder / "per_prompt.json").write_text(json.dumps(rows))
    return folder / "draft"


def test_find_trial_draft_by_prefix_and_best(tmp_path: Path) -> None:
    low = _trial(tmp_path, "aaaaaa11bbbb2222", accepted=12, cycles=10)
    high = _trial(tmp_path, "aaaaaa33cccc4444", accepted=15, cycles=10)
    assert drafts.find_trial_draft(tmp_path, "tokens", "best") == high
    assert drafts.find_trial_draft(tmp_path, "tokens", "aaaaaa11") == low
    with pytest.raises(ValueError, match="too short"):
        drafts.find_trial_draft(tmp_path, "tokens", "aaaa")
    with pytest.raises(ValueError, match="matches several"):
        drafts.find_trial_draft(tmp_path, "tokens", "aaaaaa")
    with pytest.raises(ValueError, match="matches no finished trial"):
        drafts.find_trial_draft(tmp_path, "tokens", "ffffff")
    with pytest.raises(ValueError, match="matches no finished trial .*Fix: best, or one of"):
        drafts.find_trial_draft(tmp_path, "tokens", "ffffff")
    # no such spec file: the fix names the spec by its name, not a sweeps/other.yaml that is not
    with pytest.raises(ValueError, match="sweep .other. \\(`the spec with name: other`"):
        drafts.find_trial_draft(tmp_path, "other", "best")


def test_a_sweep_not_yet_run_names_its_shipped_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[3])  # the checkout: sweeps/ beside it
    with pytest.raises(ValueError, match="`orchestrator submit sweeps/gemma-tokens.yaml`"):
        drafts.find_trial_draft(tmp_path, "gemma-tokens", "best")


def test_oracle_run_measures_the_engine(target, cache_dir: Path, tmp_path: Path) -> None:  # noqa: ANN001
    cfg = DecodeBenchConfig.model_validate(
        {
            "device": "cpu",
            "draft": {"source": "oracle"},
            "decode": {
                "batch_size": 2,
                "depth": 3,
                "topk": 1,
                "num_draft_tokens": 4,
                "max_new_tokens": 12,
            },
            "prompts": {"prompt_sets": ["humaneval"], "num_prompts": 3},
            "warmup": 0,
        }
    )
    res = engine_bench.run(cfg, cache_dir=cache_dir, out_dir=tmp_path)
    m = res.metrics
    assert m["generated_tokens"] == 4 * 12  # 3 prompts cycled to 2 full batches of 2
    assert m["mismatches"] == 0 and m["ar_mismatches"] == 0
    assert m["acceptance_length"] > 3.0  # the oracle's 3 drafted tokens are accepted
    assert m["speedup"] == pytest.approx(m["tokens_per_s"] / m["ar_tokens_per_s"])
    assert m["hf_tokens_per_s"] != m["hf_tokens_per_s"]  # NaN: HF generate runs at b = 1 only
    assert 0 <= m["bookkeeping_share"] < 1
    assert m["hw.cached"] in (0.0, 1.0) and m["hw.peak_flops"] > 0  # one profile per cache
    assert list((cache_dir / "hardware").glob("local-cpu-float32-*.json"))
    batches = json.loads((tmp_path / "per_batch.json").read_text())
    assert [b["prompts"] for b in batches] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"draft": {"source": "path", "path": "/nonexistent/draft"}}, "does not exist"),
        ({"draft": {"source": "trial", "sweep": "nope", "trial_key": "best"}}, "no finished"),
        ({"prompts": {"prompt_sets": ["humanevall"]}}, "unknown prompt sets ['humanevall']"),
        ({"prompts": {"prompt_sets": "/nonexistent/dir"}}, "is not a directory"),
    ],
)
def test_preflight_refuses_what_would_fail_every_trial(
    tmp_path: Path, overrides: dict, message: str
) -> None:
    cfg = DecodeBenchConfig.model_validate(overrides)
    with pytest.raises(ValueError, match=re.escape(message)):
        checks.preflight(cfg, tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_preflight_refuses_cuda_without_a_gpu(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no CUDA GPU") as info:
        checks.preflight(DecodeBenchConfig(device="cuda"), tmp_path)
    assert info.value.field == ("device",)  # the orchestrator's preflight names the spec line


def test_preflight_names_the_sweep_line_and_the_sweep_meant(tmp_path: Path) -> None:
    """``draft.sweep: gemma-tokenz`` blamed the ``base:`` line and said to submit a spec that
    does not exist."""
    (tmp_path / "gemma-tokens" / "trials").mkdir(parents=True)
    src = {"source": "trial", "sweep": "gemma-tokenz", "trial_key": "best"}
    meant = r"\(did you mean 'gemma-tokens'\?\)\. Fix: draft.sweep: gemma-tokens$"
    with pytest.raises(ConfigError, match=meant) as e:
        checks.preflight(DecodeBenchConfig.model_validate({"draft": src}), tmp_path)
    assert e.value.field == ("draft", "sweep")
    src = {"source": "trial", "sweep": "gemma-tokens", "trial_key": "zzzzzz"}  # ran: the key
    with pytest.raises(ConfigError, match="no finished draft_train trial") as e:
        checks.preflight(DecodeBenchConfig.model_validate({"draft": src}), tmp_path)
    assert e.value.field == ("draft", "trial_key")


def test_preflight_refuses_a_draft_trained_on_another_builtin_target(tmp_path: Path) -> None:
    """A gemma-batch copy without ``target.model: gemma-3-270m`` would load a Gemma draft on
    SmolLM2 and fail inside every trial."""
    from workloads.models.draft import TRAINED_WITH

    draft = tmp_path / "gemma-tokens" / "trials" / "a1b2c3d4e5f60718" / "draft"
    draft.mkdir(parents=True)
    (draft / "arch.json").write_text("{}")
    (draft / TRAINED_WITH).write_text(json.dumps({"target": {"model": "gemma-3-270m"}}))
    src = {"source": "trial", "sweep": "gemma-tokens", "trial_key": "best"}
    with pytest.raises(ConfigError, match="trained on 'gemma-3-270m'.*Fix: target.model") as e:
        checks.preflight(DecodeBenchConfig.model_validate({"draft": src}), tmp_path)
    assert e.value.field == ("target", "model")
    same = {"draft": src, "target": {"model": "gemma-3-270m"}}
    checks.preflight(DecodeBenchConfig.model_validate(same), tmp_path)  # passes
    local = {"draft": src, "target": {"model": str(tmp_path)}}  # a folder: not judged
    checks.preflight(DecodeBenchConfig.model_validate(local), tmp_path)


def test_metrics_give_both_acceptance_definitions_with_cis() -> None:
    """Issue 24: ``acceptance_length`` stays the pooled one; the per-row mean and both CIs
    come beside it, from fixed per-cycle counts (a long row accepting 4 per cycle, a short one
    accepting 1)."""
    from workloads.engine.tree_decode import BatchResult

    batch = BatchResult(
        tokens=[[1] * 40, [1] * 3], accept_lengths=[[4] * 10, [1] * 3], cycles=10, total_s=1.0
    )
    m = engine_bench._metrics([batch], [], 0.0, 0, {})
    assert m["acceptance_length"] == pytest.approx(43 / 13) == batch.acceptance_length
    assert m["acceptance_length_prompt_mean"] == pytest.approx(2.5)
    assert m["acceptance_length_ci_low"] <= m["acceptance_length"] <= m["acceptance_length_ci_high"]
    lo, hi = m["acceptance_length_prompt_mean_ci_low"], m["acceptance_length_prompt_mean_ci_high"]
    assert 1.0 <= lo < 2.5 < hi <= 4.0
