"""Chi-square goodness of fit for the sampling tests."""

from __future__ import annotations

import torch
from scipy.stats import chisquare


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of observed ``counts`` [C] against category probabilities ``probs`` [C].

    Cells expected below 5 are pooled into one (chi-square needs >= 5 per cell); an empty pool is
    dropped. ``probs`` is renormalised to sum to 1 against float rounding.
    """
    counts, probs = counts.double(), probs.double()
    expected = probs / probs.sum() * counts.sum()
    small = expected < 5
    obs, exp = [counts[~small]], [expected[~small]]
    if bool(small.any()) and float(expected[small].sum()) > 0:
        obs.append(counts[small].sum()[None])
        exp.append(expected[small].sum()[None])
    return float(chisquare(torch.cat(obs).numpy(), torch.cat(exp).numpy()).pvalue)
