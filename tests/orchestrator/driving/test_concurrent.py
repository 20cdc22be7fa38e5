"""Two sweeps submitted at once from two processes to one results DB and one MLflow: on a new
SQLite run root, and on PostgreSQL with an ``mlflow server`` (PostgreSQL backend) on loopback."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker, default_tracking_uri
from tests.orchestrator import servers
from tests.orchestrator.driving.test_control import spec, start
from tests.orchestrator.pg import fresh_schema

VALUES = [1, 2, 3, 4]


def _specs(tmp_path: Path) -> list[Path]:
    body = f"grid: {{value: {VALUES}}}\nbase: {{seconds: 2}}\nresources: {{num_cpus: 1}}\n"
    return [spec(tmp_path, name, body) for name in ("left", "right")]


def _submit_both(paths: list[Path], *extra: str) -> None:
    procs = [start("submit", str(p), *extra) for p in paths]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        outs.append(out)
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
        assert "4 completed, 0 already completed (skipped), 0 failed" in out, out[-3000:]
        assert "locked" not in out.lower()


def _check_store(store: ResultsStore) -> dict[str, str]:
    parents = {}
    for name in ("left", "right"):
        info = store.get_sweep(name)
        assert info is not None and info.mlflow_run_id
        parents[name] = info.mlflow_run_id
        trials = store.trials(info.id)
        assert len(trials) == len({t.key for t in trials}) == len(VALUES)
        assert {(t.state, t.attempts) for t in trials} == {("completed", 1)}
        frame = store.metrics_frame(info.id)
        assert sorted(frame["metric.value"]) == [float(v) for v in VALUES]
        for t in trials:
            assert len(store.metric_series(t.id, "ticks")) == 20
    assert len(store.list_sweeps()) == 2
    return parents


def _check_mlflow(tracker: Tracker, parents: dict[str, str]) -> None:
    for parent in parents.values():
        children = tracker.child_runs(parent)
        assert len(children) == len(VALUES)
        assert {c["status"] for c in children} == {"FINISHED"}
        assert sorted(c["metrics"]["value"] for c in children) == [float(v) for v in VALUES]


def test_two_sweeps_at_once_on_a_new_sqlite_run_root(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    _submit_both(_specs(tmp_path), "--run-root", str(run_root))
    store = ResultsStore.sqlite_under(run_root)
    parents = _check_store(store)
    _check_mlflow(Tracker(default_tracking_uri(run_root)), parents)


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """``mlflow server`` on a free loopback port with a PostgreSQL backend (its own schema)."""
    with servers.mlflow_server(tmp_path / "artifacts") as uri:
        yield uri


# PostgreSQL + mlflow server submits stay in CI: test_submit_e2e (mlflow server), test_control (PG)
@pytest.mark.slow
@pytest.mark.postgres
def test_two_sweeps_at_once_on_postgresql_and_an_mlflow_server(
    tmp_path: Path, mlflow_server: str
) -> None:
    with fresh_schema("conc") as (_schema, db_url):
        _submit_both(
            _specs(tmp_path),
            "--run-root", str(tmp_path / "run"),
            "--db-url", db_url,
            "--tracking-uri", mlflow_server,
        )  # fmt: skip
        store = ResultsStore(db_url)
        parents = _check_store(store)
        store.close()
    _check_mlflow(Tracker(mlflow_server), parents)
    # the REST API lists both parent runs with their child runs
    request = urllib.request.Request(
        f"{mlflow_server}/api/2.0/mlflow/runs/search",
        data=json.dumps({"experiment_ids": [Tracker(mlflow_server).experiment_id]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        runs = json.load(r)["runs"]
    assert len(runs) == 2 + 2 * len(VALUES)
