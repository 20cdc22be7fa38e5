"""Side-by-side summary of a sweep's variants (named recipes), e.g. EAGLE-2 protocol vs Scylla.

No law is fitted: each variant's completed trials (its seeds and grid points) are summarised by
count, mean, sample standard deviation, min and max of every numeric metric asked for, and the
difference of each variant's mean from the first variant's (as Scylla, arXiv 2505.07858,
Sec. 5).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

VARIANT = "variant"
"""the trial-table column naming a trial's variant"""


def variant_summary(trials: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """One row per (variant, metric): n, mean, sd, min, max and ``delta`` vs the first variant.

    Args:
        trials: wide trial table with ``variant``, ``state`` and metric columns.
        metrics: metric columns to summarise; missing ones are skipped.

    Returns:
        Columns variant, metric, n, mean, sd, min, max, delta (NaN for the first variant and
        where a mean is missing). Variants keep their order of first appearance. Only
        ``state == "completed"`` rows with a finite value count.
    """
    cols = ["variant", "metric", "n", "mean", "sd", "min", "max", "delta"]
    if VARIANT not in trials.columns:
        return pd.DataFrame(columns=cols)
    done = trials[trials["state"] == "completed"] if "state" in trials.columns else trials
    order = list(dict.fromkeys(trials[VARIANT].dropna().tolist()))
    rows = []
    for metric in metrics:
        if metric not in done.columns:
            continue
        first_mean = math.nan
        for i, name in enumerate(order):
            values = pd.to_numeric(done.loc[done[VARIANT] == name, metric], errors="coerce")
            v = values[np.isfinite(values)].to_numpy(dtype=float)
            mean = float(v.mean()) if len(v) else math.nan
            if i == 0:
                first_mean = mean
            rows.append(
                [
                    name,
                    metric,
                    len(v),
                    mean,
                    float(v.std(ddof=1)) if len(v) > 1 else math.nan,
                    float(v.min()) if len(v) else math.nan,
                    float(v.max()) if len(v) else math.nan,
                    math.nan if i == 0 else mean - first_mean,
                ]
            )
    return pd.DataFrame(rows, columns=cols)
