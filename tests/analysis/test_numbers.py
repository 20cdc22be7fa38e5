"""analysis.numbers: the one format of numbers, intervals, durations and GPU time;
undefined values print as n/a (``?`` in a narrow cell)."""

from __future__ import annotations

import math

import pytest

from analysis.numbers import NA, duration, fmt, fmt_interval, gpu_hours


@pytest.mark.parametrize(
    ("seconds", "wide", "narrow"),
    [
        (None, NA, "?"), (math.nan, NA, "?"), (90, "90 s", "90s"), (119.9, "120 s", "120s"),
        (120, "2 min", "2min"), (7200, "2 h", "2h"), (36000, "10 h", "10h"),
        (5.55e6, "64.2 d", "64d"), (18.34, "18.3 s", "18.3s"),
    ],
)  # fmt: skip
def test_duration_uses_the_largest_unit_reached_twice(
    seconds: object, wide: str, narrow: str
) -> None:
    assert duration(seconds) == wide
    assert duration(seconds, narrow=True) == narrow


def test_gpu_hours_counts_and_seconds() -> None:
    assert gpu_hours(2902.4) == "2,902 GPU-hours" and gpu_hours(0.42) == "0.42 GPU-hours"
    assert gpu_hours(0.0000122) == "0.044 GPU-seconds" and gpu_hours(None) == "unknown GPU-hours"


def test_the_number_formats() -> None:
    assert fmt(3.0, "d") == "3" and fmt(float("inf")) == NA and fmt(True) == NA
    assert fmt_interval((1, 2), ".1f") == "[1.0, 2.0]" and fmt_interval((1, None)) == NA


def test_plural_says_one_without_an_s() -> None:
    from analysis.numbers import plural

    assert plural(1, "trial") == "1 trial"
    assert plural(0, "trial") == "0 trials"
    assert plural(2, "failed trial") == "2 failed trials"
