"""``orchestrator compare``: two sweeps' laws on one page (points, fits, bands, tables), and
the rows of its "does the law transfer" tables, which the console prints too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.numbers import fmt, fmt_interval
from analysis.review import LawReview
from analysis.transfer import FactorSlopeDifference, PooledSlope
from dashboards._html import Table, plot_text, write_page
from dashboards.review_tables import paper_rows, review_rows
from dashboards.sweep_page import add_fit_line

COLOURS = ("214, 39, 40", "31, 119, 180")
"""sweep A red, sweep B blue"""


def side_by_side_rows(a: LawReview, b: LawReview) -> list[list[object]]:
    """(check, A, B) rows of both reviews, matched by check name (blank where one lacks it)."""
    ra = {str(r[0]): r[1] for r in review_rows(a)}
    rb = {str(r[0]): r[1] for r in review_rows(b)}
    names = list(ra) + [k for k in rb if k not in ra]
    rows: list[list[object]] = [[k, ra.get(k, ""), rb.get(k, "")] for k in names]
    if a.paper is not None and b.paper is not None:
        pa = {str(r[0]): r[2] for r in paper_rows(a.paper)}
        pb = {str(r[0]): r[2] for r in paper_rows(b.paper)}
        for k in ("slope ratio (ours / paper)", "our CI covers the paper's a"):
            rows.append([f"{k} [{a.paper.source}]", pa[k], pb[k]])
    return rows


def mean_rows(means: pd.DataFrame) -> list[list[object]]:
    """The rows of the per-x means table: an undefined number (the sd of one trial, a mean
    where a sweep has no trial at that x) stays NaN, which the table shows as ``n/a``."""
    return [
        [v.item() if isinstance(v, np.generic) else v for v in r]
        for r in means.itertuples(index=False)
    ]


TRANSFER_HEADERS = ("figure", "estimate", "95% CI", "detail", "reading")
STUDY_HEADERS = ("sweep", "prompt set", "slope a", "SE (HC3)", "n", "pooled")


def transfer_rows(
    names: tuple[str, str], diff: FactorSlopeDifference, pooled: PooledSlope
) -> list[list[str]]:
    """The rows (:data:`TRANSFER_HEADERS`) of the two transfer figures: the one-fit slope
    difference a(B) - a(A) and the random-effects pooled slope; a figure that could not be had
    shows its status as the reading."""
    label = f"slope difference a({names[1]}) - a({names[0]}), one fit with the sweep as a factor"
    if diff.ok:
        reading = "the slopes differ" if diff.excludes_zero else "no detectable difference"
        first = [
            label,
            fmt(diff.diff, "+.4g"),
            fmt_interval(diff.ci, "+.4g"),
            f"HC3, t with {fmt(diff.df, '.0f')} df, p {_p(diff.p)}; n = {diff.n[0]} + {diff.n[1]}",
            reading,
        ]
    else:
        first = [label, fmt(diff.diff, "+.4g"), "n/a", "", diff.status]
    label = "pooled slope, random effects (DerSimonian-Laird)"
    if pooled.ok:
        one = pooled.q_p >= 0.05
        second = [
            label,
            fmt(pooled.estimate, ".4g"),
            fmt_interval(pooled.ci, ".4g"),
            f"tau² = {fmt(pooled.tau2, '.2g')}, I² = {fmt(100 * pooled.i2, '.0f')}%, "
            f"Q = {fmt(pooled.q, '.3g')} (p {_p(pooled.q_p)}), {pooled.k} slopes",
            "no detectable spread between the slopes" if one else "the slopes spread beyond noise",
        ]
    else:
        second = [label, "n/a", "n/a", "", pooled.status]
    return [first, second]


def _p(p: float) -> str:
    """``= 0.031`` or ``< 1e-15`` (where a double's tail probability is no longer exact)."""
    return "< 1e-15" if 0 <= p < 1e-15 else f"= {fmt(p, '.2g')}"


def study_rows(pooled: PooledSlope, y: str) -> list[list[object]]:
    """The rows (:data:`STUDY_HEADERS`) of the slopes :func:`transfer_rows` pools: the prompt
    set is the column after ``<y>/`` ("all" for ``y`` itself)."""
    return [
        [
            s.group,
            s.y.removeprefix(f"{y}/") if s.y != y else "all",
            fmt(s.slope, ".4g"),
            fmt(s.se, ".3g"),
            s.n,
            "yes" if s.status == "ok" else s.status,
        ]
        for s in pooled.studies
    ]


def write_compare_page(
    path: Path,
    *,
    names: tuple[str, str],
    reviews: tuple[LawReview, LawReview],
    x: str,
    y: str,
    means: pd.DataFrame,
    slope_diff: FactorSlopeDifference,
    pooled: PooledSlope,
    warning: str = "",
) -> Path:
    """Write one self-contained page (plotly.js inlined): figure ``compare`` with both sweeps'
    fitted trials (``reviews[i].fit.x``/``y``), fitted lines and bands on a log x axis; the
    side-by-side table of fits and checks (id "side-by-side"); the transfer figures (id
    "transfer", :func:`transfer_rows`) and the slopes pooled (id "slopes"); mean ``y`` per
    ``x`` (id "means"). ``warning`` (e.g. the sweeps were measured on other prompt sets), when
    given, is shown escaped above the figure (id "warning")."""
    fig = go.Figure()
    for name, rev, rgb in zip(names, reviews, COLOURS, strict=True):
        fit = rev.fit
        fig.add_trace(
            go.Scatter(
                x=list(fit.x),
                y=list(fit.y),
                mode="markers",
                marker={"color": f"rgb({rgb})"},
                name=plot_text(f"{name}: trials"),
            )
        )
        if fit.ok:
            add_fit_line(fig, fit, plot_text(f"{name}: a = {fmt(fit.a)}"), rgb)
    fig.update_layout(
        title={"text": plot_text(f"{y} vs {x}: {names[0]} vs {names[1]}"), "font": {"size": 13}},
        xaxis={"type": "log", "title": {"text": plot_text(f"{x} (log scale)")}},
        yaxis={"title": {"text": plot_text(y)}},
        template="plotly_white",
        height=520,
    )
    return write_page(
        path,
        "compare.html.j2",
        title=f"{names[0]} vs {names[1]}",
        names=names,
        warning=warning,
        figure=fig,
        side_by_side=Table(
            ["check", names[0], names[1]], side_by_side_rows(*reviews), table_id="side-by-side"
        ),
        transfer=Table(
            TRANSFER_HEADERS, transfer_rows(names, slope_diff, pooled), table_id="transfer"
        ),
        slopes=Table(STUDY_HEADERS, study_rows(pooled, y), table_id="slopes"),
        x=x,
        y=y,
        means=Table(
            [x, f"mean {names[0]}", "sd", "n", f"mean {names[1]}", "sd", "n", "delta (B - A)"],
            mean_rows(means),
            sortable=True,
            table_id="means",
        ),
    )
