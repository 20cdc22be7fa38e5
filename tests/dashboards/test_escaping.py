"""Every user string renders as text on every dashboard, in HTML and inside plotly figures.

Payloads go in as sweep names, variant names, axis (override) values, axis names, prompt-set
names, trial keys, hover data, section titles and error texts. A page passes when the raw
payloads are absent, their escaped forms are present (HTML entities in the page; in figure JSON
the entities plotly.js decodes for display), the page has no element or event attribute it did
not write itself, and every ``<script>`` is closed by its own ``</script>``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.review import review_law
from dashboards._html import plot_text
from dashboards.sweep_page import write_sweep_dashboard
from dashboards.tradeoff import depth_tradeoff_figure
from dashboards.variant_page import write_variant_dashboard
from tests.dashboards.test_decode_page import _roofline, _trials, _write

SCRIPT = "<script>alert(1)</script>"
IMG = '<img src=x onerror="alert(2)">'
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
ALLOWED_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "h2",
    "h3",
    "p",
    "div",
    "script",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "a",  # the pages' own link back to the index (a fixed href)
    "span",
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.opened = self.closed = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs |= {name for name, _ in attrs}
        self.opened += tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self.closed += tag == "script"


def _figure_strings(text: str) -> list[str]:
    """Every string in the data and layout of every ``Plotly.newPlot`` call (strict JSON)."""
    decoder = json.JSONDecoder()
    strings: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)

    start = 0
    while (at := text.find("Plotly.newPlot(", start)) >= 0:
        pos = at + len("Plotly.newPlot(")
        for _ in range(3):  # div id, data, layout
            while text[pos] in " \n\t,":
                pos += 1
            value, pos = decoder.raw_decode(text, pos)
            walk(value)
        start = pos
    return strings


def _assert_renders_as_text(
    text: str, *, in_figures: list[str], own_tags: frozenset[str] = frozenset()
) -> None:
    for raw in (SCRIPT, IMG, "alert(1)</script>", "<img"):
        assert raw not in text, raw
    assert ESCAPED_SCRIPT in text
    parser = _Tags()
    parser.feed(text)
    assert parser.tags <= ALLOWED_TAGS | own_tags, parser.tags - ALLOWED_TAGS - own_tags
    assert not {a for a in parser.attrs if a.startswith("on")}
    assert parser.opened == parser.closed == text.count("</script>")
    strings = _figure_strings(text)
    for payload in in_figures:
        assert any(plot_text(payload) in s for s in strings), payload
        assert not any(payload in s for s in strings), payload


def _sweep_trials(x: str = "pretrain.tokens", y: str = "acceptance_length") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "trial_key": [SCRIPT, "k2", "k3", "k4", "k5"],
            "state": ["completed"] * 4 + ["failed"],
            x: [1e3, 1e4, 1e5, 1e6, 1e7],
            "draft.layers": [1, 1, 2, 2, 3],
            "seed": [IMG, "0", "0", "0", "0"],
            "target.model": [IMG] * 5,
            y: [1.0, 1.1, 1.2, 1.3, None],
            f"acceptance_length/{SCRIPT}": [1.0, 1.1, 1.2, 1.3, None],
            "error": [None] * 4 + [f"RuntimeError: {SCRIPT} {IMG}"],
        }
    )


def test_sweep_page(tmp_path: Path) -> None:
    trials = _sweep_trials()
    review = review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")
    tradeoff = depth_tradeoff_figure(trials)
    assert tradeoff is not None
    out = write_sweep_dashboard(
        tmp_path / "d.html",
        sweep_name=SCRIPT,
        trials=trials,
        review=review,
        extra=[(IMG, tradeoff)],
    )
    # per-set legend name and hover data (trial key, seed)
    _assert_renders_as_text(out.read_text(encoding="utf-8"), in_figures=[SCRIPT, IMG])


def test_sweep_page_with_payload_axis_names(tmp_path: Path) -> None:
    x, y = f"x {SCRIPT}", f"y {IMG}"
    trials = _sweep_trials(x, y)
    review = review_law(trials, x, y, law="tokens")
    out = write_sweep_dashboard(
        tmp_path / "d.html", sweep_name="s", trials=trials, review=review, x=x, y=y
    )
    # axis titles and the fit form in the figure title
    _assert_renders_as_text(out.read_text(encoding="utf-8"), in_figures=[x, y])


def test_sweep_page_with_payload_in_a_failed_fit_status(tmp_path: Path) -> None:
    trials = _sweep_trials()
    review = review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")
    fit = replace(review.fit, status=f"not ok: {SCRIPT}")
    review = replace(review, fit=fit)
    out = write_sweep_dashboard(tmp_path / "d.html", sweep_name="s", trials=trials, review=review)
    _assert_renders_as_text(out.read_text(encoding="utf-8"), in_figures=[fit.status])


def test_tradeoff_axis_name(tmp_path: Path) -> None:
    trials = _sweep_trials().rename(columns={"draft.layers": SCRIPT})
    fig = depth_tradeoff_figure(trials, x=SCRIPT)
    assert fig is not None
    out = write_sweep_dashboard(
        tmp_path / "d.html", sweep_name="s", trials=trials, review=None, extra=[("t", fig)]
    )
    _assert_renders_as_text(out.read_text(encoding="utf-8"), in_figures=[SCRIPT])


def test_variant_page(tmp_path: Path) -> None:
    trials = _sweep_trials()
    trials["variant"] = [SCRIPT, SCRIPT, IMG, IMG, IMG]
    out = write_variant_dashboard(
        tmp_path / "v.html", sweep_name=SCRIPT, trials=trials, metrics=["draft.layers"]
    )
    # legend names (variants) and tick labels (per-set metric names)
    _assert_renders_as_text(
        out.read_text(encoding="utf-8"), in_figures=[SCRIPT, IMG, f"acceptance_length/{SCRIPT}"]
    )


@pytest.mark.parametrize("with_roofline", [True, False])
def test_decode_page(tmp_path: Path, with_roofline: bool) -> None:
    trials = _trials()
    trials.loc[trials["state"] == "failed", "error"] = f"RuntimeError: {SCRIPT} {IMG}"
    roofline = replace(_roofline(), hardware=IMG, note=SCRIPT) if with_roofline else None
    text = _write(tmp_path, trials, roofline=roofline, sweep_name=SCRIPT)
    _assert_renders_as_text(text, in_figures=[IMG] if with_roofline else [])


# -- the sweep's description (its spec's free text) on every page kind -----------------------------

DESCRIPTION = f"tokens & layers {SCRIPT}"
ESCAPED_DESCRIPTION = f"<p class='description'>tokens &amp; layers {ESCAPED_SCRIPT}</p>"


def _description_page(kind: str, tmp_path: Path) -> str:
    from analysis.eq4 import fit_k_opt
    from analysis.throughput import best_per_batch, fit_peak_throughput
    from dashboards.decode_page import write_decode_dashboard
    from dashboards.table_page import write_table_dashboard

    path = tmp_path / kind / "dashboard.html"
    trials = _sweep_trials()
    if kind == "law":
        review = review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")
        write_sweep_dashboard(
            path, sweep_name="s", trials=trials, review=review, description=DESCRIPTION
        )
    elif kind == "variants":
        trials["variant"] = ["a", "a", "b", "b", "b"]
        write_variant_dashboard(
            path, sweep_name="s", trials=trials, metrics=[], description=DESCRIPTION
        )
    elif kind == "throughput":
        decode = _trials()
        best = best_per_batch(decode)
        write_decode_dashboard(
            path,
            sweep_name="s",
            trials=decode,
            best=best,
            peak_fit=fit_peak_throughput(best),
            k_fit=fit_k_opt(best),
            roofline=None,
            description=DESCRIPTION,
        )
    else:
        write_table_dashboard(
            path,
            sweep_name="s",
            trials=trials,
            x="draft.layers",
            y="acceptance_length",
            description=DESCRIPTION,
        )
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", ["law", "variants", "throughput", "table"])
def test_description_is_shown_escaped_on_every_page_kind(tmp_path: Path, kind: str) -> None:
    text = _description_page(kind, tmp_path)
    assert ESCAPED_DESCRIPTION in text
    assert text.index("<h1>") < text.index(ESCAPED_DESCRIPTION)  # under the heading
    # trial keys in hover data (the law and table pages plot the trials themselves)
    _assert_renders_as_text(text, in_figures=[SCRIPT] if kind in ("law", "table") else [])


def test_description_in_the_index(tmp_path: Path) -> None:
    from dashboards.index_page import INDEX_COLUMNS, write_index

    row = dict.fromkeys(INDEX_COLUMNS, "") | {"sweep": "s", "description": DESCRIPTION}
    text = write_index(tmp_path / "index.html", pd.DataFrame([row])).read_text(encoding="utf-8")
    assert f"<td>tokens &amp; layers {ESCAPED_SCRIPT}</td>" in text
    _assert_renders_as_text(text, in_figures=[])


def test_an_empty_description_adds_nothing(tmp_path: Path) -> None:
    trials = _sweep_trials()
    out = write_sweep_dashboard(tmp_path / "d.html", sweep_name="s", trials=trials, review=None)
    assert "class='description'" not in out.read_text(encoding="utf-8")


# -- the templates: autoescaped, rendered once from complete data ---------------------------------


def test_a_script_in_the_sweep_name_and_description_renders_as_text_in_every_section(
    tmp_path: Path,
) -> None:
    """The law page with its closing sections (cost, design), every user string a payload:
    the Jinja2 environment escapes them all, plotly's HTML is the only markup let through."""
    from dashboards._html import Table
    from dashboards.cost_section import CostSection
    from dashboards.design_section import design_section

    trials = _sweep_trials()
    review = review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")
    cost = CostSection(
        hardware=IMG,
        made_at=SCRIPT,
        total=f"total {SCRIPT}",
        table=Table(["trial_key", "basis"], [[SCRIPT, IMG]], sortable=True, table_id="cost-table"),
    )
    stop = {"kind": "stop", "step": 1, "rank": 0, "spent_s": 60.0, "half_width": 0.1}
    design = design_section(
        [stop | {"stop": SCRIPT, "reason": IMG, "trial_key": SCRIPT}],
        axis=SCRIPT,
        goal=0.05,
        budget_h=1.0,
    )
    out = write_sweep_dashboard(
        tmp_path / "d.html",
        sweep_name=SCRIPT,
        trials=trials,
        review=review,
        description=DESCRIPTION,
        sections=[cost, design],
    )
    text = out.read_text(encoding="utf-8")
    assert f"<h1>Sweep {ESCAPED_SCRIPT}</h1>" in text and f"<title>Sweep {ESCAPED_SCRIPT}" in text
    assert ESCAPED_DESCRIPTION in text
    assert f"<h2 id='design'>Design: adaptive trials over {ESCAPED_SCRIPT}</h2>" in text
    assert f"Predicted at submit ({ESCAPED_SCRIPT}) on &lt;img" in text
    assert text.index("id='trials'") < text.index("id='cost'") < text.index("id='design'")
    assert text.count("plotly.js v") == 1  # inlined once, by the page's first figure
    own = frozenset({"code", "em"})  # the cost section's own words
    _assert_renders_as_text(text, in_figures=[SCRIPT, IMG], own_tags=own)


def test_the_compare_page_escapes_both_names_and_the_warning(tmp_path: Path) -> None:
    from markupsafe import escape

    from analysis.compare import per_x_means
    from analysis.transfer import factor_slope_difference, pooled_slope
    from dashboards.compare_page import write_compare_page

    trials = _sweep_trials()
    x, y = "pretrain.tokens", "acceptance_length"
    rev = review_law(trials, x, y, law="tokens")
    out = write_compare_page(
        tmp_path / "c.html",
        names=(SCRIPT, IMG),
        reviews=(rev, rev),
        x=x,
        y=y,
        means=per_x_means(trials, trials, x, y),
        slope_diff=factor_slope_difference(trials, trials, x, y, (SCRIPT, IMG)),
        pooled=pooled_slope({SCRIPT: trials, IMG: trials}, x, [f"{y}/{SCRIPT}"]),
        warning=f"other prompt sets: {SCRIPT}",
    )
    text = out.read_text(encoding="utf-8")
    assert f"<strong>other prompt sets: {ESCAPED_SCRIPT}</strong>" in text
    assert f"a({escape(IMG)}) - a({ESCAPED_SCRIPT})" in text  # the transfer table's names
    slopes = text.split("id='slopes'", 1)[1].split("</table>", 1)[0]
    assert slopes.count(f"<td>{ESCAPED_SCRIPT}</td>") == 3  # sweep A; the set in both rows
    names = [f"{SCRIPT}: trials", f"{IMG}: trials"]
    _assert_renders_as_text(text, in_figures=names, own_tags=frozenset({"strong"}))


def test_a_page_never_renders_from_incomplete_data() -> None:
    """StrictUndefined: a name the data lacks is an error, never an empty string."""
    from jinja2 import UndefinedError

    from dashboards._html import render

    with pytest.raises(UndefinedError):
        render("sweep.html.j2", title="s")
