"""The smoke sweep end to end through the CLI: real target, Ray, SQL, MLflow, fit, dashboard.

One smoke sweep per test run (a module fixture): results in SQLite under the run root (the
default), tracking to an ``mlflow server`` on loopback (PostgreSQL backend), so the same four
trials are checked in the results DB, the dashboard, the ``status``/``fit``/resubmit commands,
MLflow's REST API and its web UI. Without PostgreSQL the sweep logs to the default MLflow store
and only the server and UI check skips. The results DB on PostgreSQL through the CLI is
:mod:`tests.orchestrator.driving.test_control`'s restart test.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient

from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker, default_tracking_uri
from tests.browser import require_chromium
from tests.orchestrator import servers
from tests.orchestrator.tracking import mlflow_ui as ui

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke-tokens.yaml"


def submit(run_root: Path, cache_dir: Path, *extra: str) -> str:
    cmd = [
        sys.executable,
        "-m",
        "orchestrator.cli",
        "submit",
        str(SMOKE),
        "--run-root",
        str(run_root),
        "--cache-dir",
        str(cache_dir),
        *extra,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def check_store(store: ResultsStore) -> int:
    sweep = store.get_sweep("smoke-tokens")
    assert sweep is not None and sweep.mlflow_run_id
    trials = store.trials(sweep.id)
    assert len(trials) == 4
    assert {t.state for t in trials} == {"completed"}, [(t.state, t.error) for t in trials]
    df = store.metrics_frame(sweep.id)
    assert sorted(df["pretrain.tokens"]) == [0, 512, 1024, 2048]
    assert df["acceptance_length"].between(1.0, 3.0).all()
    assert (df["mismatches"] == 0).all()  # lossless on every evaluated prompt
    assert df["acceptance_length/humaneval"].notna().all()
    assert df["acceptance_length/sharegpt"].notna().all()
    assert len(store.metric_series(trials[1].id, "pretrain/loss")) >= 1
    # acceptance during training at the asked tokens (every 1,024 of a stage, and its end)
    by_tokens = {int(tr.overrides["pretrain.tokens"]): tr for tr in trials}
    checks = {t: store.metric_series(tr.id, "pretrain/acceptance_check_tokens")
              for t, tr in by_tokens.items()}  # fmt: skip
    assert checks == {0: [], 512: [512], 1024: [1024], 2048: [1024, 2048]}
    for tr in trials:
        assert store.metric_series(tr.id, "sft/acceptance_check_tokens") == [512]
        y = store.metric_series(tr.id, "sft/acceptance_length_during_training")
        assert len(y) == 1 and 1.0 <= y[0] <= 3.0
    fits = store.fits(sweep.id)
    assert len(fits) == 1 and fits[0]["law"] == "tokens" and fits[0]["n"] == 3
    return sweep.id


@dataclass(frozen=True)
class Smoke:
    """The module's one smoke sweep."""

    run_root: Path
    output: str
    server: str | None
    """the mlflow server it logged to; None without PostgreSQL (default MLflow store)"""

    @property
    def tracking(self) -> list[str]:
        """The ``--tracking-uri`` option every later command of this sweep passes."""
        return ["--tracking-uri", self.server] if self.server else []

    @property
    def tracker(self) -> Tracker:
        return Tracker(self.server or default_tracking_uri(self.run_root))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[Smoke]:
    root = tmp_path_factory.mktemp("smoke")
    run_root = root / "run"
    with contextlib.ExitStack() as stack:
        try:
            server: str | None = stack.enter_context(servers.mlflow_server(root / "artifacts"))
        except pytest.skip.Exception:  # no PostgreSQL: the default MLflow store under the run root
            server = None
        extra = ["--tracking-uri", server] if server else []
        yield Smoke(run_root, submit(run_root, cache_dir, *extra), server)


def _constant(store: ResultsStore, sweep_id: int) -> bool:
    """Whether every fitted trial (pretrain.tokens > 0) has the same acceptance length."""
    df = store.metrics_frame(sweep_id)
    fitted = df[df["pretrain.tokens"] > 0]["acceptance_length"]
    return fitted.nunique() == 1


def test_smoke_sweep_on_sqlite(smoke: Smoke) -> None:
    run_root, output = smoke.run_root, smoke.output
    assert "4 completed, 0 already completed (skipped), 0 failed" in output
    store = ResultsStore.sqlite_under(run_root)
    sweep_id = check_store(store)
    info = store.get_sweep("smoke-tokens")
    assert info is not None
    # MLflow: one parent run, one child per trial with params, metrics and state
    children = smoke.tracker.child_runs(info.mlflow_run_id)
    assert len(children) == 4
    for child in children:
        assert child["status"] == "FINISHED"
        assert child["tags"]["specscale.state"] == "completed"
        assert child["params"]["sft.tokens"] == "512"
        assert "acceptance_length" in child["metrics"]
        # both definitions with their CIs, overall and per set (issue 24)
        both = {"acceptance_length_prompt_mean", "acceptance_length_ci_low/humaneval"}
        assert both <= set(child["metrics"])
        assert "sft/acceptance_length_during_training" in child["metrics"]
    big = next(t for t in store.trials(sweep_id) if t.overrides.get("pretrain.tokens") == 2048)
    client = MlflowClient(smoke.server or default_tracking_uri(smoke.run_root))
    history = client.get_metric_history(big.mlflow_run_id, "pretrain/acceptance_check_tokens")
    assert [(m.step, m.value) for m in history] == [(0, 1024.0), (1, 2048.0)]
    keys = {c["tags"]["specscale.trial_key"] for c in children}
    assert keys == {t.key for t in store.trials(sweep_id)}
    # dashboard with the fitted line, or "no variation" when the tiny drafts all accept the
    # same (a constant response has no slope, R² or verdict: n/a, never a number)
    fit = store.fits(sweep_id)[0]
    html = (run_root / "smoke-tokens" / "dashboard.html").read_text()
    assert fit["form"] in html
    if _constant(store, sweep_id):
        assert "no variation" in html and "no variation" in output
        assert "ours / paper" not in output and "AIC log-linear" not in output
    else:
        assert "fit: a*log10(x) + b" in html
    assert "Acceptance during training" in html
    assert str(run_root / "smoke-tokens" / "dashboard.html") in output.replace("\n", "")


def test_resubmit_starts_no_trial(smoke: Smoke, cache_dir: Path) -> None:
    run_root = smoke.run_root
    output = submit(run_root, cache_dir, *smoke.tracking)
    assert "0 completed, 4 already completed (skipped), 0 failed" in output
    assert "started" not in output
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("smoke-tokens")
    assert info is not None
    assert all(t.attempts == 1 for t in store.trials(info.id))
    assert len(smoke.tracker.child_runs(info.mlflow_run_id)) == 4


def test_status_prints_the_trial_table(smoke: Smoke) -> None:
    run_root = smoke.run_root
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "status",
            "smoke-tokens",
            "--run-root",
            str(run_root),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("completed") >= 4
    assert "4 completed" in res.stdout


def test_fit_command_refits_from_the_db(smoke: Smoke) -> None:
    run_root = smoke.run_root
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "fit",
            "smoke-tokens",
            "--run-root",
            str(run_root),
            *smoke.tracking,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("smoke-tokens")
    assert info is not None
    if _constant(store, info.id):
        assert "fit: no variation: every acceptance_length is" in res.stdout
    else:
        assert "acceptance_length = a*log10(pretrain.tokens) + b" in res.stdout
    assert "dashboard:" in res.stdout


FAILING = """\
name: one-fails                # a sweep where one trial cannot load its target
seeds: [0]                     # one seed
grid:                          # the second target is a folder with an empty config.json
  target.model: [smollm2-135m-instruct, BROKEN]
base:                          # the smallest trial
  pretrain: {tokens: 0}
  sft: {tokens: 256, epochs: 1, seq_len: 128, responses: dataset}
  draft: {vocab_size: 2048}
  eval: {num_prompts: 1, max_new_tokens: 6, prompt_sets: [humaneval], depth: 1, topk: 1,
         num_draft_tokens: 2}
"""


def test_failing_trial_is_recorded_and_the_sweep_goes_on(tmp_path: Path, cache_dir: Path) -> None:
    broken = tmp_path / "broken-model"  # passes submit (it exists), fails the trial (no weights)
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    spec = tmp_path / "fails.yaml"
    spec.write_text(FAILING.replace("BROKEN", str(broken)))
    cmd = [
        sys.executable,
        "-m",
        "orchestrator.cli",
        "submit",
        str(spec),
        "--run-root",
        str(tmp_path / "runs"),
        "--cache-dir",
        str(cache_dir),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert res.returncode == 3, res.stdout[-3000:] + res.stderr[-3000:]  # the report, then 3
    assert "1 completed, 0 already completed (skipped), 1 failed" in res.stdout
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    info = store.get_sweep("one-fails")
    assert info is not None
    by_model = {t.config["target"]["model"]: t for t in store.trials(info.id)}
    assert by_model["smollm2-135m-instruct"].state == "completed"
    bad = by_model[str(broken)]
    assert bad.state == "failed"
    assert bad.error and "broken-model" in bad.error and "Traceback" in bad.error
    child = {
        c["tags"]["specscale.trial_key"]: c
        for c in Tracker(default_tracking_uri(tmp_path / "runs")).child_runs(info.mlflow_run_id)
    }[bad.key]
    assert child["status"] == "FAILED"
    assert "broken-model" in child["tags"]["specscale.error"]


@pytest.mark.postgres
def test_the_smoke_sweep_in_the_mlflow_server_and_its_web_ui(smoke: Smoke, tmp_path: Path) -> None:
    """MLflow's REST API holds the sweep's parent run and one child run per trial with their
    params and metrics, and the web UI (headless Chromium) shows them."""
    if smoke.server is None:
        pytest.skip("no PostgreSQL at 127.0.0.1:5432 for the mlflow server's backend")
    require_chromium()
    uri, output = smoke.server, smoke.output
    store = ResultsStore.sqlite_under(smoke.run_root)
    info = store.get_sweep(ui.SWEEP)
    assert info is not None
    trials = store.trials(info.id)
    store.close()
    experiment = ui.api(
        uri, "experiments/get-by-name?" + urllib.parse.urlencode({"experiment_name": ui.EXPERIMENT})
    )["experiment"]
    exp_id = experiment["experiment_id"]
    # submit printed where to browse: the runs table of this experiment on the server
    assert f"browse: {uri}/#/experiments/{exp_id}/runs" in " ".join(output.split())
    runs = ui.api(uri, "runs/search", {"experiment_ids": [exp_id], "max_results": 100})
    runs = runs["runs"]
    by_id = {r["info"]["run_id"]: r for r in runs}
    parent = by_id[info.mlflow_run_id]
    assert parent["info"]["run_name"] == ui.SWEEP and parent["info"]["status"] == "FINISHED"
    assert ui.flat(parent, "tags")["specscale.kind"] == "sweep"
    assert ui.flat(parent, "params")["name"] == ui.SWEEP
    assert "fit.tokens.a" in ui.flat(parent, "metrics")  # the law's fit reached MLflow
    children = [
        r for r in runs if ui.flat(r, "tags").get("mlflow.parentRunId") == info.mlflow_run_id
    ]
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
        params, metrics = ui.flat(child, "params"), ui.flat(child, "metrics")
        assert child["info"]["status"] == "FINISHED"
        assert params["pretrain.tokens"] == str(trial.overrides["pretrain.tokens"])
        assert params["sft.tokens"] == "512"
        assert 1.0 <= float(metrics["acceptance_length"]) <= 3.0
    artifacts = ui.api(uri, f"artifacts/list?run_id={info.mlflow_run_id}")
    assert "dashboard.html" in {f["path"] for f in artifacts.get("files", [])}

    # -- the web UI ----------------------------------------------------------------------------
    child = max(children, key=lambda c: int(ui.flat(c, "params")["pretrain.tokens"]))
    ui.check_ui(uri, exp_id, parent, children, child, tmp_path)
