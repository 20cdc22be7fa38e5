"""Law fitting: pure functions over pandas tables (no torch, Ray or database imports)."""

from analysis.laws import PAPER_CONSTANTS, LogLinearFit, baseline_summary, fit_log_linear

__all__ = ["PAPER_CONSTANTS", "LogLinearFit", "baseline_summary", "fit_log_linear"]
