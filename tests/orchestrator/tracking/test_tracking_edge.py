"""Tracking edge cases seen in public MLflow and Ray Tune bug reports, against real backends.

Each test names the reports it guards against. MLflow runs on SQLite files under ``tmp_path``
(and a file store where noted); the results store is SQLite; one test drives the real CLI.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from mlflow.entities import Param
from mlflow.utils.validation import _validate_metric_name, _validate_param_name

from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import TAG_NONFINITE, Tracker, default_tracking_uri
from orchestrator.tracking.values import MAX_KEY_LEN, MAX_PARAM_VALUE_LEN, flatten, mlflow_key

ROOT = Path(__file__).resolve().parents[3]
ENV_SINKS = ("MLFLOW_TRACKING_URI", "SPECSCALE_DB_URL", "RAY_ADDRESS")
"""environment variables the CLI reads as --tracking-uri, --db-url, --address"""
SMOKE = ROOT / "sweeps" / "smoke-tokens.yaml"


@pytest.fixture(scope="module")
def tracker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tracker]:
    """One MLflow SQLite DB for the module (its migrations take seconds)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        t = Tracker(default_tracking_uri(tmp_path_factory.mktemp("mlflow")), experiment="edge")
        yield t
        t.close()


def _valid_everywhere(key: str) -> None:
    """MLflow's own key checks (Linux rules) plus the Windows rule (no ':') and 250 bytes."""
    _validate_param_name(key)
    _validate_metric_name(key)
    assert ":" not in key
    assert len(key.encode()) <= MAX_KEY_LEN


# -- keys: unicode, ':' and other characters MLflow refuses --------------------------------


@pytest.mark.parametrize(
    "name",
    ["pretrain.tokens", "acceptance_length/humaneval", "draft ms", "akzeptanz/Länge", "受理/長さ"],
)
def test_valid_keys_are_unchanged(name: str) -> None:
    assert mlflow_key(name) == name
    _valid_everywhere(name)


@pytest.mark.parametrize(
    "name",
    [
        "acceptance_length:humaneval",  # mlflow/mlflow#12940: ':' refused (still on Windows)
        "val/AR@100",  # verl-project/verl#984, open-mmlab: '@' refused
        "<script>alert(1)</script>",
        "/leading/slash",
        "trailing/",
        "a//b",
        "./x",
        "..",
        "..hidden",
        "",
        "tab\there",
        "x" * 300,  # MLflow's 250-character key limit
        "受" * 200,  # 200 characters, 600 UTF-8 bytes: too long as a file name
    ],
)
def test_invalid_keys_are_mended_deterministically(name: str) -> None:
    key = mlflow_key(name)
    _valid_everywhere(key)
    assert key == mlflow_key(name)  # deterministic
    assert key.endswith("-" + hashlib.sha256(name.encode()).hexdigest()[:8])


def test_keys_that_mend_alike_stay_distinct() -> None:
    names = ["a:b", "a@b", "a_b", "a<b", "a/b", "a//b"]
    assert len({mlflow_key(n) for n in names}) == len(names)
    long = ["x" * 300 + "1", "x" * 300 + "2"]
    assert mlflow_key(long[0]) != mlflow_key(long[1])


def test_unicode_and_colon_in_names_tags_params_and_metrics(
    tracker: Tracker, tmp_path: Path
) -> None:
    """mlflow/mlflow#12940 (':' in param/metric names), open-mmlab/mmocr#1558 (':' in metric
    names from an evaluator): such names are logged under mended keys, never refused; the SQL
    store keeps the original names."""
    sweep = "スイープ:v1 <b>x</b>"
    config = {"data": {"mix:web": 0.5, "日本語": 1}, "eval": {"sets": ["a:b"]}, "seed": 0}
    metrics = {"acceptance_length/humaneval:v2": 1.25, "受理/長さ": 1.5, "val/AR@100": 0.5}
    parent = tracker.start_sweep_run(sweep, {"name": sweep, "base": config}, None)
    child = tracker.start_trial_run(
        parent, sweep, "0123456789abcdef", config, None, overrides={"data.mix:web": 0.5}
    )
    tracker.log_metrics(child, metrics)
    tracker.log_series(child, "loss:pretrain", [2.0, 1.0])
    tracker.set_state(child, "completed")

    p = tracker._client.get_run(parent)
    assert p.info.run_name == sweep
    assert p.data.tags["specscale.sweep"] == sweep
    assert p.data.params["name"] == sweep
    c = tracker._client.get_run(child)
    assert c.data.tags["specscale.sweep"] == sweep
    assert c.data.params[mlflow_key("data.mix:web")] == "0.5"
    assert c.data.params["data.日本語"] == "1"
    assert c.data.params["eval.sets"] == '["a:b"]'
    for name, value in metrics.items():
        assert c.data.metrics[mlflow_key(name)] == value
    assert c.data.metrics[mlflow_key("loss:pretrain")] == 1.0

    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep(sweep, "draft_train", "name: x\n", "x.yaml")
    store.add_trials(sweep_id, [("0123456789abcdef", config, {"data.mix:web": 0.5})])
    (trial,) = store.trials(sweep_id)
    store.log_metrics(trial.id, metrics)
    frame = store.metrics_frame(sweep_id)
    assert store.get_sweep(sweep) is not None
    assert trial.config == config
    for name, value in metrics.items():
        assert frame.loc[0, name] == value
    store.close()


# -- NaN and inf -----------------------------------------------------------------------------


def test_nan_and_inf_metrics(tracker: Tracker, tmp_path: Path) -> None:
    """NaN is logged as NaN (MLflow's is_nan column; optuna/optuna#863 shows a NaN objective
    reaching MLflow, mlflow/mlflow#1234 an old refusal). +-inf would be stored as +-1.8e308
    (mlflow/mlflow#22826), so they go to the ``specscale.nonfinite`` tag; SQL keeps all three."""
    parent = tracker.start_sweep_run("nonfinite", {}, None)
    run = tracker.start_trial_run(parent, "nonfinite", "f" * 16, {}, None)
    values = {"a": math.nan, "b": math.inf, "c": -math.inf, "d": 1.0}
    tracker.log_metrics(run, values)
    tracker.log_series(run, "loss", [1.0, math.nan, math.inf, 0.5])
    tracker.log_series(run, "diverged", [math.inf] * 25)
    tracker.set_state(run, "completed")

    data = tracker._client.get_run(run).data
    assert math.isnan(data.metrics["a"]) and data.metrics["d"] == 1.0
    assert "b" not in data.metrics and "c" not in data.metrics
    assert "diverged" not in data.metrics
    history = tracker._client.get_metric_history(run, "loss")
    steps = {m.step: m.value for m in history}
    assert set(steps) == {0, 1, 3} and math.isnan(steps[1]) and steps[3] == 0.5
    notes = json.loads(data.tags[TAG_NONFINITE])
    assert notes["b"] == "inf@0" and notes["c"] == "-inf@0" and notes["loss"] == "inf@2"
    assert notes["diverged"].split()[-1] == "+5"
    assert len(notes["diverged"].split()) == 21

    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep("nonfinite", "draft_train", "name: nonfinite\n", "x.yaml")
    store.add_trials(sweep_id, [("f" * 16, {}, {})])
    (trial,) = store.trials(sweep_id)
    store.log_metrics(trial.id, values)
    store.log_metric_series(trial.id, "loss", [1.0, math.nan, math.inf, 0.5])
    row = store.metrics_frame(sweep_id).iloc[0]
    assert math.isnan(row["a"]) and row["b"] == math.inf and row["c"] == -math.inf
    series = store.metric_series(trial.id, "loss")
    assert series[0] == 1.0 and math.isnan(series[1]) and series[2] == math.inf
    store.close()


def test_mlflow_ui_api_serves_runs_with_nan(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run page of MLflow's UI failed on NaN metrics (mlflow/mlflow#16555, #15535; fixed
    by #16628 in the GraphQL handler the page uses). Ask the server's own handlers for a run
    with a NaN metric, as the UI does."""
    from mlflow.server import app, handlers
    from mlflow.tracking._tracking_service import utils as mlflow_utils

    parent = tracker.start_sweep_run("nan-ui", {}, None)
    tracker.log_metrics(parent, {"baseline.acceptance_length": math.nan, "ok": 2.0})
    monkeypatch.setenv("_MLFLOW_SERVER_FILE_STORE", tracker.tracking_uri)
    monkeypatch.setattr(handlers, "_tracking_store", None)
    # the server sets the global tracking URI and MLFLOW_TRACKING_URI: undone at teardown
    monkeypatch.setattr(mlflow_utils, "_tracking_uri", mlflow_utils._tracking_uri)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = app.test_client()
    query = (
        "query GetRun($input: MlflowGetRunInput) { mlflowGetRun(input: $input) { "
        "run { data { metrics { key value } } } apiError { code message } } }"
    )
    res = client.post("/graphql", json={"query": query, "variables": {"input": {"runId": parent}}})
    assert res.status_code == 200, res.data[:500]
    body = res.get_json()
    assert not body.get("errors"), body
    metrics = {m["key"]: m["value"] for m in body["data"]["mlflowGetRun"]["run"]["data"]["metrics"]}
    assert metrics["ok"] == 2.0 and "baseline.acceptance_length" in metrics
    rest = client.get(f"/api/2.0/mlflow/runs/get?run_id={parent}")
    assert rest.status_code == 200
    monkeypatch.setattr(handlers, "_tracking_store", None)


# -- long values, many long params, file names ----------------------------------------------


def test_long_param_values_whole_in_sql_hashed_in_mlflow(tracker: Tracker, tmp_path: Path) -> None:
    """mlflow/mlflow#4992, #10512 (param values over the limit refused), microsoft/qlib#1317:
    MLflow gets the first characters and a hash of the whole value; SQL keeps it whole."""
    one, two = "é" * 9000 + "1", "é" * 9000 + "2"
    config = {"note": one, "other": two, "short": "x"}
    run = tracker.start_trial_run(
        tracker.start_sweep_run("long", {}, None), "long", "a" * 16, config, None
    )
    params = tracker._client.get_run(run).data.params
    for key, value in (("note", one), ("other", two)):
        assert len(params[key]) == MAX_PARAM_VALUE_LEN
        assert params[key].endswith(f"[sha256:{hashlib.sha256(value.encode()).hexdigest()[:12]}]")
    assert params["note"] != params["other"] and params["short"] == "x"

    store = ResultsStore.sqlite_under(tmp_path)
    sweep_id = store.upsert_sweep("long", "draft_train", "name: long\n", "x.yaml")
    store.add_trials(sweep_id, [("a" * 16, config, {})])
    assert store.trials(sweep_id)[0].config == config
    store.close()


def _many_long_params(n: int) -> dict[str, Any]:
    """``n`` params with 120-character unicode keys and 6000-character unicode values."""
    return {f"k{i:03d}/" + "鍵" * 115: "値" * 7000 + str(i) for i in range(n)}


def test_many_long_params_fit_mlflow_batch_limits(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow servers refuse log_batch requests over 1 MB and over 100 params
    (mlflow/utils/validation.py MAX_BATCH_LOG_REQUEST_SIZE): params go in batches under both."""
    params = _many_long_params(150)
    sizes: list[tuple[int, int]] = []
    real = tracker._client.log_batch

    def spy(run_id: str, *args: Any, **kwargs: Any) -> Any:
        batch: list[Param] = kwargs.get("params") or []
        if batch:
            size = sum(len(json.dumps(p.key)) + len(json.dumps(p.value)) for p in batch)
            sizes.append((len(batch), size))
        return real(run_id, *args, **kwargs)

    monkeypatch.setattr(tracker._client, "log_batch", spy)
    run = tracker.start_sweep_run("many", params, None)
    monkeypatch.undo()
    logged = tracker._client.get_run(run).data.params
    assert len(logged) == len(params)
    assert len(sizes) > 2 and all(n <= 100 and size < 1_000_000 for n, size in sizes)
    for key in params:
        _valid_everywhere(mlflow_key(key))


def test_file_store_writes_no_over_long_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ray-project/ray#1463 and #29586 ("File name too long" from trial names built of many
    params): a file-backed MLflow store writes each param and metric key as a file name.
    MLflow 3.17 refuses file stores unless MLFLOW_ALLOW_FILE_STORE=true (users may opt in)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    root = tmp_path / "mlruns"
    t = Tracker(root.as_uri(), experiment="files")
    params = {"鍵" * 200: "v", "x" * 400: "v", **_many_long_params(20)}
    parent = t.start_sweep_run("files", params, None)
    child = t.start_trial_run(parent, "files", "b" * 16, params, None)
    t.log_metrics(child, {"受理/" + "長" * 200: 1.0, "m:" + "x" * 300: 2.0})
    t.set_state(child, "completed")
    assert len(t._client.get_run(child).data.params) == len(params)
    names = [p.name for p in root.rglob("*")]
    assert names and max(len(n.encode()) for n in names) <= 255


def test_trial_folders_use_the_trial_key(tmp_path: Path) -> None:
    """Trial artifact folders are named by the 16-hex trial key, not by the params."""
    from orchestrator.driving.runner import RunPaths

    paths = RunPaths(run_root=tmp_path, cache_dir=tmp_path / "cache")
    key = "0123456789abcdef"
    assert paths.trial_dir("s" * 200, key).name == key


def test_flatten_keys_are_mended() -> None:
    flat = flatten({"deepspeed": {"zero:opt": {"stage": 2}}, "pretrain": {"tokens": 5}})
    assert flat == {mlflow_key("deepspeed.zero:opt.stage"): "2", "pretrain.tokens": "5"}


# -- MLFLOW_RUN_ID ----------------------------------------------------------------------------


def _snapshot(tracker: Tracker, run_id: str) -> dict[str, Any]:
    run = tracker._client.get_run(run_id)
    return {
        "status": run.info.status,
        "params": dict(run.data.params),
        "tags": {k: v for k, v in run.data.tags.items()},
        "metrics": dict(run.data.metrics),
        "children": tracker.child_runs(run_id),
    }


def test_mlflow_run_id_in_env_does_not_take_over(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow/mlflow#15713 (MLFLOW_RUN_ID makes nested runs overwrite the parent), #1348."""
    other = tracker.start_sweep_run("someone-else", {"p": 1}, None)
    before = _snapshot(tracker, other)
    monkeypatch.setenv("MLFLOW_RUN_ID", other)
    parent = tracker.start_sweep_run("mine", {"q": 2}, None)
    child = tracker.start_trial_run(parent, "mine", "c" * 16, {"r": 3}, None)
    tracker.log_metrics(child, {"acceptance_length": 1.1})
    tracker.log_metrics(parent, {"fit.tokens.a": 0.1})
    tracker.set_state(child, "completed")
    tracker.set_state(parent, "completed")
    assert other not in (parent, child)
    assert tracker._client.get_run(child).data.tags["mlflow.parentRunId"] == parent
    assert _snapshot(tracker, other) == before


# -- the real CLI: MLFLOW_RUN_ID and a password in --db-url ---------------------------------

TINY = """\
name: {name}                  # a two-trial sweep for the tracking edge-case test
seeds: [0]                    # one seed
grid:                         # two budgets
  pretrain.tokens: [0, 256]
base:                         # the smallest trial (as in test_submit_e2e)
  pretrain: {{seq_len: 128}}
  sft: {{tokens: 256, epochs: 1, seq_len: 128, responses: dataset}}
  draft: {{vocab_size: 2048}}
  eval: {{num_prompts: 1, max_new_tokens: 6, prompt_sets: [humaneval], depth: 1, topk: 1,
         num_draft_tokens: 2}}
"""


@pytest.mark.slow  # a full submit; the redaction and run-id checks have unit tests here
@pytest.mark.postgres
def test_cli_submit_with_foreign_mlflow_run_id_and_db_password(
    tmp_path: Path, cache_dir: Path
) -> None:
    """One real submit on PostgreSQL with ``MLFLOW_RUN_ID`` set to another run and a password
    in ``--db-url``: the sweep gets its own parent run, the other run is untouched, and the
    password is in no output, MLflow param or tag, file under the run root or DB row."""
    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=test", autocommit=True, connect_timeout=5
        )
    except psycopg.OperationalError:
        pytest.skip("no PostgreSQL at 127.0.0.1:5432")
    tag = uuid.uuid4().hex[:10]
    secret, schema, name = f"s3cret{tag}", f"track_{tag}", f"track-{tag}"
    url = f"postgresql://postgres:{secret}@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    run_root = tmp_path / "runs"
    other_tracker = Tracker(default_tracking_uri(run_root))  # the CLI's experiment
    other = other_tracker.start_sweep_run("someone-else", {"p": 1}, None)
    before = _snapshot(other_tracker, other)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.format(name=name))
    conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        env = {k: v for k, v in os.environ.items() if k not in ENV_SINKS}
        env["MLFLOW_RUN_ID"] = other
        cmd = [sys.executable, "-m", "orchestrator.cli", "submit", str(spec)]
        cmd += ["--run-root", str(run_root), "--cache-dir", str(cache_dir), "--db-url", url]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
        output = res.stdout + res.stderr
        assert res.returncode == 0, output[-3000:]
        assert "2 completed" in output and "postgres:***@" in output
        assert secret not in output

        store = ResultsStore(url)
        info = store.get_sweep(name)
        assert info is not None and info.mlflow_run_id not in (None, other)
        assert secret not in info.spec_yaml
        store.close()
        assert len(other_tracker.child_runs(info.mlflow_run_id)) == 2
        assert _snapshot(other_tracker, other) == before

        runs = other_tracker._client.search_runs([other_tracker.experiment_id])
        for run in runs:
            texts = [*run.data.params.values(), *run.data.tags.values(), run.info.run_name]
            assert not any(secret in str(t) for t in texts), run.info.run_id
        for path in run_root.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        assert tables
        for (table,) in tables:
            rows = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t').fetchall()
            assert not any(secret in r[0] for r in rows), table
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()


def test_dashboards_with_nan_and_inf_metrics(tmp_path: Path) -> None:
    """NaN and inf reach the dashboards as such from SQL: pages are written, plotly gets strict
    JSON (null, never NaN/Infinity), the trial table shows inf and leaves NaN empty."""
    from analysis.review import review_law
    from dashboards.sweep_page import write_sweep_dashboard
    from dashboards.tradeoff import depth_tradeoff_figure
    from dashboards.variant_page import write_variant_dashboard

    trials = pd.DataFrame(
        {
            "trial_key": [f"k{i}" for i in range(6)],
            "state": ["completed"] * 6,
            "pretrain.tokens": [0, 1e3, 1e4, 1e5, 1e6, 1e4],
            "draft.layers": [1, 1, 2, 2, 3, 3],
            "seed": [0] * 6,
            "variant": ["a", "a", "b", "b", "c", "c"],
            "acceptance_length": [1.0, math.nan, 1.2, math.inf, 1.4, -math.inf],
            "acceptance_length/humaneval": [math.nan, 1.1, math.inf, 1.3, 1.4, 1.5],
            "speedup": [math.inf] * 6,
            "draft.ms_per_step": [math.nan] * 6,
        }
    )
    review = review_law(trials, "pretrain.tokens", "acceptance_length", law="tokens")
    tradeoff = depth_tradeoff_figure(trials)
    assert tradeoff is not None
    pages = [
        write_sweep_dashboard(
            tmp_path / "sweep.html",
            sweep_name="nonfinite",
            trials=trials,
            review=review,
            extra=[("depth", tradeoff)],
        ),
        write_variant_dashboard(
            tmp_path / "variants.html",
            sweep_name="nonfinite",
            trials=trials,
            metrics=["speedup", "draft.ms_per_step"],
        ),
    ]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        figures = _figures(text)
        assert figures, page
        assert ">inf<" in text
    assert review.fit.excluded >= 3 and review.counts.nan == 3


def _figures(text: str) -> list[tuple[list[Any], dict[str, Any]]]:
    """(data, layout) of every ``Plotly.newPlot`` call, parsed as strict JSON."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"non-JSON constant {constant} in a figure")

    decoder = json.JSONDecoder(parse_constant=refuse)
    out = []
    start = 0
    while (at := text.find("Plotly.newPlot(", start)) >= 0:
        pos = at + len("Plotly.newPlot(")
        values = []
        for _ in range(3):  # div id, data, layout
            while text[pos] in " \n\t,":
                pos += 1
            value, pos = decoder.raw_decode(text, pos)
            values.append(value)
        out.append((values[1], values[2]))
        start = pos
    return out
