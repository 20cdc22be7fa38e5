"""Long loss series are averaged down before SQL and MLflow (the full series is an artifact)."""

from __future__ import annotations

import pytest

from workloads.result import MAX_SERIES_POINTS, downsample


def test_a_short_series_is_kept_as_it_is() -> None:
    values = [float(i) for i in range(MAX_SERIES_POINTS)]
    assert downsample(values) == (values, 1)


def test_a_long_series_is_averaged_in_runs_of_stride() -> None:
    values = [float(i) for i in range(10)]
    points, stride = downsample(values, max_points=4)
    assert stride == 3
    assert points == [1.0, 4.0, 7.0, 9.0]  # the last run holds one value


def test_three_million_steps_fit_the_budget() -> None:
    points, stride = downsample([1.0] * 3_000_000)
    assert len(points) <= MAX_SERIES_POINTS and stride == 1500
    assert set(points) == {1.0}


def test_max_points_must_be_positive() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        downsample([1.0], max_points=0)
