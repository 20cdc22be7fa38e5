"""The pages' one Jinja2 environment, the table data its macro draws, and the text helpers.

Every page is a template under ``dashboards/templates/`` rendered once, from complete data, by
:func:`write_page`. Templates are autoescaped: every user string (sweep names, descriptions,
trial keys, overrides, error texts) renders as text. Only plotly's own HTML goes in unescaped
(``plotly(fig, div_id)`` in a template, :class:`_Plotly`). Strings put into plotly figures
(titles, legend names, tick labels, hover text) go through :func:`plot_text`. Why this is
enough: docs/analysis.md.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from analysis.numbers import NA, fmt

if TYPE_CHECKING:
    import plotly.graph_objects as go

RANDOM_WEIGHTS = "target.random_weights"
"""metric a trial sets to 1 when its target had random weights (``target.weights: random``)"""


class Labels(tuple[str, ...]):
    """A table cell of extrapolation labels (the plan page): each shown as a warning, or
    "within the measured range" when there are none."""


class Section(Protocol):
    """A section at the end of a sweep's page (the cost, the design): its data, given to
    its template as ``section``."""

    @property
    def template(self) -> str:
        """the section's template under ``dashboards/templates/``"""
        ...


@dataclass(frozen=True)
class Table:
    """A table for the ``table`` macro (``templates/_macros.html.j2``).

    ``rows`` hold values, shown by :func:`cell_text`; ``css`` gives an optional class per
    column (``"error"``: text, where an undefined value is empty, not ``n/a``). A ``sortable``
    table sorts by a column when its header is clicked (the script of ``base.html.j2``).
    """

    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    css: Sequence[str] = ()
    sortable: bool = False
    table_id: str | None = None

    def body(self) -> list[list[tuple[str, Any]]]:
        """The rows as (class, shown value) cells."""
        out = []
        for row in self.rows:
            cells = []
            for i, v in enumerate(row):
                kind = self.css[i] if i < len(self.css) else ""
                cells.append((kind, cell_text(v, missing="" if kind == "error" else NA)))
            out.append(cells)
        return out


def cell_text(value: Any, *, missing: str = NA) -> Any:
    """A table cell's text: floats to 6 significant digits; NaN as ``missing`` (``n/a``); None
    as empty; :class:`Labels` as they are (the macro draws them)."""
    if value is None:
        return ""
    if isinstance(value, Labels):
        return value
    if isinstance(value, float):
        return missing if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    return str(value)


def frame_rows(frame: Any) -> list[list[Any]]:
    """The rows of a pandas frame as plain values for a :class:`Table`: numpy scalars as Python
    ones, ``pd.NA`` (a nullable number left undefined) as NaN, shown ``n/a``, and ``pd.NaT`` as
    None, shown empty."""
    return [[_table_value(v) for v in row] for row in frame.itertuples(index=False)]


def trials_table(trials: Any, columns: Sequence[Any]) -> Table:
    """A page's sortable trials table (id ``trials``) of ``columns`` of the trial frame
    ``trials``, an ``error`` column drawn as text."""
    css = ["error" if c == "error" else "" for c in columns]
    rows = frame_rows(trials[list(columns)])
    return Table([str(c) for c in columns], rows, css=css, sortable=True, table_id="trials")


def _table_value(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if value is pd.NA:
        return math.nan
    if value is pd.NaT:
        return None
    return value


def shown(value: Any) -> Any:
    """A fit's field as the console prints it: a number through :func:`analysis.numbers.fmt`
    (``.6g``; ``n/a`` when undefined), a tuple of numbers as ``[lo, hi]``; text as it is."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(shown(v)) for v in value) + "]"
    if value is None or isinstance(value, int | float):
        return fmt(value, ".6g")
    return value


def random_weight_trials(trials: Any) -> int:
    """How many trials of ``trials`` (a trial table) ran a target with random weights: their
    throughput and memory are real, their acceptance is meaningless (the page warns)."""
    col = trials.get(RANDOM_WEIGHTS) if hasattr(trials, "get") else None
    return 0 if col is None else int((col.fillna(0) == 1).sum())


def greedy_check(trials: Any) -> dict[str, int] | None:
    """The losslessness headline of a trial table: ``mismatches`` (greedy divergences that are
    bugs) and ``near_ties`` (divergences excused by the dtype's near-tie rule) summed over its
    trials; None when no trial reports them (sampling, a diagnostic workload)."""
    if not hasattr(trials, "get") or trials.get("mismatches") is None:
        return None
    mism = trials["mismatches"].dropna()
    if mism.empty:
        return None
    ties = trials.get("near_ties")
    return {
        "mismatches": int(mism.sum()),
        "near_ties": 0 if ties is None else int(ties.fillna(0).sum()),
        "trials": len(mism),
    }


def plot_text(value: Any) -> str:
    """``value`` as text for a plotly title, legend name, tick label or hover label: ``&``, ``<``
    and ``>`` escaped (quotes are not), so plotly.js shows a user string as typed."""
    return html.escape(str(value), quote=False)


class _Plotly:
    """``plotly(fig, div_id)`` in a template: the figure's HTML, plotly.js inlined with the
    page's first figure only (the page works offline, no CDN)."""

    def __init__(self) -> None:
        self.inlined = False

    def __call__(self, fig: go.Figure, div_id: str) -> Markup:
        out = fig.to_html(full_html=False, include_plotlyjs=not self.inlined, div_id=div_id)
        self.inlined = True
        return Markup(out)


ENV = Environment(
    loader=PackageLoader("dashboards", "templates"),
    autoescape=select_autoescape(
        enabled_extensions=("html.j2",), disabled_extensions=("css", "js"), default=True
    ),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
"""the one environment of every page: autoescaped, an undefined name is an error"""
ENV.tests["labels"] = lambda value: isinstance(value, Labels)


def render(template: str, **data: Any) -> str:
    """``template`` rendered once from ``data`` (plus ``plotly``, see :class:`_Plotly`)."""
    return ENV.get_template(template).render(plotly=_Plotly(), **data)


def write_page(path: Path, template: str, **data: Any) -> Path:
    """Render ``template`` from ``data`` (:func:`render`) to ``path`` (folders made); return it."""
    text = render(template, **data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def table_html(table: Table) -> str:
    """``table`` as a page draws it (the ``table`` macro)."""
    return str(ENV.get_template("_macros.html.j2").module.table(table))  # type: ignore[attr-defined]


def _plain(value: Any) -> str:
    if value is None or isinstance(value, float):
        return fmt(value, ".6g")
    return str(value)
