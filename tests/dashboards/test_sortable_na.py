"""Sortable tables show an undefined number as ``n/a`` (the console's word), never a blank cell
(issue 23): the compare page's per-x means and the trial tables' nullable columns."""

from __future__ import annotations

import math
import re

import pandas as pd

from dashboards._html import Table, table_html
from dashboards.compare_page import mean_rows
from dashboards.sweep_page import trial_table


def _cells(html: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    return [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows[1:]]  # without the header


def test_the_means_table_shows_nan_as_na() -> None:
    means = pd.DataFrame(
        {
            "x": [1.0, 10.0],
            "mean_a": [1.5, math.nan],  # no trial of A at x = 10
            "sd_a": [math.nan, math.nan],  # one trial: no sd
            "n_a": [1, 0],
            "mean_b": [1.7, 2.0],
            "sd_b": [0.1, math.nan],
            "n_b": [2, 1],
            "delta": [0.2, math.nan],
        }
    )
    cells = _cells(table_html(Table(list(means.columns), mean_rows(means), sortable=True)))
    assert cells[0] == ["1", "1.5", "n/a", "1", "1.7", "0.1", "2", "0.2"]
    assert cells[1] == ["10", "n/a", "n/a", "0", "2", "n/a", "1", "n/a"]


def test_a_trial_tables_nullable_numbers_show_na() -> None:
    trials = pd.DataFrame(
        {
            "trial_key": ["a", "b"],
            "state": ["completed", "failed"],
            "pretrain.tokens": [1, 2],
            "acceptance_length": [1.5, math.nan],
            "steps": pd.array([10, None], dtype="Int64"),
            "error": [None, "boom"],
        }
    )
    cells = _cells(table_html(trial_table(trials, "pretrain.tokens", "acceptance_length")))
    assert cells[1][:5] == ["b", "failed", "2", "n/a", "n/a"]
    assert cells[1][-1] == "boom" and cells[0][-1] == ""  # no error: empty, not n/a
