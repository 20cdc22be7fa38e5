"""The index page over every sweep of a run root / results DB, linking each sweep's dashboard."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote, unquote

import pandas as pd

from dashboards._html import format_cell, page

INDEX_COLUMNS = (
    "sweep",
    "description",
    "workload",
    "trials",
    "completed",
    "failed",
    "other",
    "law",
    "a",
    "a_lo",
    "a_hi",
    "r2",
    "n",
    "updated",
)
"""columns of the index table, in order (``sweep`` becomes a link)"""


def dashboard_href(sweep: str) -> str:
    """Relative link from the index to a sweep's page: ``<sweep>/dashboard.html``, URL-quoted."""
    return quote(sweep, safe="") + "/dashboard.html"


def write_index(
    path: Path,
    sweeps: pd.DataFrame,
    *,
    title: str = "Sweeps",
    comparisons: Sequence[str] = (),
    plans: Sequence[str] = (),
) -> Path:
    """Write the index page (one HTML file, no script but the table sorter) and return it.

    ``sweeps`` has one row per sweep with :data:`INDEX_COLUMNS` (``description``: the spec's
    free text, escaped like every cell; ``a``, ``a_lo``, ``a_hi``, ``r2``: the sweep's main law
    fit, NaN without one; ``other``: pending, running or cancelled trials). The table (id
    "sweeps") sorts by any column; each name links to the sweep's page (:func:`dashboard_href`)
    when that page exists beside the index. ``comparisons`` are
    relative links to ``orchestrator compare`` pages, listed below the table; ``plans`` the
    same for ``orchestrator plan`` pages (``<plan>/plan.html``).
    """
    head = "".join(f"<th>{html.escape(c)}</th>" for c in INDEX_COLUMNS)
    body = []
    for row in sweeps.to_dict("records"):
        name = str(row["sweep"])
        href = dashboard_href(name)
        if (path.parent / unquote(href)).is_file():
            cells = [f"<td><a href='{html.escape(href)}'>{html.escape(name)}</a></td>"]
        else:  # e.g. `orchestrator report OTHER --out DIR`: this sweep's page is not in DIR
            cells = [f"<td>{html.escape(name)} <span class='note'>(no page here)</span></td>"]
        cells += [f"<td>{format_cell(row.get(c))}</td>" for c in INDEX_COLUMNS[1:]]
        body.append("<tr>" + "".join(cells) + "</tr>")
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='note'>{len(sweeps)} sweeps. a [a_lo, a_hi]: slope of the sweep's law with "
        "its 95% CI (HC3); click a header to sort.</p>",
        "<table class='sortable' id='sweeps'><thead><tr>"
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>",
    ]
    if comparisons:
        items = "".join(
            f"<li><a href='{html.escape(quote(c))}'>{html.escape(Path(c).stem)}</a></li>"
            for c in comparisons
        )
        parts += ["<h2>Comparisons</h2>", f"<ul>{items}</ul>"]
    if plans:
        items = "".join(
            f"<li><a href='{html.escape(quote(p))}'>{html.escape(Path(p).parent.name)}</a></li>"
            for p in plans
        )
        parts += ["<h2 id='plans'>Plans</h2>", f"<ul>{items}</ul>"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(title, parts), encoding="utf-8")
    return path
