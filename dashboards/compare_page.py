"""``orchestrator compare``: two sweeps' laws on one page (points, fits, bands, tables)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from analysis.compare import SlopeDifference
from analysis.numbers import fmt
from analysis.review import LawReview
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


def write_compare_page(
    path: Path,
    *,
    names: tuple[str, str],
    reviews: tuple[LawReview, LawReview],
    x: str,
    y: str,
    means: pd.DataFrame,
    slope_diff: SlopeDifference,
    warning: str = "",
) -> Path:
    """Write one self-contained page (plotly.js inlined): figure ``compare`` with both sweeps'
    fitted trials (``reviews[i].fit.x``/``y``), fitted lines and bands on a log x axis; the
    side-by-side table of fits and checks (id "side-by-side"); the slope difference; mean ``y``
    per ``x`` (id "means"). ``warning`` (e.g. the sweeps were measured on other prompt sets),
    when given, is shown escaped above the figure (id "warning")."""
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
    sd = slope_diff
    diff_text = (
        f"a({names[1]}) - a({names[0]}) = {fmt(sd.diff, '+.4g')}, 95% CI "
        f"[{fmt(sd.lo, '+.4g')}, {fmt(sd.hi, '+.4g')}] "
        f"(HC3 errors, t with {fmt(sd.df, '.0f')} df): "
        + ("the slopes differ." if sd.excludes_zero else "no detectable difference in slope.")
        if sd.status == "ok"
        else sd.status
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
        slope_difference=diff_text,
        x=x,
        y=y,
        means=Table(
            [x, f"mean {names[0]}", "sd", "n", f"mean {names[1]}", "sd", "n", "delta (B - A)"],
            mean_rows(means),
            sortable=True,
            table_id="means",
        ),
    )
