"""Reports of stored sweeps at their edges: a constant response, no law axis, a diagnostic
(``table``) workload, the sweep's description, report kinds from the workload registry, and
``orchestrator fit`` refusing (writing nothing) when the sweep's parent MLflow run is missing."""

from __future__ import annotations

import ast
import io
import math
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.commands import render
from orchestrator.errors import OrchestratorError
from orchestrator.reports.fit import LAW_AXES, fit_sweep, report_kind
from orchestrator.reports.law_tables import law_table
from orchestrator.store.results import ResultsStore
from tests.dashboards.test_escaping import _figure_strings
from workloads.draft_train.config import DraftTrainConfig
from workloads.registry import WORKLOADS

REPORTS = Path(__file__).resolve().parents[3] / "orchestrator" / "reports"
TOKENS = [8192, 32768, 131072, 524288]


class _Sink:
    """Records what a report logs to the parent run (the Tracker's log_* calls)."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        self.artifacts: list[Path] = []

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
        self.metrics.update(metrics)

    def update_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        self.log_metrics(run_id, metrics)

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.artifacts.append(path)


def _sweep(
    root: Path,
    spec: str,
    points: list[dict[str, Any]],
    metrics: list[dict[str, float]],
    *,
    workload: str = "draft_train",
    name: str = "s",
) -> tuple[ResultsStore, int]:
    """A stored sweep with one completed trial per (overrides, metrics)."""
    store = ResultsStore.sqlite_under(root)
    sweep_id = store.upsert_sweep(name, workload, spec, f"sweeps/{name}.yaml")
    cfg = DraftTrainConfig().model_dump(mode="json")
    store.add_trials(sweep_id, [(f"{name}-{i:03d}", cfg, o) for i, o in enumerate(points)])
    for trial, m in zip(store.trials(sweep_id), metrics, strict=True):
        store.log_metrics(trial.id, m)
        store.mark_completed(trial.id, 1.0)
    return store, sweep_id


def _token_sweep(root: Path, taus: list[float], name: str = "s") -> tuple[ResultsStore, int]:
    spec = f"name: {name}\ndescription: tokens & <b>law</b>\ngrid:\n  pretrain.tokens: {TOKENS}\n"
    spec += "seeds: [0, 1]\n"
    points = [{"pretrain.tokens": t, "seed": s} for t in TOKENS for s in (0, 1)]
    return _sweep(root, spec, points, [{"acceptance_length": tau} for tau in taus], name=name)


def _console(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buf, width=400, soft_wrap=True))
    return buf


def _page_words(text: str) -> str:
    """The page's own text and its figures' strings, without plotly.js and the sorter."""
    strings = " ".join(_figure_strings(text))
    html = re.sub(r"<script>.*?</script>", " ", text, flags=re.DOTALL)
    return f"{html} {strings}"


# -- a constant response: n/a everywhere, NaN stored ------------------------------------------


def test_a_constant_response_stores_nan_and_claims_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, sweep_id = _token_sweep(tmp_path, [1.4] * 8)
    sink = _Sink()
    rep = fit_sweep(store, sweep_id, "s", tmp_path / "s" / "dashboard.html", sink, "run")  # type: ignore[arg-type]
    assert rep.fit is not None and not rep.fit.ok and rep.fit.status.startswith("no variation")
    row = store.fits(sweep_id)[0]
    assert row["law"] == "tokens" and math.isnan(row["a"]) and math.isnan(row["r2"])
    details = row["details"]
    assert details["forms"]["preferred"] == "n/a" and details["forms"]["delta"] is None
    assert details["paper"]["slope_ratio"] is None and details["paper"]["ci_covers_paper"] is None
    for key in ("a", "a_lo", "r2", "aic_delta_saturating", "slope_ratio_paper", "loo_rmse"):
        assert math.isnan(sink.metrics[f"fit.tokens.{key}"]), key
    buf = _console(monkeypatch)
    render.print_fit(rep)
    console = buf.getvalue()
    assert "fit: no variation: every acceptance_length is 1.4 (8 points)" in console
    for claim in ("log-linear", "saturating", "ours / paper", "covers", "e-1"):
        assert claim not in console, claim
    page = (tmp_path / "s" / "dashboard.html").read_text(encoding="utf-8")
    assert "no variation" in page and ": log-linear" not in page and "ΔAIC" not in page
    assert "<p class='description'>tokens &amp; &lt;b&gt;law&lt;/b&gt;</p>" in page


def test_the_decode_page_shows_the_description(tmp_path: Path) -> None:
    from tests.orchestrator.reports.test_report_decode import _store as decode_store

    results: dict[tuple[int, int], float | None] = {(b, 4): 10.0 * b for b in (1, 2, 4)}
    store, sweep_id = decode_store(tmp_path, results)
    spec = "name: b\nworkload: decode_bench\ndescription: batch <i>law</i> & roofline\n"
    assert store.upsert_sweep("b", "decode_bench", spec, "b.yaml") == sweep_id
    fit_sweep(store, sweep_id, "b", tmp_path / "b" / "dashboard.html", persist=False)
    page = (tmp_path / "b" / "dashboard.html").read_text(encoding="utf-8")
    assert "<p class='description'>batch &lt;i&gt;law&lt;/i&gt; &amp; roofline</p>" in page


# -- a law workload's sweep whose grid varies no law axis --------------------------------------


def test_a_sweep_without_a_law_axis_is_tabulated_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = "name: s\ndescription: SFT only\ngrid:\n  sft.tokens: [1000, 2000, 4000]\n"
    points = [{"sft.tokens": t} for t in (1000, 2000, 4000)]
    store, sweep_id = _sweep(
        tmp_path, spec, points, [{"acceptance_length": v} for v in (1.1, 1.2, 1.3)]
    )
    sink = _Sink()
    page_path = tmp_path / "s" / "dashboard.html"
    rep = fit_sweep(store, sweep_id, "s", page_path, sink, "run")  # type: ignore[arg-type]
    line = (
        f"no law axis: the grid varies none of {', '.join(LAW_AXES)} (it varies sft.tokens); "
        "the trials are tabulated"
    )
    assert rep.fit is None and rep.review is None and rep.lines == [line]
    assert store.fits(sweep_id) == [] and sink.metrics == {}  # no fake fit stored or logged
    assert sink.artifacts == [page_path]
    buf = _console(monkeypatch)
    render.print_fit(rep)
    assert buf.getvalue().splitlines()[0] == line
    page = page_path.read_text(encoding="utf-8")
    assert line in page and "SFT only" in page
    assert "Fit and checks" not in page and "not enough points" not in page
    assert "0 of 0 trials fitted" not in page
    info = store.get_sweep("s")
    assert info is not None
    with pytest.raises(OrchestratorError, match="no law axis: the grid varies none of"):
        law_table(store, info)


# -- a ``table`` workload (the sleep diagnostic): its own words, no law's ----------------------


def test_the_sleep_page_and_lines_carry_no_law_wording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = "name: d\nworkload: sleep\ndescription: <script>alert(1)</script> & co\ngrid:\n"
    spec += "  value: [1, 2, 3]\n"
    points = [{"value": v, "seed": 0} for v in (1, 2, 3)]
    metrics = [{"sleep.seconds": 0.1 * v, "sleep.attempt": 1.0, "value": v} for v in (1, 2, 3)]
    store, sweep_id = _sweep(tmp_path, spec, points, metrics, workload="sleep", name="d")
    page_path = tmp_path / "d" / "dashboard.html"
    rep = fit_sweep(store, sweep_id, "d", page_path)
    assert rep.fit is None and rep.lines == ["3 of 3 trials completed; the trials are tabulated"]
    assert store.fits(sweep_id) == []
    buf = _console(monkeypatch)
    render.print_fit(rep)
    page = page_path.read_text(encoding="utf-8")
    words = _page_words(page) + buf.getvalue() + " ".join(rep.lines)
    for word in ("acceptance", "law", "fit", "baseline", "paper", "SFT"):
        assert not re.search(rf"\b{word}", words, flags=re.IGNORECASE), word
    assert "<p class='description'>&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</p>" in page
    assert "<script>alert(1)" not in page
    assert "sleep.seconds per value" in page  # the workload's own metric, per grid axis
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt; &amp; co</td>" in index


# -- the report a sweep gets is its workload's registry entry, never its name ------------------


def test_the_report_kind_comes_from_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(WORKLOADS, "trainer2", replace(WORKLOADS["draft_train"], name="trainer2"))
    monkeypatch.setitem(WORKLOADS, "idle", replace(WORKLOADS["sleep"], name="idle"))
    store = ResultsStore.sqlite_under(tmp_path)
    spec = f"name: t2\ngrid:\n  pretrain.tokens: {TOKENS}\n"
    sid = store.upsert_sweep("t2", "trainer2", spec, "t2.yaml")
    store.add_trials(sid, [(f"t2-{i}", {}, {"pretrain.tokens": t}) for i, t in enumerate(TOKENS)])
    for trial in store.trials(sid):
        tau = 0.1 * math.log10(trial.overrides["pretrain.tokens"]) + 0.5
        store.log_metrics(trial.id, {"acceptance_length": tau})
        store.mark_completed(trial.id, 1.0)
    info = store.get_sweep("t2")
    assert info is not None and report_kind(info) == "law"
    rep = fit_sweep(store, sid, "t2", tmp_path / "t2" / "dashboard.html", persist=False)
    assert rep.fit is not None and rep.fit.ok and rep.fit.a == pytest.approx(0.1)
    idle = store.upsert_sweep("i", "idle", "name: i\ngrid:\n  value: [1]\n", "i.yaml")
    idle_info = store.get_sweep("i")
    assert idle_info is not None and report_kind(idle_info) == "table"
    rep = fit_sweep(store, idle, "i", tmp_path / "i" / "dashboard.html", persist=False)
    assert rep.fit is None and rep.lines == ["0 of 0 trials completed; the trials are tabulated"]
    unknown = replace(idle_info, workload="gone")  # a workload no longer registered
    assert report_kind(unknown) == "table"


def test_the_reports_never_compare_a_workload_name() -> None:
    names = set(WORKLOADS)
    for path in sorted(REPORTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                consts = [node.left, *node.comparators]
                hits = [c.value for c in consts if isinstance(c, ast.Constant)]
                assert not names & set(hits), f"{path.name}:{node.lineno} compares {hits}"


# -- ``orchestrator fit`` checks the parent run first and writes nothing without it ------------


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, " ".join(res.output.split())


def _fit_cli(root: Path, *extra: str) -> tuple[int, str]:
    return _cli("fit", "s", "--run-root", str(root), *extra)


def _assert_nothing_written(root: Path, store: ResultsStore, sweep_id: int) -> None:
    assert store.fits(sweep_id) == []
    assert not (root / "s").exists() and not (root / "index.html").exists()


def test_fit_refuses_without_a_parent_run_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    store, sweep_id = _token_sweep(root, [0.1 * math.log10(t) + 0.5 for t in TOKENS for _ in "ab"])
    # no parent run recorded in the sweep row
    code, text = _fit_cli(root)
    assert code == 2 and "Traceback" not in text, text
    assert "sweep 's' has no parent MLflow run in the results DB; nothing was written" in text
    assert "Fix: rebuild the sweep's runs from the results DB (`orchestrator mirror" in text
    assert not (root / "mlflow.db").exists()
    _assert_nothing_written(root, store, sweep_id)
    # a parent run recorded, but no MLflow store where --tracking-uri points (the default)
    store.set_sweep_mlflow_run(sweep_id, "0123456789abcdef0123456789abcdef")
    code, text = _fit_cli(root)
    assert code == 2 and f"no MLflow store at sqlite:///{root / 'mlflow.db'}" in text, text
    assert "Fix: pass the --tracking-uri the sweep was submitted with" in text
    _assert_nothing_written(root, store, sweep_id)
    assert not any(p.name.startswith(("mlflow", "mlartifacts")) for p in root.iterdir())


def test_fit_refuses_a_parent_run_the_mlflow_store_lacks(tmp_path: Path) -> None:
    from orchestrator.tracking.tracker import Tracker, default_tracking_uri

    root = tmp_path / "runs"
    store, sweep_id = _token_sweep(root, [0.1 * math.log10(t) + 0.5 for t in TOKENS for _ in "ab"])
    other = tmp_path / "other"  # an MLflow store that holds another sweep's runs
    tracker = Tracker(default_tracking_uri(other))
    real = tracker.start_sweep_run("s", {}, None)
    store.set_sweep_mlflow_run(sweep_id, "0123456789abcdef0123456789abcdef")
    uri = default_tracking_uri(other)
    code, text = _fit_cli(root, "--tracking-uri", uri)
    assert code == 2 and "Traceback" not in text, text
    assert f"MLflow at {uri} has no parent run 0123456789abcdef0123456789abcdef" in text
    assert "nothing was written" in text and "Fix:" in text
    _assert_nothing_written(root, store, sweep_id)
    assert [r["run_id"] for r in tracker.child_runs(real)] == []
    # with the run it names, the same command fits, stores and logs
    store.set_sweep_mlflow_run(sweep_id, real)
    code, text = _fit_cli(root, "--tracking-uri", uri)
    assert code == 0, text
    assert [f["law"] for f in store.fits(sweep_id)] == ["tokens"]
    metrics = tracker._client.get_run(real).data.metrics
    assert metrics["fit.tokens.a"] == pytest.approx(0.1, abs=1e-6)
    assert (root / "s" / "dashboard.html").is_file()


def test_print_fit_prints_report_lines_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = _console(monkeypatch)
    rep = SimpleNamespace(fit=None, review=None, lines=["[n/a, n/a] as is"], baseline={})
    render.print_fit(rep)
    assert buf.getvalue() == "[n/a, n/a] as is\n"  # rich markup would eat "[n/a, n/a]"


def test_planned_trials_list_no_metric_of_another_workload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``submit --dry-run`` lists planned trials without the draft_train's acceptance_length
    column (a sleep sweep measures no acceptance length)."""
    buf = _console(monkeypatch)
    render.print_trials("d", [("k0", "planned", {"value": 1}, None)])
    table = buf.getvalue()
    assert "planned" in table and "value" in table and "acceptance" not in table
