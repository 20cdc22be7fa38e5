"""The dashboards in a real browser (headless Chromium): ``orchestrator report`` over a SQLite
results DB writes the index and one page per sweep; each page must load without console errors
or uncaught exceptions, request nothing but local files, plot exactly the DB's numbers, sort its
tables, and the index must link every sweep's page.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.review import review_law
from analysis.throughput import throughput_surface
from dashboards.sweep_page import LOSS_SERIES, write_sweep_dashboard
from orchestrator.reports.decode import decode_frame
from orchestrator.store.results import ResultsStore
from tests import browser as browser_helper
from tests.browser import chromium, evaluate, open_page, plot_data
from tests.dashboards import test_decode_page, test_sweep_page
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.draft_train.config import DraftTrainConfig

ROOT = Path(__file__).resolve().parents[2]

TOKENS, LAYERS, DECODE = "tokens-a", "layers-b", "decode.c_1"
"""the three sweeps of the DB: Thm 1.1 over tokens, Thm 1.2 over layers, a decode_bench sweep"""

LAW_X = {TOKENS: "pretrain.tokens", LAYERS: "draft.layers"}
"""draft_train sweep -> the x of its law (its grid axis)"""

XSS = "<script>alert(1)</script>"


# -- the results DB --------------------------------------------------------------------------------


def _noise(i: int) -> float:
    """A fixed, uneven wiggle (so residuals are not all zero)."""
    return 0.013 * ((i * 7) % 5 - 2) + 0.004 * (i % 3)


def _add_tokens_sweep(store: ResultsStore) -> None:
    spec = f"name: {TOKENS}\ngrid:\n  pretrain.tokens: [0, 1000, 3000, 10000, 30000, 100000]\n"
    sweep_id = store.upsert_sweep(TOKENS, "draft_train", spec, "tokens-a.yaml")
    cfg = DraftTrainConfig().model_dump(mode="json")
    grid = [(t, s) for t in (0, 1000, 3000, 10000, 30000, 100000) for s in (0, 1)]
    grid += [(1_000_000, 0), (1_000_000, 1)]  # failed, cancelled
    store.add_trials(
        sweep_id,
        [(f"tok{i:02d}", cfg, {"pretrain.tokens": t, "seed": s}) for i, (t, s) in enumerate(grid)],
    )
    for i, t in enumerate(store.trials(sweep_id)):
        tokens = t.overrides["pretrain.tokens"]
        sft = [2.5 * 0.93**step + 0.01 * (i % 4) for step in range(6)]
        if tokens == 1_000_000:
            if t.overrides["seed"] == 0:  # died in pretraining: a partial loss curve
                store.log_metric_series(t.id, "pretrain/loss", [3.1, 2.9, 2.8])
                store.mark_failed(t.id, f"RuntimeError: {XSS} <img src=x onerror=alert(2)>", 1.0)
            else:
                store.mark_cancelled(t.id)
            continue
        tau = 1.02 + 0.01 * (i % 2) if tokens == 0 else 0.05 * math.log10(tokens) + 0.9 + _noise(i)
        store.log_metrics(
            t.id,
            {
                "acceptance_length": tau,
                "acceptance_length/humaneval": tau + 0.02,
                "acceptance_length/sharegpt": tau - 0.02,
            },
        )
        if tokens:
            steps = 4 + i // 2
            pre = [3.0 * 0.9**step + 0.001 * i for step in range(steps)]
            if i == 5:
                pre[2] = math.nan  # a diverged step: stored as NaN, drawn as a gap
            store.log_metric_series(t.id, "pretrain/loss", pre)
        store.log_metric_series(t.id, "sft/loss", sft)
        store.mark_completed(t.id, 1.0)


def _add_layers_sweep(store: ResultsStore) -> None:
    spec = f"name: {LAYERS}\ngrid:\n  draft.layers: [1, 2, 3, 5]\n"
    sweep_id = store.upsert_sweep(LAYERS, "draft_train", spec, "layers-b.yaml")
    cfg = DraftTrainConfig().model_dump(mode="json")
    grid = [(n, s) for n in (1, 2, 3, 5) for s in (0, 1)]
    store.add_trials(
        sweep_id,
        [(f"lay{i:02d}", cfg, {"draft.layers": n, "seed": s}) for i, (n, s) in enumerate(grid)],
    )
    for i, t in enumerate(store.trials(sweep_id)):
        layers = t.overrides["draft.layers"]
        tau = 0.3 * math.log10(layers) + 1.4 + _noise(i)
        store.log_metrics(
            t.id,
            {"acceptance_length": tau, "speedup": tau / (1 + 0.1 * layers),
             "draft.ms_per_step": 5.0 * layers},
        )  # fmt: skip
        store.mark_completed(t.id, 1.0)


def _add_decode_sweep(store: ResultsStore) -> None:
    sweep_id = store.upsert_sweep(DECODE, "decode_bench", f"name: {DECODE}\n", "decode.yaml")
    cells = [(b, k, s) for b in (1, 2, 4, 8) for k in (2, 4, 8) for s in (0, 1)] + [(16, 8, 0)]
    rows = []
    for b, k, s in cells:
        cfg = DecodeBenchConfig.model_validate(
            {"seed": s, "decode": {"batch_size": b, "num_draft_tokens": k}}
        ).model_dump(mode="json")
        overrides = {"decode.batch_size": b, "decode.num_draft_tokens": k, "seed": s}
        rows.append((f"b{b}k{k}s{s}", cfg, overrides))
    store.add_trials(sweep_id, rows)
    for i, t in enumerate(store.trials(sweep_id)):
        b, k = t.overrides["decode.batch_size"], t.overrides["decode.num_draft_tokens"]
        if b == 16:
            store.mark_failed(t.id, "ValueError: device 'cuda' asked for but no GPU", 1.0)
            continue
        tps = 20 * math.log2(b) + 8 - (0 if k == 4 else 1) + 0.5 * (i % 2)
        ar = 10.0 * b**0.5
        store.log_metrics(
            t.id,
            {
                "tokens_per_s": tps, "ar_tokens_per_s": ar, "speedup": tps / ar,
                "hf_tokens_per_s": 10.0 if b == 1 else math.nan, "acceptance_length": 1.3,
                "draft_s_per_cycle": 0.01, "verify_s_per_cycle": 0.05,
                "bookkeeping_s_per_cycle": 0.005, "break_even_acceptance_length": 1.9,
                "hw.peak_flops": 1e11, "hw.bandwidth": 4e10, "prompt_tokens_mean": 100.0,
                "depth_used": float(min(4, k - 1)),
            },
        )  # fmt: skip
        store.mark_completed(t.id, 1.0)


class Reported:
    """The DB and the pages ``orchestrator report`` wrote from it."""

    def __init__(self, store: ResultsStore, out: Path) -> None:
        self.store = store
        self.out = out

    def sweep_id(self, name: str) -> int:
        info = self.store.get_sweep(name)
        assert info is not None
        return info.id

    def url(self, name: str | None = None) -> str:
        path = self.out / "index.html" if name is None else self.out / name / "dashboard.html"
        assert path.is_file(), path
        return path.as_uri()


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> Reported:
    run_root = tmp_path_factory.mktemp("run")
    store = ResultsStore.sqlite_under(run_root)
    _add_tokens_sweep(store)
    _add_layers_sweep(store)
    _add_decode_sweep(store)
    out = run_root / "pages"
    env = {k: v for k, v in os.environ.items() if k != "SPECSCALE_DB_URL"}  # the run root's DB
    res = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", "--run-root", str(run_root),
         "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "(3 pages in" in " ".join(res.stdout.split()), res.stdout  # rich wraps long lines
    return Reported(store, out)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as context:
        yield context


@pytest.fixture(scope="module")
def opened(reported: Reported, browser: Any) -> Iterator[Any]:
    """``opened(sweep)``: the sweep's page and its log, loaded once per module (each load
    parses the inlined plotly.js, about 2 s here)."""
    cache: dict[str, tuple[Any, Any]] = {}

    def get(sweep: str) -> tuple[Any, Any]:
        if sweep not in cache:
            cache[sweep] = open_page(browser, reported.url(sweep))
        return cache[sweep]

    yield get
    for page, _ in cache.values():
        page.close()


def _clean(log: Any) -> None:
    """No console error, uncaught exception, failed request, dialog or non-local request."""
    assert log.errors == [], log.errors
    assert log.failed_requests == [], log.failed_requests
    assert log.dialogs == [], log.dialogs
    assert log.non_local_requests() == [], log.non_local_requests()
    assert log.requests, "the page was never requested"


def _none_for_nan(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def _close(page_values: list[Any], expected: list[float | None], tol: float = 1e-6) -> bool:
    """Equal up to ``tol`` (the pages round to 6 decimals), None exactly where NaN."""
    if len(page_values) != len(expected):
        return False
    for got, want in zip(page_values, expected, strict=True):
        if (got is None) != (want is None):
            return False
        if want is not None and abs(got - want) > tol:
            return False
    return True


def _trace(traces: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [t for t in traces if t["name"] == name]
    assert len(found) == 1, [t["name"] for t in traces]
    return found[0]


def test_without_chromium_the_browser_tests_fail_unless_told_to_skip(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(browser_helper, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv(browser_helper.NO_BROWSER_ENV, raising=False)
    with pytest.raises(pytest.fail.Exception, match="make test"):
        browser_helper.require_chromium()
    monkeypatch.setenv(browser_helper.NO_BROWSER_ENV, "1")
    with pytest.raises(pytest.skip.Exception):
        browser_helper.require_chromium()


def test_the_helper_sees_errors_dialogs_and_remote_requests(tmp_path: Path, browser: Any) -> None:
    """The checks below would catch a broken page: a console error, an exception, an alert and
    a script from a CDN (which fails here: tests have no network) are all recorded."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<html><body><script>console.error('boom-console');</script>"
        "<script src='https://cdn.example.invalid/plotly.min.js'></script>"
        "<script>alert('hi'); undefinedFunction();</script></body></html>"
    )
    page, log = open_page(browser, bad.as_uri())
    try:
        assert any("boom-console" in e.text for e in log.console_errors)
        assert any("undefinedFunction" in e for e in log.page_errors)
        assert log.dialogs == ["hi"]
        assert log.non_local_requests() == ["https://cdn.example.invalid/plotly.min.js"]
        with pytest.raises(AssertionError):
            _clean(log)
    finally:
        page.close()


# -- each draft_train page loads cleanly, offline, and plots the DB's numbers ----------------------


@pytest.mark.parametrize("sweep", [TOKENS, LAYERS])
def test_law_page_plots_the_db_values(reported: Reported, opened: Any, sweep: str) -> None:
    page, log = opened(sweep)
    x_name = LAW_X[sweep]
    df = reported.store.metrics_frame(reported.sweep_id(sweep))
    done = df[(df["state"] == "completed") & (df[x_name] > 0)]
    done = done[np.isfinite(done["acceptance_length"])]
    xs = done[x_name].astype(float).tolist()
    ys = done["acceptance_length"].tolist()

    # the trial points: every completed trial at x > 0, exactly the stored values, in order
    fit_traces = plot_data(page, "fit")
    assert fit_traces is not None
    points = _trace(fit_traces, "trials")
    assert points["x"] == xs and points["y"] == ys

    # the law, fitted here by plain least squares on log10(x)
    a, b = np.polyfit(np.log10(xs), ys, 1)
    line = _trace(fit_traces, "fit: a*log10(x) + b")
    assert _close(line["y"], [a * math.log10(v) + b for v in line["x"]])
    assert min(line["x"]) == min(xs) and max(line["x"]) == max(xs)

    # residuals: y - fitted for each fitted trial
    residuals = plot_data(page, "residuals")
    assert residuals is not None
    res = _trace(residuals, "residual")
    want = sorted((x, y - (a * math.log10(x) + b)) for x, y in zip(xs, ys, strict=True))
    got = sorted(zip(res["x"], res["y"], strict=True))
    assert [g[0] for g in got] == [w[0] for w in want]
    assert _close([g[1] for g in got], [w[1] for w in want])

    # the table lists every trial of the DB
    keys = _column(page, "trials", "trial_key")["cells"]
    assert sorted(keys) == sorted(df["trial_key"])
    _clean(log)


def test_loss_curves_are_the_db_series(reported: Reported, opened: Any) -> None:
    sweep_id = reported.sweep_id(TOKENS)
    series = reported.store.sweep_series(sweep_id, list(LOSS_SERIES))
    assert any("pretrain/loss" in s for s in series.values())
    page, log = opened(TOKENS)
    traces = plot_data(page, "loss")
    assert traces is not None
    panel_of = {"x": "pretrain/loss", "x2": "sft/loss"}  # panels in LOSS_SERIES order
    drawn = {(t["legendgroup"], panel_of[t["xaxis"]]): t for t in traces}
    expected = {(k, name): v for k, s in series.items() for name, v in s.items()}
    assert set(drawn) == set(expected)
    for (key, name), values in expected.items():
        trace = drawn[(key, name)]
        assert trace["x"] == list(range(1, len(values) + 1)), (key, name)
        assert _close(trace["y"], _none_for_nan(values)), (key, name, trace["y"], values)
    assert any(None in t["y"] for t in traces)  # the NaN step is a gap, not a number
    _clean(log)


# -- the trial table sorts -------------------------------------------------------------------------

COLUMN_JS = """([table, header]) => {
  const heads = Array.from(document.querySelectorAll(`#${table} thead th`));
  const col = heads.findIndex((th) => th.textContent.replace(/[\\u25B2\\u25BC]/g, "").trim()
                                       === header);
  if (col < 0) { return null; }
  return {col: col, sort: heads[col].getAttribute("aria-sort"),
          cells: Array.from(document.querySelectorAll(`#${table} tbody tr`),
                            (r) => r.cells[col].textContent.trim())};
}"""


def _column(page: Any, table: str, header: str) -> dict[str, Any]:
    found: dict[str, Any] | None = evaluate(page, COLUMN_JS, [table, header])
    assert found is not None, f"no column {header!r} in #{table}"
    return found


def _check_order(cells: list[str], ascending: bool) -> None:
    filled = [c for c in cells if c not in ("", "n/a")]
    assert all(c in ("", "n/a") for c in cells[len(filled) :]), cells  # blanks and n/a last
    assert cells[: len(filled)] == filled, cells
    numbers = [float(c) for c in filled]
    assert numbers == sorted(numbers, reverse=not ascending), cells


def _text(value: Any) -> str:
    """A table cell as the pages write it: ints as they are, floats to 6 digits, NaN n/a."""
    if isinstance(value, int | np.integer):
        return str(value)
    return "n/a" if pd.isna(value) else f"{value:.6g}"


@pytest.mark.parametrize("header", ["pretrain.tokens", "acceptance_length"])
def test_trial_table_sorts_on_header_click(reported: Reported, opened: Any, header: str) -> None:
    page, log = opened(TOKENS)
    before = _column(page, "trials", header)
    assert before["sort"] is None
    th = page.locator("#trials thead th").nth(before["col"])
    th.click()
    asc = _column(page, "trials", header)
    assert asc["sort"] == "ascending"
    _check_order(asc["cells"], ascending=True)
    assert sorted(asc["cells"]) == sorted(before["cells"])
    th.click()
    desc = _column(page, "trials", header)
    assert desc["sort"] == "descending"
    _check_order(desc["cells"], ascending=False)
    # rows move whole: each trial key keeps its value
    keys = _column(page, "trials", "trial_key")["cells"]
    df = reported.store.metrics_frame(reported.sweep_id(TOKENS)).set_index("trial_key")
    for key, cell in zip(keys, desc["cells"], strict=True):
        assert cell == _text(df.loc[key, header]), (key, cell)
    _clean(log)


# -- the index lists every sweep and links its page ------------------------------------------------


def test_index_lists_every_sweep_and_links_open(reported: Reported, browser: Any) -> None:
    store = reported.store
    page, log = open_page(browser, reported.url())
    try:
        rows = evaluate(
            page,
            """Array.from(document.querySelectorAll('#sweeps tbody tr'), (r) =>
                 Array.from(r.cells, (c) => c.textContent.trim()))""",
        )
        headers = evaluate(
            page, "Array.from(document.querySelectorAll('#sweeps thead th'), h => h.textContent)"
        )
        table = {r[0]: dict(zip(headers, r, strict=True)) for r in rows}
        assert sorted(table) == sorted(s.name for s in store.list_sweeps())
        for info in store.list_sweeps():
            states = Counter(t.state for t in store.trials(info.id))
            row = table[info.name]
            assert row["workload"] == info.workload
            assert int(row["trials"]) == sum(states.values())
            assert int(row["completed"]) == states["completed"]
            assert int(row["failed"]) == states["failed"]
            assert (
                int(row["other"]) == sum(states.values()) - states["completed"] - states["failed"]
            )
            if info.name in LAW_X:  # the law's slope, refitted here by least squares
                df = store.metrics_frame(info.id)
                done = df[(df["state"] == "completed") & (df[LAW_X[info.name]] > 0)]
                a = np.polyfit(np.log10(done[LAW_X[info.name]]), done["acceptance_length"], 1)[0]
                assert float(row["a"]) == pytest.approx(a, rel=1e-5)
        _clean(log)

        for name in sorted(table):
            link = page.locator("#sweeps tbody a", has_text=name)
            with page.expect_navigation(wait_until="load"):
                link.click()
            assert page.url == reported.url(name), page.url
            assert name in page.locator("h1").inner_text()
            div = "fig-surface" if name == DECODE else "fit"
            assert plot_data(page, div), f"{name}: no figure in #{div}"
            _clean(log)
            page.go_back(wait_until="load")
            assert page.url == reported.url()
        _clean(log)
    finally:
        page.close()


# -- the decode_bench page -------------------------------------------------------------------------


def _check_surface(page: Any, surface: pd.DataFrame) -> None:
    traces = plot_data(page, "fig-surface")
    assert traces is not None
    heat = [t for t in traces if t["type"] == "heatmap"]
    assert len(heat) == 1
    assert heat[0]["x"] == [str(k) for k in surface.columns]
    assert heat[0]["y"] == [str(b) for b in surface.index]
    assert len(heat[0]["z"]) == len(surface.index)
    for got, want in zip(heat[0]["z"], surface.to_numpy().tolist(), strict=True):
        assert got == _none_for_nan(want)


def test_decode_page_from_the_db(reported: Reported, opened: Any) -> None:
    df = decode_frame(reported.store, reported.sweep_id(DECODE))
    page, log = opened(DECODE)
    _check_surface(page, throughput_surface(df, "tokens_per_s"))
    assert plot_data(page, "fig-roofline")
    _clean(log)


# -- pages written by the writers directly (hostile names and error texts) -------------------------


def test_decode_writer_page(tmp_path: Path, browser: Any) -> None:
    trials = test_decode_page._trials()
    test_decode_page._write(tmp_path, trials, roofline=test_decode_page._roofline(),
                            sweep_name=XSS)  # fmt: skip
    page, log = open_page(browser, (tmp_path / "sweep" / "dashboard.html").as_uri())
    try:
        _check_surface(page, throughput_surface(trials, "tokens_per_s"))
        assert plot_data(page, "fig-roofline")
        assert XSS in page.locator("h1").inner_text()  # shown as text, not run
        _clean(log)
    finally:
        page.close()


def test_sweep_writer_page_with_curves(tmp_path: Path, browser: Any) -> None:
    trials = test_sweep_page._trials()
    review = review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")
    curves = {
        key: {"pretrain/loss": [3.0, 2.5, 2.2], "sft/loss": [2.0, 1.8]}
        for key in trials["trial_key"]
    }
    out = write_sweep_dashboard(
        tmp_path / "d.html", sweep_name=XSS, trials=trials, review=review, curves=curves
    )
    page, log = open_page(browser, out.as_uri())
    try:
        assert len(plot_data(page, "loss") or []) == 2 * len(curves)
        residuals = _trace(plot_data(page, "residuals") or [], "residual")
        assert _close(residuals["y"], list(review.fit.residuals))
        text = page.locator("#trials").inner_text()
        assert "<boom> & out of memory" in text  # the error text, escaped and shown as typed
        _clean(log)
    finally:
        page.close()
