"""Acceptance length as a function of the verified tokens k: two forms fitted to a decode
sweep's trials, the better one chosen, with case-bootstrap replicates for the plan's intervals.

Forms (tau in tokens per cycle, k verified tokens per sequence per cycle, root included):

- ``eq8``: ``tau = A - B * r**k`` (0 < r < 1): the form of Scylla (arXiv 2505.07858) Appendix E,
  Eq. 8, ``tau(k) = -6.25 * (0.2c)**(k/30) + 6``: it saturates at A as k grows;
- ``log2``: ``tau = a * log2(k) + b``: grows without bound, one parameter fewer.

Both are fitted by least squares, ``eq8`` as a profile over r on :data:`R_GRID` (linear in A
and B for each r). A bootstrap replicate is the weighted fit with the trials' multinomial
resample counts as weights (Efron & Tibshirani 1993, ch. 9). The form with the lower AICc
(Burnham & Anderson 2002, Sec. 2.4) is chosen; both are reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis._json import json_safe

__all__ = ["FORMS", "TauKFit", "fit_tau_k", "resample_weights"]

FORMS = ("eq8", "log2")
"""the acceptance-versus-k forms, in the order they are reported"""

HALF_LIVES = np.geomspace(0.5, 2000.0, 240)
"""half-lives of the ``eq8`` profile fit, in tokens of k (r**k halves every ln 2 / -ln r)"""

R_GRID = 2.0 ** (-1.0 / HALF_LIVES)
"""the r values of the ``eq8`` profile fit (0.25 to 0.99965)"""


@dataclass(frozen=True)
class TauKFit:
    """Both forms' fits of acceptance length vs k, the chosen one and its replicates.

    ``params[f]`` is an array of shape (1 + n_resamples, p): row 0 the fit to the data, the
    other rows the bootstrap replicates (NaN rows: a replicate the form cannot fit, e.g. one
    distinct k). ``eq8`` columns (A, B, r), ``log2`` columns (a, b).
    """

    chosen: str
    """the form with the lower AICc (``eq8`` or ``log2``)"""
    params: dict[str, np.ndarray]
    aicc: dict[str, float]
    """AICc per form (lower is better; inf when a form has too few points)"""
    r2: dict[str, float]
    """coefficient of determination per form"""
    n: int
    """trials fitted"""
    ks: tuple[float, ...]
    """distinct k measured"""

    def predict(self, k: np.ndarray | Sequence[float], form: str | None = None) -> np.ndarray:
        """tau at ``k`` for every row of ``params`` (the fit, then the replicates): shape
        (1 + n_resamples, len(k)), tokens per cycle, at least 1 and at most k."""
        f = form or self.chosen
        ks = np.asarray(k, dtype=float)[None, :]
        p = self.params[f]
        if f == "eq8":
            tau = p[:, :1] - p[:, 1:2] * p[:, 2:3] ** ks
        else:
            tau = p[:, :1] * np.log2(ks) + p[:, 1:2]
        return np.clip(tau, 1.0, ks)

    def summary(self) -> dict[str, Any]:
        """The point fits, AICc, R² and the choice as JSON-safe data."""
        names = {"eq8": ("A", "B", "r"), "log2": ("a", "b")}
        return json_safe(
            {
                "chosen": self.chosen,
                "forms": {
                    f: {
                        "form": "tau = A - B*r**k (Scylla App. E Eq. 8 form)"
                        if f == "eq8"
                        else "tau = a*log2(k) + b",
                        "params": dict(zip(names[f], map(float, self.params[f][0]), strict=True)),
                        "aicc": self.aicc[f],
                        "r2": self.r2[f],
                    }
                    for f in FORMS
                },
                "n": self.n,
                "ks": list(self.ks),
            }
        )


def resample_weights(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """Case-bootstrap weights: row 0 all ones (the data), then ``n_resamples`` rows of
    multinomial counts of n draws with replacement; shape (1 + n_resamples, n)."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(float)
    return np.vstack([np.ones((1, n)), counts])


def weighted_lines(
    x_cols: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of y on the columns of ``x_cols`` (n, p) for every weight row of
    ``w`` (R, n) at once: (coefficients (R, p), weighted SSE (R,)); NaN where singular."""
    n, p = x_cols.shape
    xtwx = (w @ (x_cols[:, :, None] * x_cols[:, None, :]).reshape(n, p * p)).reshape(-1, p, p)
    xtwy = w @ (x_cols * y[:, None])
    det = np.linalg.det(xtwx)
    scale = np.einsum("rpp->r", xtwx) ** p
    ok = np.abs(det) > 1e-10 * np.maximum(scale, 1e-300)
    coef = np.full((w.shape[0], p), np.nan)
    if ok.any():
        coef[ok] = np.linalg.solve(xtwx[ok], xtwy[ok][..., None])[..., 0]
    resid = y[None, :] - coef @ x_cols.T
    return coef, (w * resid**2).sum(axis=1)


def fit_tau_k(
    k: Sequence[float], tau: Sequence[float], *, n_resamples: int = 1000, seed: int = 0
) -> TauKFit:
    """Fit both forms to trials (k_i, tau_i) and bootstrap them.

    Args:
        k: verified tokens per sequence per cycle of each trial, >= 1, shape (n,).
        tau: each trial's acceptance length (pooled, tokens per cycle), shape (n,).
        n_resamples: bootstrap replicates (0: the fit alone).
        seed: seed of the resampling.

    Raises:
        ValueError: lengths differ, a value is not finite, k < 1, or fewer than 3 distinct k.
    """
    ks = np.asarray(k, dtype=float)
    ys = np.asarray(tau, dtype=float)
    if ks.shape != ys.shape:
        raise ValueError(f"{ks.size} k values but {ys.size} acceptance lengths")
    if not (np.isfinite(ks).all() and np.isfinite(ys).all()) or (ks < 1).any():
        raise ValueError("k and acceptance length must be finite, k >= 1")
    distinct = sorted(set(ks.tolist()))
    if len(distinct) < 3:
        raise ValueError(f"{len(distinct)} distinct k {distinct}: a tau(k) curve needs >= 3")
    w = resample_weights(ks.size, n_resamples, seed)
    params = {"log2": weighted_lines(np.column_stack([np.log2(ks), np.ones_like(ks)]), ys, w)}
    params["eq8"] = _profile_eq8(ks, ys, w)
    sst = float(((ys - ys.mean()) ** 2).sum())
    aicc, r2 = {}, {}
    for f, p in (("eq8", 3), ("log2", 2)):
        sse = float(params[f][1][0])
        r2[f] = 1 - sse / sst if sst > 0 else math.nan
        aicc[f] = _aicc(sse, ks.size, p)
    chosen = "eq8" if aicc["eq8"] < aicc["log2"] else "log2"
    return TauKFit(
        chosen=chosen,
        params={f: params[f][0] for f in FORMS},
        aicc=aicc,
        r2=r2,
        n=int(ks.size),
        ks=tuple(distinct),
    )


def _profile_eq8(ks: np.ndarray, ys: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``tau = A - B*r**k``: for each r of :data:`R_GRID` a weighted line in (1, -r**k); per
    weight row the r of least SSE (with B >= 0: acceptance does not fall with k)."""
    best_sse = np.full(w.shape[0], np.inf)
    best = np.full((w.shape[0], 3), np.nan)
    for r in R_GRID:
        coef, sse = weighted_lines(np.column_stack([np.ones_like(ks), -(r**ks)]), ys, w)
        better = (sse < best_sse) & (coef[:, 1] >= 0) & np.isfinite(sse)
        best_sse[better] = sse[better]
        best[better] = np.column_stack([coef[better], np.full(int(better.sum()), r)])
    return best, best_sse


def _aicc(sse: float, n: int, p: int) -> float:
    """AICc of a least-squares fit with p parameters (+1 for the variance)."""
    q = p + 1
    if n - q - 1 <= 0 or not math.isfinite(sse):
        return math.inf
    return n * math.log(max(sse, 1e-300) / n) + 2 * q + 2 * q * (q + 1) / (n - q - 1)
