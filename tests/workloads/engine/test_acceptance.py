"""Acceptance length in both definitions (pooled over verify steps; mean of per-prompt means)
with bootstrap CIs, on fixed per-prompt counts (issue 24, item 2)."""

from __future__ import annotations

import math

import pytest

from workloads.engine.acceptance import (
    acceptance_cis,
    acceptance_metrics,
    per_prompt_mean,
    pooled,
)

# (tokens emitted, verify steps) per prompt: a long prompt that accepts well, two short ones
ACCEPTED, CYCLES = [40, 3, 4], [10, 3, 2]


def test_the_two_definitions_on_fixed_counts() -> None:
    assert pooled(ACCEPTED, CYCLES) == pytest.approx(47 / 15)
    assert per_prompt_mean(ACCEPTED, CYCLES) == pytest.approx((4 + 1 + 2) / 3)


def test_the_two_definitions_can_order_two_drafts_differently() -> None:
    """Draft A is better on the long prompt, B on the short ones (vllm#42508's kind)."""
    a = ([40, 3], [10, 3])  # 4.0 on 10 cycles, 1.0 on 3
    b = ([30, 9], [10, 3])  # 3.0 on 10 cycles, 3.0 on 3
    assert pooled(*a) == pytest.approx(43 / 13) and pooled(*b) == pytest.approx(3.0)
    assert per_prompt_mean(*a) == pytest.approx(2.5) and per_prompt_mean(*b) == pytest.approx(3.0)
    assert (pooled(*a) > pooled(*b)) != (per_prompt_mean(*a) > per_prompt_mean(*b))


def test_bootstrap_cis_hold_the_estimates_and_are_seeded() -> None:
    cis = acceptance_cis(ACCEPTED, CYCLES, n_boot=500, seed=1)
    assert cis.pooled_ci[0] <= cis.pooled <= cis.pooled_ci[1]
    assert cis.per_prompt_mean_ci[0] <= cis.per_prompt_mean <= cis.per_prompt_mean_ci[1]
    assert cis.n == 3 and cis == acceptance_cis(ACCEPTED, CYCLES, n_boot=500, seed=1)
    # each prompt's tokens / verify steps lie in 1..4: so do both statistics of any resample
    for lo, hi in (cis.pooled_ci, cis.per_prompt_mean_ci):
        assert lo >= 1.0 and hi <= 4.0 and lo < hi


def test_one_prompt_has_a_point_interval() -> None:
    cis = acceptance_cis([6], [3], n_boot=50)
    assert cis.pooled_ci == (2.0, 2.0) and cis.per_prompt_mean_ci == (2.0, 2.0)


@pytest.mark.parametrize(
    ("accepted", "cycles", "message"),
    [
        ([], [], "non-empty"),
        ([1, 2], [1], "one value per prompt"),
        ([3], [0], "at least one verify step"),
    ],
)
def test_bad_counts_are_refused(accepted: list[int], cycles: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        acceptance_cis(accepted, cycles)


def test_trial_metrics_name_both_definitions_and_are_reproducible() -> None:
    """The metric names a trial records; a prompt with no verify step is left out (it adds
    nothing to the pooled sums and has no per-prompt ratio)."""
    m = acceptance_metrics([*ACCEPTED, 0], [*CYCLES, 0], suffix="/humaneval")
    assert m["acceptance_length/humaneval"] == pytest.approx(47 / 15)
    assert m["acceptance_length_prompt_mean/humaneval"] == pytest.approx(7 / 3)
    assert set(m) == {
        f"{name}/humaneval"
        for name in (
            "acceptance_length",
            "acceptance_length_ci_low",
            "acceptance_length_ci_high",
            "acceptance_length_prompt_mean",
            "acceptance_length_prompt_mean_ci_low",
            "acceptance_length_prompt_mean_ci_high",
        )
    }
    cis = acceptance_cis(ACCEPTED, CYCLES)  # the default seed and resamples
    assert (m["acceptance_length_ci_low/humaneval"], m["acceptance_length_ci_high/humaneval"]) == (
        cis.pooled_ci
    )
    assert m == acceptance_metrics([*ACCEPTED, 0], [*CYCLES, 0], suffix="/humaneval")
    assert all(math.isnan(v) for v in acceptance_metrics([0], [0]).values())
