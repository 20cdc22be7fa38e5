"""Everything a reviewer asks of a scaling-law claim, from one trial table.

:func:`review_law` fits the log-linear law (HC3 t-based CIs, prediction intervals, R² and
adjusted R², residuals), adds a seeded case-bootstrap CI, the extrapolation and leave-one-out
errors, the saturating alternative compared by AIC, and the paper's constants beside ours; it
counts the trials it could not use (failed, NaN, x <= 0) instead of hiding them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis._json import dataclass_dict, json_safe
from analysis.bootstrap import N_RESAMPLES, BootstrapCI, bootstrap_log_linear
from analysis.laws import LogLinearFit, fit_log_linear
from analysis.paper import PaperComparison, compare_with_paper
from analysis.saturating import FormComparison, SaturatingFit, compare_forms, fit_saturating
from analysis.validation import Extrapolation, LeaveOneOut, extrapolate_largest, leave_one_out


@dataclass(frozen=True)
class TrialCounts:
    """How many trials the fit could use and why the others were left out."""

    total: int
    used: int
    not_completed: int
    """failed, cancelled, pending or running trials"""
    nan: int
    """completed trials whose x or y is NaN or infinite"""
    nonpositive_x: int
    """completed trials at x <= 0 (the SFT-only baseline at 0 tokens: no log)"""
    unit: str = "trials"
    """what a row is ("trials", or e.g. "batch sizes" for the best-per-batch table)"""

    def text(self) -> str:
        """One line, e.g. "16 of 18 trials fitted; left out: 2 not completed"."""
        parts = [
            f"{n} {why}"
            for n, why in (
                (self.not_completed, "not completed (failed or unfinished)"),
                (self.nan, "with NaN/inf values"),
                (self.nonpositive_x, "at x <= 0 (baseline)"),
            )
            if n
        ]
        return f"{self.used} of {self.total} {self.unit} fitted" + (
            "; left out: " + ", ".join(parts) if parts else ""
        )


@dataclass(frozen=True)
class LawReview:
    """A law fit with its checks (see the module docstring)."""

    fit: LogLinearFit
    counts: TrialCounts
    bootstrap: BootstrapCI
    extrapolation: Extrapolation
    loo: LeaveOneOut
    saturating: SaturatingFit
    forms: FormComparison
    paper: PaperComparison | None

    def details(self) -> dict[str, Any]:
        """JSON-safe dict of everything but the fit's own numbers (for the results store)."""
        out = dataclass_dict(self)
        del out["fit"]
        return {"cov_type": self.fit.cov_type, "r2_adj": json_safe(self.fit.r2_adj), **out}


def review_law(
    trials: pd.DataFrame,
    x: str,
    y: str,
    *,
    law: str,
    log_base: int = 10,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    alpha: float = 0.05,
    unit: str = "trials",
) -> LawReview:
    """Fit and check ``y = a*log_base(x) + b`` over the completed trials of ``trials``.

    Args:
        trials: one row per trial; columns ``x``, ``y`` and optionally ``state`` (rows whose
            state is not "completed" are left out and counted).
        x, y: column names (x > 0 is fitted; x <= 0 rows are counted as baseline).
        law: law name ("tokens", "layers", "batch"; a paper law adds the comparison).
        log_base: 10 or 2.
        n_resamples, seed: of the case bootstrap (>= 1000 for a CI worth reading).
        alpha: 1 - confidence level of every interval.
        unit: what a row of ``trials`` is, for the counts' text.

    Returns:
        The review; with fewer than 3 distinct x its parts say "not enough points", and with a
        constant y (every value equal) they say "no variation": NaN numbers, no AIC preference
        and no verdict against the paper. It never raises for data.

    Raises:
        ValueError: a column is missing or log_base is not 2 or 10.
    """
    for col in (x, y):
        if col not in trials.columns:
            raise ValueError(f"column {col!r} is not in the table; it has {list(trials.columns)}")
    done = trials
    if "state" in trials.columns:
        done = trials[trials["state"] == "completed"]
    xs = pd.to_numeric(done[x], errors="coerce").to_numpy(dtype=float)
    ys = pd.to_numeric(done[y], errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(xs) & np.isfinite(ys)
    counts = TrialCounts(
        total=len(trials),
        used=int((finite & (xs > 0)).sum()),
        not_completed=len(trials) - len(done),
        nan=int((~finite).sum()),
        nonpositive_x=int((finite & (xs <= 0)).sum()),
        unit=unit,
    )
    fit = fit_log_linear(done, x, y, law=law, log_base=log_base, alpha=alpha, allow_constant=False)
    fx, fy = fit.x, fit.y
    if fit.ok:
        boot = bootstrap_log_linear(
            fx, fy, log_base=log_base, n_resamples=n_resamples, seed=seed, alpha=alpha
        )
    else:  # no law, no interval (and no resampling work)
        boot = BootstrapCI((math.nan,) * 2, (math.nan,) * 2, n_resamples, 0, seed, alpha)
    sat = fit_saturating(fx, fy, y_name=y)
    rss = float(np.sum(np.square(fit.residuals))) if fit.ok else math.nan
    return LawReview(
        fit=fit,
        counts=counts,
        bootstrap=boot,
        extrapolation=extrapolate_largest(
            fx, fy, law=law, log_base=log_base, alpha=alpha, y_name=y
        ),
        loo=leave_one_out(fx, fy, log_base=log_base, y_name=y),
        saturating=sat,
        forms=compare_forms(rss, fit.n, sat),
        paper=compare_with_paper(fit, boot.a_ci if fit.ok else None),
    )
