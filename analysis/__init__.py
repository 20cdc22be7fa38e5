"""Law fitting: pure functions over pandas tables (no torch, Ray or database imports)."""

from analysis.laws import LogLinearFit, baseline_summary, fit_log_linear
from analysis.paper import PAPER_CONSTANTS

__all__ = ["PAPER_CONSTANTS", "LogLinearFit", "baseline_summary", "fit_log_linear"]
