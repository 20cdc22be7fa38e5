"""Headless Chromium for tests: Debian's ``/usr/bin/chromium`` driven by Playwright.

:func:`chromium` starts the browser with a fresh, empty profile (never a downloaded browser);
:func:`open_page` opens a ``file://`` or ``http://`` URL in a new tab and records what went
wrong there (console errors, uncaught exceptions, failed requests, dialogs) and every URL the
page requested, in a :class:`PageLog`; :func:`evaluate` runs JavaScript in the page.

A test that needs the browser fails when Chromium is missing (``make test`` installs it); only
``SPECSCALE_NO_BROWSER=1`` turns that into a skip.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium (package ``chromium``; ``make test`` installs it)"""

NO_BROWSER_ENV = "SPECSCALE_NO_BROWSER"
"""set to 1 to skip (instead of fail) the browser tests on a machine without Chromium"""

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Chromium flags: no sandbox (tests run as root in CI), no GPU, no calls home"""

LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
"""request schemes that stay on this machine without any server"""


class ConsoleError(NamedTuple):
    """A console message of type "error"."""

    text: str
    url: str
    """the script or resource it came from ("" when unknown)"""

    def __str__(self) -> str:
        return f"{self.text} ({self.url})" if self.url else self.text


@dataclass
class PageLog:
    """What one tab saw, appended as events arrive."""

    console_errors: list[ConsoleError] = field(default_factory=list)
    """console messages of type ``error``"""
    page_errors: list[str] = field(default_factory=list)
    """uncaught exceptions (``pageerror`` events)"""
    requests: list[str] = field(default_factory=list)
    """every URL the tab requested (documents, scripts, images, XHR), in order"""
    failed_requests: list[str] = field(default_factory=list)
    """"URL: reason" of requests that failed"""
    dialogs: list[str] = field(default_factory=list)
    """alert/confirm/prompt messages (dismissed): a dashboard never opens one"""

    @property
    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions together, as text."""
        return [str(e) for e in self.console_errors] + self.page_errors

    def non_local_requests(self) -> list[str]:
        """Requested URLs that are not file:, data:, blob: or about: (a CDN, a server)."""
        return [u for u in self.requests if not u.startswith(LOCAL_SCHEMES)]


def require_chromium() -> None:
    """Fail the test when Chromium is missing; skip instead only with SPECSCALE_NO_BROWSER=1."""
    if CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK):
        return
    if os.environ.get(NO_BROWSER_ENV) == "1":
        pytest.skip(f"{CHROMIUM} is missing and {NO_BROWSER_ENV}=1")
    pytest.fail(
        f"{CHROMIUM} is missing: the browser tests need Debian's Chromium. `make test` installs "
        "it (apt-get install chromium chromium-driver); set SPECSCALE_NO_BROWSER=1 to skip them",
        pytrace=False,
    )


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium with a new empty profile; yields a Playwright ``BrowserContext``.

    Fails the test without Chromium (see :func:`require_chromium`). The profile folder is
    deleted afterwards.
    """
    require_chromium()
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory(prefix="ss-chromium-") as profile,
        sync_playwright() as p,
    ):
        context = p.chromium.launch_persistent_context(
            user_data_dir=profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


def watch(page: Any) -> PageLog:
    """Record the events of ``page`` (a Playwright ``Page``) into a new :class:`PageLog`."""
    log = PageLog()

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            log.console_errors.append(ConsoleError(msg.text, (msg.location or {}).get("url", "")))

    def on_dialog(dialog: Any) -> None:
        log.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("console", on_console)
    page.on("pageerror", lambda exc: log.page_errors.append(str(exc)))
    page.on("request", lambda req: log.requests.append(req.url))
    page.on("requestfailed", lambda req: log.failed_requests.append(f"{req.url}: {req.failure}"))
    page.on("dialog", on_dialog)
    return log


def open_page(
    context: Any, url: str, *, wait_until: str = "load", timeout_s: float = 60
) -> tuple[Any, PageLog]:
    """Open ``url`` (``file://`` or ``http://``) in a new tab of ``context``; return the
    Playwright ``Page`` and its :class:`PageLog`, which keeps recording after the return."""
    page = context.new_page()
    log = watch(page)
    page.goto(url, wait_until=wait_until, timeout=timeout_s * 1000)
    return page, log


def evaluate(page: Any, script: str, arg: Any = None) -> Any:
    """Run ``script`` (a JS expression or function, given ``arg``) in the page; return its
    JSON-able value."""
    return page.evaluate(script, arg)


PLOT_DATA_JS = """(id) => {
  const gd = document.getElementById(id);
  if (!gd || !gd.data) { return null; }
  const arr = (v) => (v === undefined || v === null) ? null
    : (typeof v === "object" && typeof v.length === "number")
      ? Array.from(v, (e) => (e !== null && typeof e === "object" && typeof e.length === "number")
        ? Array.from(e) : e)
      : v;
  return gd.data.map((t) => ({name: t.name === undefined ? null : String(t.name),
    type: t.type || "scatter", x: arr(t.x), y: arr(t.y), z: arr(t.z),
    xaxis: t.xaxis || "x", legendgroup: t.legendgroup || null}));
}"""
"""traces of the plotly figure in the div with the given id (``gd.data``, plain arrays)"""


def plot_data(page: Any, div_id: str) -> list[dict[str, Any]] | None:
    """The traces plotly.js drew in div ``div_id`` (name, type, x, y, z, xaxis, legendgroup),
    typed arrays as lists; None when there is no such div or it holds no plot."""
    result: list[dict[str, Any]] | None = evaluate(page, PLOT_DATA_JS, div_id)
    return result
