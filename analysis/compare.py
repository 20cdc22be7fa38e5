"""Two sweeps' trials of the same law side by side: mean per x.

Pure functions over trial tables (pandas). The slope difference is one fit with the sweep as a
factor: :func:`analysis.transfer.factor_slope_difference`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def per_x_means(table_a: pd.DataFrame, table_b: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Mean, sd (ddof=1) and n of ``y`` per ``x`` for both tables (completed, finite rows only)
    and ``delta = mean_b - mean_a``. Columns: x, mean_a, sd_a, n_a, mean_b, sd_b, n_b, delta;
    one row per x present in either table, sorted by x."""
    parts = []
    for tag, t in (("a", table_a), ("b", table_b)):
        done = t[t["state"] == "completed"] if "state" in t.columns else t
        xs = pd.to_numeric(done.get(x), errors="coerce")
        ys = pd.to_numeric(done.get(y), errors="coerce")
        frame = pd.DataFrame({"x": xs, "y": ys}).dropna()
        frame = frame[np.isfinite(frame["y"])]
        g = frame.groupby("x")["y"].agg(["mean", "std", "count"])
        g.columns = [f"mean_{tag}", f"sd_{tag}", f"n_{tag}"]
        parts.append(g)
    out = pd.concat(parts, axis=1).sort_index()
    for c in ("n_a", "n_b"):
        out[c] = out[c].fillna(0).astype(int)
    out["delta"] = out["mean_b"] - out["mean_a"]
    return out.reset_index().rename(columns={"index": "x"})
