"""The smoke sweep on PostgreSQL with an ``mlflow server``, then looked at as a user would: the
MLflow REST API holds the sweep's parent run and one child run per trial with their params and
metrics, and the MLflow web UI (headless Chromium) shows them.

One smoke run serves both the PostgreSQL results DB checks and the MLflow checks (it takes about
two minutes of CPU).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store.results import ResultsStore
from tests.browser import PageLog, chromium, open_page, require_chromium
from tests.orchestrator import servers
from tests.orchestrator.driving.test_submit_e2e import check_store, submit
from tests.orchestrator.pg import PG_DSN, fresh_schema

SWEEP = "smoke-tokens"
EXPERIMENT = "specscale"
"""the MLflow experiment every sweep logs to (orchestrator.tracking.tracker.Tracker's default)"""
UI_TIMEOUT_MS = 60_000
"""the UI is a React app that fetches runs after it loads: generous waits"""

LOOPBACK = (None, "127.0.0.1", "localhost", "::1")
"""hosts of this machine (None: an error without a URL is never excused as a network error)"""

USER_PROBE = "/ajax-api/2.0/mlflow/users/current"
"""The UI asks the server for the logged-in user; a server without the auth app answers 404,
which Chromium logs as a console error. That one loopback 404 comes from MLflow itself and is
the only console error of the UI's own origin that the test tolerates."""


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """``mlflow server`` on a free loopback port with a PostgreSQL backend (its own schema)."""
    with servers.mlflow_server(tmp_path / "artifacts") as uri:
        yield uri


def _api(uri: str, endpoint: str, body: dict[str, Any] | None = None) -> Any:
    """GET (``body`` None, query in ``endpoint``) or POST JSON to the MLflow REST API."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{uri}/api/2.0/mlflow/{endpoint}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)


def _flat(run: dict[str, Any], part: str) -> dict[str, Any]:
    """A REST run's params, metrics or tags as a dict."""
    return {kv["key"]: kv["value"] for kv in run["data"].get(part, [])}


def _unexpected_errors(log: PageLog, origin: str) -> list[str]:
    """Console errors and exceptions of the UI, less the ones it cannot avoid here: the 404 of
    :data:`USER_PROBE`, and failed loads of URLs off this machine (tests have no network, and
    the UI's optional links to mlflow.org etc. cannot load; none were seen with MLflow 3.17)."""
    bad = list(log.page_errors)
    for e in log.console_errors:
        if e.url == origin + USER_PROBE and "404" in e.text:
            continue
        host = urllib.parse.urlsplit(e.url).hostname
        if e.text.startswith("Failed to load resource: net::") and host not in LOOPBACK:
            continue
        bad.append(str(e))
    return bad


@pytest.mark.postgres
def test_smoke_sweep_on_postgresql_in_the_mlflow_ui(
    tmp_path: Path, cache_dir: Path, mlflow_server: str
) -> None:
    require_chromium()  # before the two-minute sweep
    psycopg = pytest.importorskip("psycopg")
    with fresh_schema("e2e") as (schema, db_url):
        output = submit(
            tmp_path / "run", cache_dir, "--db-url", db_url, "--tracking-uri", mlflow_server
        )
        assert "4 completed, 0 already completed" in output, output[-3000:]
        store = ResultsStore(db_url)
        assert store.dialect == "postgresql"
        check_store(store)
        info = store.get_sweep(SWEEP)
        assert info is not None
        trials = store.trials(info.id)
        store.close()
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".ss_trials').fetchone()
        assert row is not None and row[0] == 4

    # -- the REST API: one parent run, four children with params and metrics -------------------
    experiment = _api(
        mlflow_server,
        "experiments/get-by-name?" + urllib.parse.urlencode({"experiment_name": EXPERIMENT}),
    )["experiment"]
    exp_id = experiment["experiment_id"]
    # submit printed where to browse: the runs table of this experiment on the server
    assert f"browse: {mlflow_server}/#/experiments/{exp_id}/runs" in " ".join(output.split())
    runs = _api(mlflow_server, "runs/search", {"experiment_ids": [exp_id], "max_results": 100})
    runs = runs["runs"]
    by_id = {r["info"]["run_id"]: r for r in runs}
    parent = by_id[info.mlflow_run_id]
    assert parent["info"]["run_name"] == SWEEP and parent["info"]["status"] == "FINISHED"
    assert _flat(parent, "tags")["specscale.kind"] == "sweep"
    assert _flat(parent, "params")["name"] == SWEEP
    assert "fit.tokens.a" in _flat(parent, "metrics")  # the law's fit reached MLflow
    children = [r for r in runs if _flat(r, "tags").get("mlflow.parentRunId") == info.mlflow_run_id]
    assert len(children) == 4 and len(runs) == 5
    # child run names: the trial key's first 8 characters and the grid point, e.g.
    # "3ca3750b tokens=0 seed=0"
    names = {
        " ".join([t.key[:8], *(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in t.overrides.items())]): t
        for t in trials
    }
    assert {c["info"]["run_name"] for c in children} == set(names)
    for child in children:
        trial = names[child["info"]["run_name"]]
        params, metrics = _flat(child, "params"), _flat(child, "metrics")
        assert child["info"]["status"] == "FINISHED"
        assert params["pretrain.tokens"] == str(trial.overrides["pretrain.tokens"])
        assert params["sft.tokens"] == "512"
        assert 1.0 <= float(metrics["acceptance_length"]) <= 3.0
    artifacts = _api(mlflow_server, f"artifacts/list?run_id={info.mlflow_run_id}")
    assert "dashboard.html" in {f["path"] for f in artifacts.get("files", [])}

    # -- the web UI ----------------------------------------------------------------------------
    child = max(children, key=lambda c: int(_flat(c, "params")["pretrain.tokens"]))
    _check_ui(mlflow_server, exp_id, parent, children, child, tmp_path)


def _check_ui(
    uri: str,
    exp_id: str,
    parent: dict[str, Any],
    children: list[dict[str, Any]],
    child: dict[str, Any],
    shots: Path,
) -> None:
    """The experiment's runs table lists the parent and, expanded, its children by name; the
    child run's page shows its params and metrics. Screenshots: ``shots/mlflow-runs.png``,
    ``shots/mlflow-child-run.png``."""
    parent_id = parent["info"]["run_id"]
    names = [c["info"]["run_name"] for c in children]
    with chromium() as browser:
        page, log = open_page(browser, f"{uri}/#/experiments/{exp_id}/runs")
        # the parent's row (ag-grid renders a row once per pinned column group), collapsed
        expand = page.locator(
            f"[role=row][row-id='{parent_id}'] [col-id='attributes.`Run Name`'] button"
        )
        expand.wait_for(timeout=UI_TIMEOUT_MS)
        expand.click()
        for name in names:
            page.get_by_text(name, exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)
        _readable(page)
        _fit_column(page, "attributes.`Run Name`")
        page.screenshot(path=shots / "mlflow-runs.png")
        text = page.inner_text("body")
        for name in [parent["info"]["run_name"], *names]:
            assert name in text, (name, text[-2000:])
            assert page.get_by_text(name, exact=True).first.is_visible(), name

        run_page, run_log = open_page(
            browser, f"{uri}/#/experiments/{exp_id}/runs/{child['info']['run_id']}"
        )
        param, metric = "pretrain.tokens", "acceptance_length"
        param_value = _flat(child, "params")[param]
        metric_value = _js_number(_flat(child, "metrics")[metric])  # shown unrounded
        run_page.get_by_text(child["info"]["run_name"], exact=True).first.wait_for(
            timeout=UI_TIMEOUT_MS
        )
        _readable(run_page)
        # filter the run's metric and param tables (dozens of rows) down to the two we check
        run_page.get_by_placeholder("Search metrics").fill(metric)
        run_page.get_by_placeholder("Search parameters").fill(param)
        for label, value in ((metric, metric_value), (param, param_value)):
            row = run_page.locator("[role=row]", has=run_page.get_by_text(label, exact=True))
            row.first.wait_for(timeout=UI_TIMEOUT_MS)
            assert row.first.get_by_text(value, exact=True).is_visible(), (label, value)
        # "Parent run": a link to the sweep's run, filled in after a second request
        run_page.get_by_role("link", name=parent["info"]["run_name"], exact=True).wait_for(
            timeout=UI_TIMEOUT_MS
        )
        run_page.get_by_text("Parameters (", exact=False).first.scroll_into_view_if_needed()
        run_page.screenshot(path=shots / "mlflow-child-run.png")

        for one in (log, run_log):
            assert _unexpected_errors(one, uri.rstrip("/")) == [], one.errors


def _js_number(value: float) -> str:
    """``value`` as JavaScript's String(value) writes it: 1.0 as "1", 1.13 as "1.13"."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _readable(page: Any) -> None:
    """Close MLflow's assistant side panel, if it is open, so the screenshot shows the runs."""
    close = page.locator("button[data-component-id='mlflow.assistant.chat_panel.close']")
    if close.count():
        close.first.click()


def _fit_column(page: Any, col_id: str) -> None:
    """Size a runs-table column (ag-grid) to its content, by a double click on the right edge
    of its header, so that long run names are not cut off in the screenshot."""
    handle = page.locator(f".ag-header-cell[col-id='{col_id}'] .ag-header-cell-resize")
    if handle.count():
        handle.first.dblclick()
