"""Two sweeps' trials side by side: per-x means (the slope difference: test_transfer.py)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.compare import per_x_means


def test_per_x_means_aligns_both_tables() -> None:
    a = pd.DataFrame({"x": [1, 1, 2, 3], "y": [1.0, 2.0, 3.0, 4.0], "state": ["completed"] * 4})
    b = pd.DataFrame(
        {"x": [2, 3, 4], "y": [1.0, 2.0, 3.0], "state": ["completed", "failed", "completed"]}
    )
    m = per_x_means(a, b, "x", "y")
    assert m["x"].tolist() == [1, 2, 3, 4]
    assert m["n_a"].tolist() == [2, 1, 1, 0] and m["n_b"].tolist() == [0, 1, 0, 1]
    assert m.loc[1, "delta"] == pytest.approx(-2.0)
    assert m.loc[0, "sd_a"] == pytest.approx(math.sqrt(0.5))
    assert math.isnan(m.loc[0, "delta"])
