"""Limits every spec block shares (the grid's and a search's), importable without the loader."""

MAX_TRIALS = 10_000
"""a larger grid needs an explicit confirmation (``submit --yes``); a search runs at most this"""
