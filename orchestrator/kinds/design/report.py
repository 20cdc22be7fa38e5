"""The Design section of an adaptive design's dashboard (a spec's ``design:``): every decision
the driver recorded (:mod:`orchestrator.store.decisions`) and the half-width against compute curve
(:mod:`dashboards.design_section`), gathered before the sweep's page is rendered.
"""

from __future__ import annotations

from dashboards.design_section import DesignSection, design_section
from orchestrator.reports._spec import spec_data
from orchestrator.store.results import ResultsStore


def design_data(store: ResultsStore, sweep_name: str) -> DesignSection | None:
    """The Design section of the sweep ``sweep_name``; None when it recorded no design
    decisions (or is not in the store)."""
    info = store.get_sweep(sweep_name)
    decisions = store.decisions(info.id) if info is not None else []
    if info is None or not decisions:
        return None
    raw = spec_data(info.spec_yaml).get("design")
    block = raw if isinstance(raw, dict) else {}
    return design_section(
        [d.as_json() for d in decisions],
        axis=str(block.get("axis", "")),
        goal=float(block.get("goal", float("nan"))),
        budget_h=float(block.get("budget_hours", float("nan"))),
    )
