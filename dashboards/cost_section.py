"""The Cost section of a sweep's page: the cost predicted at submit beside the measured seconds.

The section is data (:class:`CostSection`, built by :mod:`orchestrator.cost.report`);
``templates/_cost.html.j2`` draws it at the end of the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboards._html import Table


@dataclass(frozen=True)
class CostSection:
    """Predicted against measured seconds, per trial and stage (template ``_cost.html.j2``)."""

    hardware: str
    """the hardware the prediction was made for"""
    made_at: str
    """when the prediction was made (ISO 8601, UTC)"""
    total: str
    """the sum over the completed trials with a prediction, as one sentence"""
    table: Table
    """one row per trial with a prediction (id ``cost-table``)"""
    template: str = field(default="_cost.html.j2", init=False)
