"""HTML helpers for the dashboards: escaped cells, tables and the page shell.

Every user string (sweep names, trial keys, overrides, error texts) goes through
:func:`html.escape` here, so a page never carries markup it did not write itself. Strings put
into plotly figures (titles, legend names, tick labels, hover text) go through :func:`plot_text`:
plotly.js renders a subset of HTML in them. plotly.py writes figure JSON with ``<``, ``>`` and
``/`` as ``\u003c``, ``\u003e``, ``\u002f``, so no string can close the ``<script>`` it sits in.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

from analysis.numbers import NA, fmt

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.error { color: #a00; white-space: pre-wrap; max-width: 40rem; }
p.note { color: #555; font-size: 0.85rem; }
p.description { font-size: 1rem; margin-top: -0.5rem; white-space: pre-wrap; }
div.scroll { overflow-x: auto; max-width: 100%; }
table.sortable th { cursor: pointer; }
table.sortable th[aria-sort=ascending]::after { content: " \\25B2"; }
table.sortable th[aria-sort=descending]::after { content: " \\25BC"; }
"""

_SORT_JS = """
document.querySelectorAll("table.sortable").forEach(function (tbl) {
  tbl.querySelectorAll("thead th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      tbl.querySelectorAll("thead th").forEach(function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var body = tbl.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (r) {
        var k = r.cells[col] ? r.cells[col].textContent.trim() : "";
        return k === "n/a" ? "" : k;  // an undefined number sorts with the blanks
      };
      var numeric = rows.every(function (r) {
        var k = key(r);
        return k === "" || !isNaN(Number(k));
      });
      rows.sort(function (ra, rb) {
        var a = key(ra), b = key(rb);
        if (a === "" || b === "") { return (a === "") - (b === ""); }  // blanks last
        var d = numeric ? Number(a) - Number(b) : a.localeCompare(b, undefined, {numeric: true});
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""
"""sorts a ``table.sortable`` by the clicked column (numbers numerically, blanks and ``n/a``
last)"""


class Html(str):
    """Cell text that is already HTML (built from escaped parts): :func:`format_cell` keeps it
    as it is instead of escaping it a second time."""


def format_cell(value: Any, *, missing: str = NA) -> str:
    """A table cell as escaped text: floats to 6 significant digits; NaN (a number undefined
    for the row: ``mismatches`` when sampling, a metric a trial does not report, a fit without
    a slope) as ``missing`` (``n/a``, the console's word); None (no value at all) as empty."""
    if value is None:
        return ""
    if isinstance(value, Html):
        return str(value)
    if isinstance(value, float):
        return html.escape(missing) if math.isnan(value) else html.escape(f"{value:.6g}")
    if isinstance(value, list | tuple):
        return html.escape("[" + ", ".join(_plain(v) for v in value) + "]")
    return html.escape(str(value))


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


def description_html(text: str | None) -> str:
    """A sweep's ``description`` (its spec's free text) as an escaped paragraph, placed under
    the page's heading; empty when there is none."""
    if not text or not str(text).strip():
        return ""
    return f"<p class='description'>{html.escape(str(text).strip())}</p>"


RANDOM_WEIGHTS = "target.random_weights"
"""metric a trial sets to 1 when its target had random weights (``target.weights: random``)"""


def random_weights_html(trials: Any) -> str:
    """A warning paragraph when any trial of ``trials`` (a trial table) ran a target with
    random weights: its throughput and memory are real, its acceptance is meaningless."""
    col = trials.get(RANDOM_WEIGHTS) if hasattr(trials, "get") else None
    if col is None or not bool((col.fillna(0) == 1).any()):
        return ""
    n = int((col.fillna(0) == 1).sum())
    return (
        "<p class='description'><strong>Random-weight target</strong> in "
        f"{n} trial{'s' if n != 1 else ''} (<code>target.weights: random</code>): throughput "
        "and memory are real; acceptance length and the laws fitted on it are meaningless.</p>"
    )


def plot_text(value: Any) -> str:
    """``value`` as text for a plotly title, legend name, tick label or hover label: ``&``, ``<``
    and ``>`` escaped, so plotly.js shows ``<b>`` or ``<a href=...>`` in a user string as typed
    instead of rendering it (it decodes ``&amp;``, ``&lt;``, ``&gt;`` for display, but not
    ``&quot;``, so quotes stay as they are)."""
    return html.escape(str(value), quote=False)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    css: Sequence[str] = (),
    sortable: bool = False,
    table_id: str | None = None,
) -> str:
    """An HTML table; ``css`` gives an optional class per column (e.g. "error"). A ``sortable``
    table sorts by a column when its header is clicked (script in :func:`page`). An undefined
    number is ``n/a`` (:func:`format_cell`), except in an "error" column (text: empty)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            kind = css[i] if i < len(css) else ""
            cls = f' class="{html.escape(kind)}"' if kind else ""
            cells.append(f"<td{cls}>{format_cell(v, missing='' if kind == 'error' else NA)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    attrs = (" class='sortable'" if sortable else "") + (
        f" id='{html.escape(table_id)}'" if table_id else ""
    )
    html_table = (
        f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )
    return f"<div class='scroll'>{html_table}</div>" if sortable else html_table


def page(title: str, parts: Iterable[str]) -> str:
    """A complete HTML document; ``title`` is escaped, ``parts`` are trusted HTML fragments."""
    t = html.escape(title)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        "<meta name='generator' content='specscale'>"
        f"<title>{t}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(parts)
        + f"\n<script>{_SORT_JS}</script>\n</body></html>\n"
    )


def _plain(value: Any) -> str:
    if value is None or isinstance(value, float):
        return fmt(value, ".6g")
    return str(value)
