"""Console output of the commands: the events of a sweep service, fits, trial tables.

Numbers go through :func:`analysis.numbers.fmt`, the one format of the console and the pages:
an undefined value (NaN, a metric a trial does not report) is ``n/a``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from analysis.numbers import fmt, plural
from orchestrator.driving.events import (
    CostPredicted,
    Event,
    SweepFinished,
    SweepOpened,
    TrialEvent,
)
from workloads.protocol import Workload

out = Console(soft_wrap=True)  # paths and commands stay on one line when piped or logged
err = Console(stderr=True)


def metrics_line(pairs: tuple[tuple[str, str], ...], metrics: dict[str, float] | None) -> str:
    """``name=value`` for each ``(metric, format)`` pair; ``n/a`` where undefined."""
    m = metrics or {}
    return " ".join(f"{name}={fmt(m.get(name), spec)}" for name, spec in pairs)


class SweepConsole:
    """Renders a sweep service's events: the opening line, a progress bar, one line per
    trial, the closing counts (see :mod:`orchestrator.driving.events`)."""

    def __init__(self, workload: Workload, *, search_metric: str | None = None) -> None:
        self.workload = workload
        self.search_metric = search_metric
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    @contextmanager
    def live(self) -> Iterator[SweepConsole]:
        """Show a progress bar from the sweep's opening (nothing before: a refusal prints only
        its error) until the block ends."""
        try:
            yield self
        finally:
            if self.bar is not None:
                self.bar.stop()
                self.bar = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, SweepOpened):
            self._opened(event)
        elif isinstance(event, TrialEvent):
            self._trial(event)
        elif isinstance(event, CostPredicted):
            from orchestrator.cost.report import total_lines

            for line in total_lines(event.cost):
                out.print(line, markup=False, highlight=False)

    def _print(self, text: str) -> None:
        (self.bar.console if self.bar is not None else out).print(text)

    def _opened(self, e: SweepOpened) -> None:
        self.bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=out,
            transient=False,
        )
        self.bar.start()
        self._print(
            f"sweep [bold]{e.name}[/]: {e.what}; results DB {e.store_url}; "
            f"MLflow {e.tracking_uri} (parent run {e.parent_run[:8]})"
        )
        if e.skipped and self.search_metric is None and not e.what.startswith("re-running"):
            self._print(f"{plural(e.skipped, 'trial')} already completed: skipped")
        if e.lost_parent or e.restored:
            self._print(lost_runs_line(e))
        self.task = self.bar.add_task("trials", total=e.todo)

    def _trial(self, e: TrialEvent) -> None:
        point = " ".join(f"{k}={v}" for k, v in e.trial.overrides.items())
        if e.kind == "started":
            self._print(f"  started   {e.trial.key} {point}")
            return
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task)
        if self.search_metric and e.kind in ("completed", "reused"):
            line = metrics_line(((self.search_metric, ".4g"),), e.metrics)
            self._print(f"  {e.kind:<9} {e.trial.key} {point} {line}")
        elif e.kind == "completed":
            line = metrics_line(self.workload.progress, e.metrics)
            self._print(f"  completed {e.trial.key} {point} {line}")
        elif e.kind == "cancelled":
            self._print(f"  [yellow]cancelled[/] {e.trial.key} {point}")
        else:
            self._print(f"  [red]failed[/]    {e.trial.key} {point}")


def lost_runs_line(e: SweepOpened) -> str:
    """The warning when MLflow does not have the runs the results DB names (deleted, purged by
    ``mlflow gc``, or made in another tracking store), and what was done about it."""
    parts = []
    if e.lost_parent:
        parts.append(f"parent run {e.lost_parent[:8]} not there, the sweep's runs now under "
                     f"{e.parent_run[:8]}")  # fmt: skip
    if e.restored:
        parts.append(
            f"the child runs of {e.restored} completed trial{'s' * (e.restored != 1)} "
            "recreated from the results DB "
            "(config, metrics, series; their files stay in the trial folders)"
        )
    return (
        f"[yellow]warning[/]: MLflow at {escape(e.tracking_uri)} did not have runs this sweep "
        "recorded (deleted, purged by `mlflow gc`, or made in another tracking store): "
        + "; ".join(parts)
    )


def print_finished(done: SweepFinished, *, metric: str = "", retried: bool = False) -> None:
    """The closing counts, the fit (or the kind's own lines: a search's best trial, a design's
    stop) and where to look."""
    t, kind = done.tally, done.summary
    counts = kind.counts_line(t) if kind is not None else None
    if counts is None:
        skipped = "not selected" if retried else "already completed"
        counts = (
            f"{t.completed} completed, {t.skipped} {skipped} (skipped), "
            f"{t.failed} failed, {t.cancelled} cancelled."
        )
    out.print(counts)
    for line in kind.lines(metric) if kind is not None else []:
        out.print(line, markup=False, highlight=False)
    if kind is None or kind.shows_fit:
        print_fit(done.report)
    else:
        print_index(done.report)
    out.print(f"dashboard: {done.report.dashboard}")
    print_browse(done.tracking_uri, done.experiment_id)


def print_browse(uri: str, experiment_id: str) -> None:
    """How to open the sweep in the MLflow UI (its runs table, not the default overview);
    ``uri`` is the tracking URI, password masked. The ``mlflow ui`` command is shell-quoted,
    so it pastes as it is for a run root with a space (or a ``[``) in its path."""
    if uri.startswith(("http://", "https://")):
        line = f"browse: {uri.rstrip('/')}/#/experiments/{experiment_id}/runs"
    else:
        line = (
            f"browse: mlflow ui --backend-store-uri {shlex.quote(uri)} --host 127.0.0.1, then "
            f"open http://127.0.0.1:5000/#/experiments/{experiment_id}/runs"
        )
    out.print(line, markup=False, highlight=False)


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A titled table of text cells (e.g. a search's space, one row per searched field)."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    out.print(table)


def print_fit(rep: Any) -> None:
    """A sweep's fitted law with its review, or why there is none.

    The numbers are the pages' (:mod:`dashboards.review_tables`); a fit that is not ok (too few
    points, a constant response) prints its status and no check, verdict or ratio. Text is
    printed as is (no rich markup: ``[n/a, n/a]`` is an interval, not a style).
    """
    from dashboards.review_tables import fit_numbers, review_rows

    def say(text: str) -> None:
        out.print(text, markup=False)

    f, rv = rep.fit, rep.review
    if f is None:
        pass
    elif not f.ok:
        say(f"fit: {f.status}")
    else:
        say(f"fit: {f.form}: {fit_numbers(f)}")
    if rv is not None:
        say(rv.counts.text())
    if rv is not None and f is not None and f.ok:
        for check, value in review_rows(rv)[3:]:
            if not str(check).startswith(("a (95% CI", "b (95% CI", "R²", "n (")):
                say(f"  {check}: {value}")
        p = rv.paper
        if p is not None and p.ci_covers_paper is not None:
            say(
                f"  paper ({p.source}): a = {fmt(p.paper_a, 'g')}; ours / paper = "
                f"{fmt(p.slope_ratio, '.3g')}; our CI "
                f"{'covers' if p.ci_covers_paper else 'does not cover'} the paper's a"
            )
    for line in rep.lines:
        say(line)
    b = rep.baseline
    if b.get("n"):
        say(f"SFT-only baseline: acceptance_length = {fmt(b['mean'], '.4f')} (n = {b['n']})")
    print_index(rep)


def print_index(rep: Any) -> None:
    """The run root's index page of all sweeps, when the report wrote one."""
    if getattr(rep, "index", None) is not None:
        out.print(f"index of all sweeps: {rep.index}", markup=False, highlight=False)


def print_trials(
    name: str,
    rows: list[tuple[str, str, dict[str, Any], dict[str, Any] | None]],
    columns: tuple[str, ...] = (),
    formats: dict[str, str] | None = None,
) -> None:
    """A trial table: key, grid point, state (and error), the given metrics (the workload's
    ``status_columns``; none for planned trials, which have no metrics yet), each in its
    format from ``formats`` (the workload's progress formats), else ``.4f``. A cell of up to
    24 characters is never cut; a longer one (an error) and a header fold onto more lines."""
    table = Table(title=f"sweep {name}")
    axes = sorted({k for _, _, o, _ in rows for k in o})
    spec = formats or {}
    cells = []
    for key, state, overrides, metrics in rows:
        values = [
            "" if metrics is None else fmt(metrics.get(c), spec.get(c, ".4f")) for c in columns
        ]
        cells.append((key, [str(overrides.get(a, "")) for a in axes], state, values))
    texts = [[key, *points, state, *values] for key, points, state, values in cells]
    headers = ["trial_key", *axes, "state", *columns]
    widths = [min(max((len(row[i]) for row in texts), default=0), 24) for i in range(len(headers))]
    rest = out.width - 3 * len(headers) - 1 - widths[0] - widths[len(axes) + 1]  # key, state whole
    share = max(4, rest // max(1, len(headers) - 2))  # the other columns share what is left
    for col, widest in zip(headers, widths, strict=True):
        table.add_column(  # a short cell is never cut: its column is at least as wide
            Text(col, overflow="fold"), min_width=widest, max_width=max(widest, share)
        )
    for row in texts:
        table.add_row(*row)
    out.print(table)
