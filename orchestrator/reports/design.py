"""The Design section of an adaptive design's dashboard (a spec's ``design:``): every decision
the driver recorded (:mod:`orchestrator.store.design`) and the half-width against compute curve
(:mod:`dashboards.design_section`), put into the sweep's page after it is written.
"""

from __future__ import annotations

from pathlib import Path

from dashboards.design_section import END, SECTION_ID, design_section
from orchestrator.reports._spec import spec_data
from orchestrator.store.results import ResultsStore

_PLOTLY = "plotly.js v"
"""text of the inlined plotly.js bundle: a page that has it needs no second copy"""


def add_design_section(dashboard: Path, store: ResultsStore, sweep_name: str) -> bool:
    """Put the Design section into ``dashboard`` (before its closing script) when the sweep
    ``sweep_name`` recorded design decisions; returns whether it did. A section already there
    is replaced."""
    info = store.get_sweep(sweep_name)
    decisions = store.decisions(info.id) if info is not None else []
    if info is None or not decisions or not dashboard.exists():
        return False
    raw = spec_data(info.spec_yaml).get("design")
    block = raw if isinstance(raw, dict) else {}
    text = dashboard.read_text(encoding="utf-8")
    start = text.find(f"<h2 id='{SECTION_ID}'>")
    if start >= 0:  # an earlier section (a refit): cut it out
        end = text.find(END, start)
        text = text[:start] + text[end + len(END) :] if end >= 0 else text
    at = text.rfind("<script>")
    if at < 0:
        return False
    section = design_section(
        [d.as_json() for d in decisions],
        axis=str(block.get("axis", "")),
        goal=float(block.get("goal", float("nan"))),
        budget_h=float(block.get("budget_hours", float("nan"))),
        plotly_js=_PLOTLY not in text,
    )
    dashboard.write_text(text[:at] + section + "\n" + text[at:], encoding="utf-8")
    return True
