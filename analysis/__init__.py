"""Law fitting: pure functions over pandas tables (no torch, Ray or database imports).

The submodules are imported where used (``from analysis.laws import fit_log_linear``): this
package's ``__init__`` imports nothing, so reading :mod:`analysis.numbers` does not load
statsmodels.
"""
