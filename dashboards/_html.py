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

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.error { color: #a00; white-space: pre-wrap; max-width: 40rem; }
p.note { color: #555; font-size: 0.85rem; }
"""


def format_cell(value: Any) -> str:
    """A table cell as escaped text: floats to 6 significant digits, NaN/None as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else html.escape(f"{value:.6g}")
    if isinstance(value, list | tuple):
        return html.escape("[" + ", ".join(_plain(v) for v in value) + "]")
    return html.escape(str(value))


def plot_text(value: Any) -> str:
    """``value`` as text for a plotly title, legend name, tick label or hover label: ``&``, ``<``
    and ``>`` escaped, so plotly.js shows ``<b>`` or ``<a href=...>`` in a user string as typed
    instead of rendering it (it decodes ``&amp;``, ``&lt;``, ``&gt;`` for display, but not
    ``&quot;``, so quotes stay as they are)."""
    return html.escape(str(value), quote=False)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, css: Sequence[str] = ()) -> str:
    """An HTML table; ``css`` gives an optional class per column (e.g. "error")."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            cls = f' class="{html.escape(css[i])}"' if i < len(css) and css[i] else ""
            cells.append(f"<td{cls}>{format_cell(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def page(title: str, parts: Iterable[str]) -> str:
    """A complete HTML document; ``title`` is escaped, ``parts`` are trusted HTML fragments."""
    t = html.escape(title)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{t}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def _plain(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    return f"{value:.6g}" if isinstance(value, float) else str(value)
