"""The index page over every sweep of a run root / results DB, linking each sweep's dashboard."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote, unquote

import pandas as pd

from dashboards._html import cell_text, write_page

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
    rows = []
    for row in sweeps.to_dict("records"):
        name = str(row["sweep"])
        href = dashboard_href(name)
        # without its page beside the index (`orchestrator report OTHER --out DIR`): no link
        rows.append(
            {
                "name": name,
                "href": href if (path.parent / unquote(href)).is_file() else None,
                "cells": [cell_text(row.get(c)) for c in INDEX_COLUMNS[1:]],
            }
        )
    return write_page(
        path,
        "index.html.j2",
        title=title,
        columns=INDEX_COLUMNS,
        sweeps=rows,
        comparisons=[(quote(c), Path(c).stem) for c in comparisons],
        plans=[(quote(p), Path(p).parent.name) for p in plans],
    )
