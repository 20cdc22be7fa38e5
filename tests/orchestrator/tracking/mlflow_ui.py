"""Looking at a sweep in MLflow as a user would: the REST API of an ``mlflow server`` and its
web UI (headless Chromium). Used by the smoke sweep's test module
(:mod:`tests.orchestrator.driving.test_submit_e2e`), whose one smoke run logs to such a server.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
import warnings
from pathlib import Path
from typing import Any

from tests.browser import PageLog, chromium, open_page

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
one console error of the UI's own origin that the test tolerates."""

ASSISTANT_PROBES = "/ajax-api/3.0/mlflow/assistant/"
"""MLflow 3.18's assistant side panel (an optional chat feature, not this platform's runs)
probes ``config`` and ``providers`` when a page opens; CI saw both answer 500 on 2026-12-07
while every runs page rendered. Its failures are tolerated, with a warning naming them."""


def api(uri: str, endpoint: str, body: dict[str, Any] | None = None) -> Any:
    """GET (``body`` None, query in ``endpoint``) or POST JSON to the MLflow REST API."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{uri}/api/2.0/mlflow/{endpoint}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)


def flat(run: dict[str, Any], part: str) -> dict[str, Any]:
    """A REST run's params, metrics or tags as a dict."""
    return {kv["key"]: kv["value"] for kv in run["data"].get(part, [])}


def _unexpected_errors(log: PageLog, origin: str) -> list[str]:
    """Console errors and exceptions of the UI, less the ones it cannot avoid here: the 404 of
    :data:`USER_PROBE`, and failed loads of URLs off this machine (tests have no network, and
    the UI's optional links to mlflow.org etc. cannot load; none were seen with MLflow 3.17),
    and failures of MLflow's own assistant panel (:data:`ASSISTANT_PROBES`)."""
    bad = list(log.page_errors)
    for e in log.console_errors:
        if e.url == origin + USER_PROBE and "404" in e.text:
            continue
        assistant = e.url.startswith(origin + ASSISTANT_PROBES)
        if assistant and re.search(r"status of (404|5\d\d)", e.text):
            warnings.warn(f"MLflow's assistant panel failed: {e}", stacklevel=2)
            continue
        host = urllib.parse.urlsplit(e.url).hostname
        if e.text.startswith("Failed to load resource: net::") and host not in LOOPBACK:
            continue
        bad.append(str(e))
    return bad


def check_ui(
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
        param_value = flat(child, "params")[param]
        metric_value = _js_number(flat(child, "metrics")[metric])  # shown unrounded
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
