"""``orchestrator report`` and ``orchestrator compare``: dashboards rebuilt from the DB alone.

``report`` rewrites every sweep's page (or one sweep's) and the index under ``--out``; it reads
the results DB only (trials, metrics, training series) and writes nothing to the DB or MLflow.
``compare`` puts two sweeps' laws side by side (console table and one HTML page). Registered in
:mod:`orchestrator.cli`, which turns :class:`orchestrator.errors.OrchestratorError` into one line
and exit code 2.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from analysis.numbers import NA, defined, fmt
from orchestrator.commands.options import DbUrl, RunRoot
from orchestrator.store.access import find_sweep, open_store

if TYPE_CHECKING:  # statsmodels loads when `compare` runs, not with every command
    import pandas as pd

    from analysis.transfer import FactorSlopeDifference, PooledSlope

console = Console(soft_wrap=True)  # paths and commands stay on one line when piped

_MARK = "<meta name='generator' content='specscale'>"
"""every page this project writes carries it (dashboards/templates/base.html.j2): --out may
replace those"""


def _out_dir(out: Path, sweeps: list[str]) -> Path:
    """``out`` as a folder to write pages into, created now so a mistake costs nothing; an
    index or sweep page there that orchestrator did not write is refused, not replaced."""
    from orchestrator.errors import OrchestratorError

    try:
        if out.exists() and not out.is_dir():
            raise OrchestratorError(f"--out {out} is a file. Fix: give a folder for the pages")
        for target in [out / "index.html", *(out / s / "dashboard.html" for s in sweeps)]:
            _refuse_foreign(target)
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OrchestratorError(f"cannot create --out {out}: {exc.strerror or exc}") from exc
    return out


def _refuse_foreign(target: Path) -> None:
    """Raise OrchestratorError when ``target`` exists and is not a page of ours."""
    from orchestrator.errors import OrchestratorError

    if target.is_dir() or (
        target.exists() and _MARK not in target.read_bytes()[:400].decode("utf-8", "replace")
    ):
        raise OrchestratorError(
            f"{target} exists and was not written by orchestrator; not replacing it. "
            "Fix: give another --out"
        )


def _out_page(out: Path) -> Path:
    """``out`` as the compare page to write: an .html file that is new or one of ours."""
    from orchestrator.errors import OrchestratorError

    if out.suffix != ".html":
        raise OrchestratorError(f"--out {out} does not end in .html. Fix: e.g. --out cmp.html")
    try:
        if out.is_dir():
            raise OrchestratorError(f"--out {out} is a folder. Fix: give a file name (.html)")
        if out.exists():
            head = out.read_bytes()[:400].decode("utf-8", "replace")
            if _MARK not in head:
                raise OrchestratorError(
                    f"--out {out} exists and was not written by orchestrator; not replacing it. "
                    "Fix: give a new file name"
                )
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OrchestratorError(f"cannot write --out {out}: {exc.strerror or exc}") from exc
    return out


def report(
    sweep: Annotated[
        str | None, typer.Argument(help="sweep name (default: every sweep in the DB)")
    ] = None,
    *,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="folder for index.html and <sweep>/dashboard.html (default: the run root)"
        ),
    ] = None,
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
) -> None:
    """Rebuild the dashboards (index and per-sweep pages) from the results DB alone."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.reports import fit as rep_mod
    from orchestrator.reports.index import write_run_index

    run_root = run_root.resolve()
    store = open_store(run_root, db_url, must_exist=True)
    infos = [find_sweep(store, sweep)] if sweep else store.list_sweeps()
    out_dir = _out_dir((out or run_root).resolve(), [i.name for i in infos])
    fresh = {}
    t0 = time.perf_counter()
    for i, info in enumerate(infos, start=1):
        page = out_dir / info.name / "dashboard.html"
        try:
            r = rep_mod.fit_sweep(store, info.id, info.name, page, persist=False)
        except OSError as exc:
            raise OrchestratorError(f"cannot write {page}: {exc.strerror or exc}") from exc
        fresh[info.name] = r.fit
        law = ""
        if r.fit is not None and r.fit.ok:
            law = f", a = {fmt(r.fit.a)} [{fmt(r.fit.a_ci[0])}, {fmt(r.fit.a_ci[1])}]"
        console.print(f"[{i}/{len(infos)}] {info.name} ({info.workload}{law}): {page}")
    index = write_run_index(store, out_dir, fresh)
    pages = f"{len(infos)} page{'s' if len(infos) != 1 else ''}"
    console.print(f"index: {index} ({pages} in {time.perf_counter() - t0:.1f} s)")


def compare(
    sweep_a: Annotated[str, typer.Argument(help="first sweep (A)")],
    sweep_b: Annotated[str, typer.Argument(help="second sweep (B)")],
    *,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="HTML page to write (default: <run root>/compare/<A>--vs--<B>.html, "
            "<A>--vs--<B>--speedup.html with --law speedup)",
        ),
    ] = None,
    law: Annotated[
        str,
        typer.Option(
            "--law",
            help="main: each sweep's own law (the token law of draft_train and serve_bench "
            "sweeps, Thm 1.3's peak tokens/s of decode_bench); speedup: the best speedup per "
            "batch size against log2(b) (vLLM over its plain server, this engine over its AR "
            "loop), e.g. the serving speedup's law on two targets",
        ),
    ] = "main",
    run_root: RunRoot = Path("runs"),
    db_url: DbUrl = None,
) -> None:
    """Compare two sweeps' laws: fits and checks side by side; does the law transfer (the slope
    difference from one fit with the sweep as a factor, the random-effects pooled slope over
    each sweep's prompt sets); mean per x; a warning (console and page) when the sweeps' trials
    differ in prompt sets or temperature."""
    from analysis.compare import per_x_means
    from analysis.factorial import per_set_columns
    from analysis.transfer import factor_slope_difference, pooled_slope
    from dashboards.compare_page import side_by_side_rows, write_compare_page
    from orchestrator.errors import OrchestratorError
    from orchestrator.reports.conditions import compared_line
    from orchestrator.reports.law_tables import LAWS, law_table

    if law not in LAWS:
        raise OrchestratorError(f"--law {law!r}: unknown. Fix: --law {' or --law '.join(LAWS)}")
    if sweep_a == sweep_b:
        raise OrchestratorError(
            f"both sweeps are {sweep_a!r}. Fix: name two different sweeps (`orchestrator fit "
            f"{sweep_a}` shows one sweep's law and checks)"
        )
    run_root = run_root.resolve()
    store = open_store(run_root, db_url, must_exist=True)
    info_a, info_b = find_sweep(store, sweep_a), find_sweep(store, sweep_b)
    stem = f"{sweep_a}--vs--{sweep_b}" + ("" if law == "main" else f"--{law}")
    page = _out_page((out or run_root / "compare" / f"{stem}.html").resolve())
    a = law_table(store, info_a, law)
    b = law_table(store, info_b, law)
    if (a.x, a.y, a.log_base) != (b.x, b.y, b.log_base):
        raise OrchestratorError(
            f"{sweep_a} fits {a.y} vs log{a.log_base}({a.x}) but {sweep_b} fits {b.y} vs "
            f"log{b.log_base}({b.x}); compare two sweeps of the same law"
        )
    warning = compared_line(store, ((info_a, a.trial_keys), (info_b, b.trial_keys)))
    if law == "speedup" and info_a.workload != info_b.workload:
        said = (
            f"warning: the speedups are over different baselines: {info_a.workload} "
            f"({sweep_a}) vs {info_b.workload} ({sweep_b}); serve_bench's is a plain vLLM "
            "server, decode_bench's this engine's AR loop"
        )
        warning = f"{warning} {said}" if warning else said
    if warning:
        console.print(warning, markup=False)
    names = (sweep_a, sweep_b)
    diff = factor_slope_difference(a.table, b.table, a.x, a.y, names, log_base=a.log_base)
    sets = sorted({*per_set_columns(a.table, f"{a.y}/"), *per_set_columns(b.table, f"{a.y}/")})
    tables = {sweep_a: a.table, sweep_b: b.table}
    pooled = pooled_slope(tables, a.x, sets or [a.y], log_base=a.log_base)
    means = per_x_means(a.table, b.table, a.x, a.y)
    grid = Table(title=f"{a.y} = a*log{a.log_base}({a.x}) + b")
    for col in ("check", sweep_a, sweep_b):
        grid.add_column(col, overflow="fold")
    for row in side_by_side_rows(a.review, b.review):
        grid.add_row(*(escape(str(v)) for v in row))  # "[n/a, n/a]" is text, not markup
    console.print(grid)
    _print_transfer(names, diff, pooled, a.y)
    _print_means(means, names, a.x, a.y)
    try:
        write_compare_page(
            page,
            names=names,
            reviews=(a.review, b.review),
            x=a.x,
            y=a.y,
            means=means,
            slope_diff=diff,
            pooled=pooled,
            warning=warning,
        )
    except OSError as exc:
        raise OrchestratorError(f"cannot write {page}: {exc.strerror or exc}") from exc
    console.print(f"comparison page: {page}")
    if page.parent == run_root / "compare" and (run_root / "index.html").is_file():
        from orchestrator.reports.index import write_run_index

        console.print(f"index: {write_run_index(store, run_root)} (lists the comparison)")


def _print_transfer(
    names: tuple[str, str], diff: FactorSlopeDifference, pooled: PooledSlope, y: str
) -> None:
    """The compare page's transfer figures as two console lines (the one-fit slope difference,
    the random-effects pooled slope; :func:`dashboards.compare_page.transfer_rows`), then the
    table of the slopes pooled."""
    from dashboards.compare_page import STUDY_HEADERS, study_rows, transfer_rows

    first, second = transfer_rows(names, diff, pooled)
    diff_text = (
        f"a(B) - a(A) = {first[1]} {first[2]} (95% CI, {first[3]}; one fit with the sweep as a "
        f"factor): {first[4]}"
    )
    pooled_text = (
        f"= {second[1]} {second[2]} (95% CI, random effects, DerSimonian-Laird; {second[3]}): "
        f"{second[4]}"
    )
    for ok, status, name, text in (
        (diff.ok, diff.status, "slope difference", diff_text),
        (pooled.ok, pooled.status, "pooled slope", pooled_text),
    ):
        console.print(f"{name} {text}" if ok else f"{name}: {status}", markup=False)
    st = Table(title=f"slopes pooled (per sweep and prompt set, {y})")
    for col in STUDY_HEADERS:
        st.add_column(col, overflow="fold")
    for row in study_rows(pooled, y):
        st.add_row(*(escape(str(v)) for v in row))
    console.print(st)


def _print_means(means: pd.DataFrame, names: tuple[str, str], x: str, y: str) -> None:
    """The table of ``y``'s mean per ``x`` in both sweeps (``analysis.compare.per_x_means``)."""
    mt = Table(title=f"mean {y} per {x}")
    for col in (x, f"{names[0]} (n)", f"{names[1]} (n)", "delta B - A"):
        mt.add_column(col, justify="right")
    for r in means.itertuples(index=False):
        mt.add_row(
            fmt(r.x, ".6g"),
            _mean(r.mean_a, r.sd_a, r.n_a),
            _mean(r.mean_b, r.sd_b, r.n_b),
            fmt(r.delta, "+.4f"),
        )
    console.print(mt)


def _mean(mean: float, sd: float, n: int) -> str:
    """``mean ± sd (n)`` in the pages' format (:func:`analysis.numbers.fmt`); "n/a" without
    trials, no spread from one trial."""
    if n == 0 or not defined(mean):
        return NA
    spread = f" ± {fmt(sd, '.4f')}" if defined(sd) else ""
    return f"{fmt(mean, '.4f')}{spread} ({n})"
