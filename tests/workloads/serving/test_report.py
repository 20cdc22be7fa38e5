"""A serving trial's metrics: both acceptance definitions, the agreement flag, speedups."""

from __future__ import annotations

import math

import pytest

from workloads.serving.config import ServeBenchConfig
from workloads.serving.metrics import ServerRun, SpecCounters
from workloads.serving.report import agreement, trial_metrics


def _spec() -> ServerRun:
    # two requests of 9 output tokens: 8 after the prefill token, in 4 steps each; vLLM counted
    # one more accepted token in the last step of the first request (cut by max_tokens)
    return ServerRun(
        startup_s=50.0,
        outputs=[list(range(9)), list(range(9))],
        per_request=[(5, 4), (4, 4)],
        counters=SpecCounters(8, 24, 9, (6, 2, 1)),
        bench={1: {"output_throughput": 12.0, "mean_tpot_ms": 80.0,
                   "spec_decode_acceptance_length": 2.1}},
    )  # fmt: skip


def test_both_definitions_and_the_speedup() -> None:
    cfg = ServeBenchConfig(draft={"source": "path", "path": "x"}, serve={"batch_sizes": [1]})
    base = ServerRun(
        startup_s=40.0, outputs=_spec().outputs, bench={1: {"output_throughput": 10.0}}
    )
    ours = {"acceptance_length": 2.0, "acceptance_length_ci_low": 2.0,
            "acceptance_length_ci_high": 2.0, "mismatches": 0.0, "cycles": 8.0}  # fmt: skip
    m = trial_metrics(cfg, _spec(), base, ours, {"mismatches": 0.0, "near_ties": 0.0})
    assert m["acceptance_length"] == 2.0  # 16 emitted / 8 steps
    assert m["acceptance_length_vllm"] == pytest.approx(17 / 8)  # 1 + 9 accepted / 8
    assert m["acceptance_length_counters"] == pytest.approx(17 / 8)
    assert m["acceptance_rate/pos0"] == 0.75 and m["verify_steps"] == 8
    assert m["speedup"] == pytest.approx(1.2) and m["tokens_per_s"] == 12.0
    assert m["baseline.startup_s"] == 40.0 and m["tpot_ms/b1"] == 80.0
    assert m["agreement.difference"] == 0.0 and m["engine.verify_steps"] == 8


def test_disjoint_cis_are_flagged_and_missing_figures_are_nan() -> None:
    vllm = {"acceptance_length": 1.5, "acceptance_length_ci_low": 1.45,
            "acceptance_length_ci_high": 1.55}  # fmt: skip
    far = {"acceptance_length": 1.3, "acceptance_length_ci_low": 1.25,
           "acceptance_length_ci_high": 1.35}  # fmt: skip
    near = {"acceptance_length": 1.42, "acceptance_length_ci_low": 1.35,
            "acceptance_length_ci_high": 1.46}  # fmt: skip
    assert agreement(vllm, far)["agreement.disjoint"] == 1.0
    assert agreement(vllm, near)["agreement.disjoint"] == 0.0
    assert math.isnan(agreement(vllm, None)["agreement.difference"])


def test_a_served_acceptance_wholly_below_this_engines_fails_the_trial() -> None:
    from workloads.serving.bench import ServedBelowEngine, check_agreement

    vllm = {"acceptance_length": 1.0, "acceptance_length_ci_low": 1.0,
            "acceptance_length_ci_high": 1.0}  # fmt: skip
    ours = {"acceptance_length": 1.4, "acceptance_length_ci_low": 1.3,
            "acceptance_length_ci_high": 1.5}  # fmt: skip
    below = vllm | agreement(vllm, ours)
    with pytest.raises(ServedBelowEngine, match=r"1\.000 \[1\.000, 1\.000\].*1\.400"):
        check_agreement(below)
    check_agreement(ours | agreement(ours, vllm))  # vLLM above this engine: a figure, no error
    overlap = {"acceptance_length": 1.35, "acceptance_length_ci_low": 1.28,
               "acceptance_length_ci_high": 1.42}  # fmt: skip
    check_agreement(overlap | agreement(overlap, ours))
    check_agreement(vllm | agreement(vllm, None))  # nothing to compare with


def test_a_served_prompt_keeps_one_bos() -> None:
    """A tokenizer that adds BOS itself (Gemma's) would see two in the decoded text."""
    from workloads.serving.bench import served_text

    class Tok:
        bos_token_id = 2

        def decode(self, ids: list[int], **_: object) -> str:
            return "".join("<bos>" if i == 2 else chr(96 + i) for i in ids)

        def __call__(self, text: str) -> dict[str, list[int]]:
            body = text.removeprefix("<bos>")
            lead = [2, 2] if text.startswith("<bos>") else [2]
            return {"input_ids": lead + [ord(c) - 96 for c in body]}

    assert served_text(Tok(), [2, 3, 4]) == "cd"  # the server adds the BOS back
    Tok.__call__ = lambda self, text: {"input_ids": [ord(c) - 96 for c in text]}  # type: ignore[method-assign]
    assert served_text(Tok(), [3, 4]) == "cd"  # no BOS: unchanged
