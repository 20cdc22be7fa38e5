"""Tables of a law review: the fit and its checks, and the paper's constants beside ours.

Shared by the sweep dashboard, ``orchestrator fit`` (the console) and ``orchestrator compare``;
text only, no figures; the tables as :class:`dashboards._html.Table` data. Numbers go through
:func:`analysis.numbers.fmt`, the console's format: an undefined value is ``n/a``, and a check
without a number gives no verdict.
"""

from __future__ import annotations

import math

from analysis.laws import LogLinearFit
from analysis.numbers import NA, fmt
from analysis.paper import PaperComparison
from analysis.review import LawReview
from dashboards._html import Table


def _g(value: float | None, digits: int = 4) -> str:
    return fmt(value, f".{digits}g")


def _ci(ci: tuple[float, float], digits: int = 4) -> str:
    return f"[{_g(ci[0], digits)}, {_g(ci[1], digits)}]"


def fit_numbers(fit: LogLinearFit) -> str:
    """An ok fit's coefficients in one line, as the console and the figure titles print them:
    ``a = 0.05163 [0.03958, 0.06368], b = 0.8974 [0.8387, 0.9561] (95% CI, HC3), R² = 0.953
    (adjusted 0.945), n = 8``."""
    level = round(100 * (1 - fit.alpha))
    return (
        f"a = {_g(fit.a)} {_ci(fit.a_ci)}, b = {_g(fit.b)} {_ci(fit.b_ci)} "
        f"({level}% CI, {fit.cov_type}), R² = {fmt(fit.r2, '.3f')} "
        f"(adjusted {fmt(fit.r2_adj, '.3f')}), n = {fit.n}"
    )


def review_rows(review: LawReview) -> list[list[object]]:
    """(check, value) rows: the fit (HC3 and bootstrap CIs, R², adjusted R²), extrapolation,
    leave-one-out, the saturating alternative and the AIC comparison."""
    f, bt, ex, lo, sat, fm = (
        review.fit,
        review.bootstrap,
        review.extrapolation,
        review.loo,
        review.saturating,
        review.forms,
    )
    level = round(100 * (1 - f.alpha))
    rows: list[list[object]] = [
        ["law", f.form],
        ["status", f.status],
        ["trials", review.counts.text()],
    ]
    if not f.ok:
        return rows
    if f.scale == 0.0:
        rows.append(
            [
                "warning",
                "every fitted point lies on the line (zero residuals): the intervals have no width",
            ]
        )
    rows += [
        [f"a ({level}% CI, {f.cov_type}, t with {f.df_resid:.0f} df)", f"{_g(f.a)} {_ci(f.a_ci)}"],
        [
            f"a ({level}% bootstrap CI)",
            f"{_ci(bt.a_ci)} ({bt.n_valid} of {bt.n_resamples} resamples of trials, "
            f"seed {bt.seed})",
        ],
        [f"b ({level}% CI, {f.cov_type})", f"{_g(f.b)} {_ci(f.b_ci)}"],
        [f"b ({level}% bootstrap CI)", _ci(bt.b_ci)],
        ["R² / adjusted R²", f"{_g(f.r2, 3)} / {_g(f.r2_adj, 3)}"],
        ["n (trials fitted) / residual sd", f"{f.n} / {_g(math.sqrt(f.scale), 3)}"],
    ]
    if ex.status == "ok":
        verdict = "inside" if ex.covered else "OUTSIDE"
        rows.append(
            [
                "extrapolation to the largest x",
                f"fit on x < {_g(ex.x_heldout, 6)} ({ex.n_train} trials) predicts "
                f"{_g(ex.predicted)} {_ci((ex.pred_lo, ex.pred_hi))}; observed mean "
                f"{_g(ex.observed)} (n = {ex.n_heldout}); error {fmt(ex.error, '+.4g')} "
                f"({fmt(100 * ex.rel_error, '+.2f')}%), {verdict} the {level}% prediction "
                "interval",
            ]
        )
    else:
        rows.append(["extrapolation to the largest x", ex.status])
    rows.append(
        [
            "leave-one-out error",
            f"RMSE {_g(lo.rmse)}, MAE {_g(lo.mae)}, max |error| {_g(lo.max_abs)} (n = {lo.n})"
            if lo.status == "ok"
            else lo.status,
        ]
    )
    rows.append(
        [
            "saturating form y = c - A*(x/x0)^-alpha",
            f"c = {_g(sat.c)}, A = {_g(sat.A)}, alpha = {_g(sat.alpha)}, x0 = {_g(sat.x0, 6)}"
            + (
                " (alpha near 0: the curve is log-linear over this range, no ceiling in view)"
                if sat.alpha < 0.01
                else ""
            )
            if sat.ok
            else sat.status,
        ]
    )
    rows.append(
        [
            "AIC log-linear / saturating",
            f"{_g(fm.aic_log_linear)} / {_g(fm.aic_saturating)}, delta {_g(fm.delta, 3)}: "
            f"{fm.preferred}",
        ]
    )
    return rows


def review_table(review: LawReview) -> Table:
    """:func:`review_rows` as a table (id "review")."""
    return Table(["check", "value"], review_rows(review), table_id="review")


def paper_rows(cmp: PaperComparison) -> list[list[object]]:
    """(quantity, paper, ours) rows of :class:`analysis.paper.PaperComparison`."""
    boot = (
        NA
        if cmp.boot_covers_paper is None
        else ("yes" if cmp.boot_covers_paper else "no") + f" {_ci(cmp.boot_ci or (math.nan,) * 2)}"
    )
    fitted = cmp.ci_covers_paper is not None
    covers = ("yes" if cmp.ci_covers_paper else "no") if fitted else f"{NA} (no fit)"
    if not fitted:
        boot = f"{NA} (no fit)"
    return [
        ["source", cmp.source, "this sweep"],
        ["slope a", _g(cmp.paper_a), f"{_g(cmp.ours_a)} {_ci(cmp.ours_a_ci)}"],
        ["slope ratio (ours / paper)", "1", _g(cmp.slope_ratio, 3)],
        ["our CI covers the paper's a", "", covers],
        ["our bootstrap CI covers the paper's a", "", boot],
        [
            "intercept b (our x unit)",
            f"{_g(cmp.paper_b_ours)} (published {_g(cmp.paper_b)})",
            _g(cmp.ours_b),
        ],
        ["R²", _g(cmp.paper_r2, 3), _g(cmp.ours_r2, 3)],
    ]


def paper_table(cmp: PaperComparison) -> Table:
    """:func:`paper_rows` as a table (id "paper"); the ``paper`` macro adds the caveat of
    scale."""
    return Table(["quantity", "paper", "ours"], paper_rows(cmp), table_id="paper")
