"""Self-contained plotly HTML dashboards built from result tables and fits."""

from dashboards.sweep_page import write_sweep_dashboard

__all__ = ["write_sweep_dashboard"]
