"""Case-bootstrap CIs of the log-linear law."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.bootstrap import bootstrap_log_linear


def _data(seed: int = 0, n_per_x: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.repeat([1e4, 3e4, 1e5, 3e5, 1e6], n_per_x)
    return x, 0.1 * np.log10(x) + 0.8 + rng.normal(0, 0.02, x.size)


def test_seeded_and_reproducible() -> None:
    x, y = _data()
    a = bootstrap_log_linear(x, y, n_resamples=1000, seed=7)
    b = bootstrap_log_linear(x, y, n_resamples=1000, seed=7)
    c = bootstrap_log_linear(x, y, n_resamples=1000, seed=8)
    assert a == b and a.a_ci != c.a_ci
    assert a.n_resamples == 1000 and a.n_valid == 1000


def test_interval_matches_a_plain_loop_over_resamples() -> None:
    """The vectorised resampling equals refitting each resample with np.polyfit."""
    x, y = _data(1)
    got = bootstrap_log_linear(x, y, n_resamples=1000, seed=3)
    idx = np.random.default_rng(3).integers(0, x.size, size=(1000, x.size))
    fits = np.array([np.polyfit(np.log10(x[i]), y[i], 1) for i in idx])
    assert got.a_ci == pytest.approx(tuple(np.percentile(fits[:, 0], [2.5, 97.5])))
    assert got.b_ci == pytest.approx(tuple(np.percentile(fits[:, 1], [2.5, 97.5])))


def test_coverage_of_the_true_slope_is_near_nominal() -> None:
    """Across 200 simulated sweeps the 95% interval holds the true slope 0.1 most times."""
    hits = 0
    for seed in range(200):
        x, y = _data(seed, n_per_x=4)
        lo, hi = bootstrap_log_linear(x, y, n_resamples=1000, seed=seed).a_ci
        hits += lo <= 0.1 <= hi
    assert 0.85 <= hits / 200 <= 0.99


def test_degenerate_resamples_are_dropped_and_counted() -> None:
    x = np.array([1e3, 1e4, 1e5])
    y = np.array([1.0, 1.1, 1.2])
    got = bootstrap_log_linear(x, y, n_resamples=2000, seed=0)
    assert 0 < got.n_valid < 2000  # all-same-x resamples (about 1 in 9) have no slope
    assert got.n_resamples - got.n_valid == pytest.approx(2000 / 9, rel=0.25)
    assert got.a_ci[0] <= 0.1 <= got.a_ci[1]


def test_too_few_trials_and_bad_arguments() -> None:
    got = bootstrap_log_linear([1.0, 10.0], [1.0, 2.0])
    assert math.isnan(got.a_ci[0]) and got.n_valid == 0
    assert got.to_dict()["a_ci"] == [None, None]
    with pytest.raises(ValueError, match="x has 2 values but y has 3"):
        bootstrap_log_linear([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="n_resamples=0"):
        bootstrap_log_linear([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], n_resamples=0)
