"""Rows of the sweep index (``dashboards.index_page``) from the results store."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from analysis.laws import LogLinearFit
from dashboards.index_page import INDEX_COLUMNS, write_index
from orchestrator.reports._spec import spec_description
from orchestrator.store.results import ResultsStore


def index_frame(
    store: ResultsStore, fresh: Mapping[str, LogLinearFit | None] | None = None
) -> pd.DataFrame:
    """One row per sweep in the store (:data:`dashboards.index_page.INDEX_COLUMNS`).

    The law columns come from ``fresh[sweep]`` when given (a fit just made), else from the
    sweep's stored fits (the first by law name); NaN when it has none.
    """
    rows = []
    for info in store.list_sweeps():
        states = Counter(t.state for t in store.trials(info.id))
        row: dict[str, object] = {
            "sweep": info.name,
            "description": spec_description(info.spec_yaml),
            "workload": info.workload,
            "trials": sum(states.values()),
            "completed": states.get("completed", 0),
            "failed": states.get("failed", 0),
            "other": sum(states.values()) - states.get("completed", 0) - states.get("failed", 0),
            "updated": info.updated_at.strftime("%Y-%m-%d %H:%M UTC"),
        }
        nan = math.nan
        row.update({"law": "", "a": nan, "a_lo": nan, "a_hi": nan, "r2": nan, "n": 0})
        fit = (fresh or {}).get(info.name)
        if fit is not None:
            row.update(law=fit.law, a=fit.a, a_lo=fit.a_ci[0], a_hi=fit.a_ci[1], r2=fit.r2, n=fit.n)
        elif info.name not in (fresh or {}):
            stored = store.fits(info.id)
            if stored:
                f = stored[0]
                row.update({k: f[k] for k in ("law", "a", "a_lo", "a_hi", "r2", "n")})
        rows.append(row)
    return pd.DataFrame(rows, columns=list(INDEX_COLUMNS))


def write_run_index(
    store: ResultsStore, out_dir: Path, fresh: Mapping[str, LogLinearFit | None] | None = None
) -> Path:
    """Write ``out_dir/index.html`` over every sweep in ``store`` (and the compare pages under
    ``out_dir/compare/``, the plan pages ``out_dir/<plan>/plan.html``) and return its path."""
    pages = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.glob("compare/*.html"))
    plans = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.glob("*/plan.html"))
    return write_index(
        out_dir / "index.html",
        index_frame(store, fresh),
        title="Sweeps",
        comparisons=pages,
        plans=plans,
    )
