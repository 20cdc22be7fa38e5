"""Trials that differ in temperature or oracle_accept are never pooled into one (b, k) cell."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.throughput import auto_vs_best, best_per_batch, split_conditions, throughput_surface
from tests.analysis.test_throughput import _sweep


def _mixed() -> pd.DataFrame:
    """The synthetic sweep twice: greedy, and sampled at T = 0.7 where k = 2 wins everywhere."""
    greedy = _sweep(seeds=(0,)).assign(temperature=0.0)
    sampled = _sweep(seeds=(0,)).assign(temperature=0.7)
    sampled["tokens_per_s"] = 1000.0 / sampled["num_draft_tokens"]
    return pd.concat([sampled, greedy], ignore_index=True)


@pytest.mark.parametrize("fn", [best_per_batch, throughput_surface, auto_vs_best])
def test_a_table_of_several_temperatures_is_refused(fn) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=r"differ in temperature 0, 0.7.*split_conditions"):
        fn(_mixed())


def test_split_conditions_parts_and_labels_the_table() -> None:
    df = _mixed()
    parts = split_conditions(df)
    assert [label for label, _ in parts] == ["temperature=0", "temperature=0.7"]  # reference 1st
    greedy, sampled = (part for _, part in parts)
    pd.testing.assert_frame_equal(best_per_batch(greedy), best_per_batch(_sweep(seeds=(0,))))
    assert set(best_per_batch(sampled)["best_num_draft_tokens"]) == {2}
    assert len(greedy) + len(sampled) == len(df)


def test_split_conditions_reads_the_dotted_names_and_defaults() -> None:
    df = _sweep(seeds=(0,))
    assert [label for label, _ in split_conditions(df)] == [""]  # no condition columns
    assert split_conditions(df)[0][1] is df
    same = df.assign(temperature=0.0, **{"draft.oracle_accept": math.nan})  # NaN: the default
    assert [label for label, _ in split_conditions(same)] == [""]
    accept = df.assign(**{"draft.oracle_accept": [0.8 if i % 2 else math.nan for i in df.index]})
    labels = [label for label, _ in split_conditions(accept)]
    assert labels == ["oracle_accept=1", "oracle_accept=0.8"]  # the perfect oracle first
    with pytest.raises(ValueError, match="oracle_accept 0.8, 1"):
        best_per_batch(accept)


def test_dtypes_are_never_pooled() -> None:
    """gemma-oracle's float32 and bfloat16 trials were averaged into one (b, k) cell: its b = 1
    line said 41.0 tokens/s, the mean of 20.7 (float32) and 61.3 (bfloat16)."""
    fp32 = _sweep(seeds=(0,)).assign(**{"target.dtype": "float32"})
    bf16 = _sweep(seeds=(0,)).assign(**{"target.dtype": "bfloat16"})
    bf16["tokens_per_s"] = 3 * bf16["tokens_per_s"]
    df = pd.concat([fp32, bf16], ignore_index=True)
    with pytest.raises(ValueError, match="differ in dtype bfloat16, float32"):
        best_per_batch(df)
    parts = split_conditions(df)
    assert [label for label, _ in parts] == ["dtype=bfloat16", "dtype=float32"]
    pd.testing.assert_frame_equal(
        best_per_batch(parts[1][1]).reset_index(drop=True), best_per_batch(fp32)
    )
    peak = best_per_batch(parts[0][1])["peak_tokens_per_s"]
    assert (peak.to_numpy() == 3 * best_per_batch(fp32)["peak_tokens_per_s"].to_numpy()).all()
    one = fp32.drop(columns=["target.dtype"])  # no dtype column: one condition
    assert [label for label, _ in split_conditions(one)] == [""]
