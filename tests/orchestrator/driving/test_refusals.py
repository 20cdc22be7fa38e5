"""Refusals write nothing: a resubmit that changes an existing sweep's grid or search space,
and an MLflow tracking URI that is the results DB itself (SQLite and PostgreSQL).

Real CLI processes, the sleep workload, a local Ray: each submit takes seconds.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import optuna
import psycopg
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.errors import StoreError
from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import default_tracking_uri
from tests.orchestrator.driving.test_control import cli, spec
from tests.orchestrator.pg import PG_DSN, PG_URL, fresh_schema

SEARCH = (
    "search:\n  metric: value\n  n_trials: 2\n  sampler: random\n"
    "  space: {{value: {kind}}}\nbase: {{seconds: 0.1}}\n"
)


def _snapshot(run_root: Path, name: str) -> tuple[str, int, list[str], list[str]]:
    """(stored spec, trials, Optuna trial states, MLflow run statuses) of a sweep."""
    store = ResultsStore.sqlite_under(run_root)
    try:
        info = store.get_sweep(name)
        assert info is not None
        n = len(store.trials(info.id))
        spec_yaml = info.spec_yaml
    finally:
        store.close()
    url = f"sqlite:///{run_root / 'results.db'}"
    study = optuna.load_study(study_name=name, storage=url)
    states = sorted(t.state.name for t in study.trials)
    client = MlflowClient(default_tracking_uri(run_root))
    exp = client.get_experiment_by_name("specscale")
    assert exp is not None
    runs = sorted(r.info.status for r in client.search_runs([exp.experiment_id]))
    return spec_yaml, n, states, runs


@pytest.fixture(scope="module")
def submitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """One run root holding a finished 2-trial search ("study") and a 2-trial grid ("grid")."""
    tmp = tmp_path_factory.mktemp("refusals")
    run_root = tmp / "run"
    study = spec(tmp, "study", SEARCH.format(kind="{float: [0.0, 1.0]}"))
    grid = spec(tmp, "grid", "grid:\n  value: [1, 2]\nbase: {seconds: 0.1}\n")
    for path in (study, grid):
        res = cli("submit", str(path), "--run-root", str(run_root))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return run_root, study, grid


def test_a_changed_search_space_is_refused_and_writes_nothing(
    tmp_path: Path, submitted: tuple[Path, Path, Path]
) -> None:
    run_root = submitted[0]
    before = _snapshot(run_root, "study")
    assert before[2] == ["COMPLETE", "COMPLETE"] and "RUNNING" not in before[3]
    changed = tmp_path / "changed" / "study.yaml"
    changed.parent.mkdir()
    changed.write_text(
        "name: study\nworkload: sleep\n" + SEARCH.format(kind="{choice: [0.25, 0.5]}")
    )
    res = cli("submit", str(changed), "--run-root", str(run_root))
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{changed}:" in lines[0], res.stderr
    line = int(lines[0].split(f"{changed}:", 1)[1].split(":", 1)[0])
    assert changed.read_text().splitlines()[line - 1].lstrip().startswith(("search", "space"))
    assert "Fix: give this spec a new name" in lines[0]
    assert _snapshot(run_root, "study") == before  # spec, trials, study and runs unchanged
    status = cli("status", "study", "--run-root", str(run_root))
    assert status.returncode == 0 and "2 completed" in status.stdout


def test_a_changed_grid_is_refused_and_the_original_resumes(
    submitted: tuple[Path, Path, Path],
) -> None:
    run_root, _, path = submitted
    stored = path.read_text()
    path.write_text(stored.replace("[1, 2]", "[1, 2, 3]"))
    res = cli("submit", str(path), "--run-root", str(run_root))
    assert res.returncode == 2 and f"{path}:4:" in res.stderr and "grid" in res.stderr
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("grid")
    assert info is not None and info.spec_yaml == stored and len(store.trials(info.id)) == 2
    store.close()
    path.write_text(stored.replace("name: grid", "name: grid\ndescription: same trials"))
    res = cli("submit", str(path), "--run-root", str(run_root))  # only the description changed
    assert res.returncode == 0 and "2 trials already completed: skipped" in res.stdout


def test_status_marks_running_trials_of_a_gone_driver(
    tmp_path: Path, submitted: tuple[Path, Path, Path]
) -> None:
    run_root = tmp_path / "copy"  # a copy of the results DB, as a driver killed mid-trial left it
    run_root.mkdir()
    shutil.copy(submitted[0] / "results.db", run_root / "results.db")
    with sqlite3.connect(run_root / "results.db") as db:
        grid = "(SELECT id FROM ss_sweeps WHERE name = 'grid')"
        first = f"(SELECT min(id) FROM ss_trials WHERE sweep_id = {grid})"
        db.execute(f"UPDATE ss_trials SET state = 'running' WHERE id = {first}")
    res = cli("status", "grid", "--run-root", str(run_root))
    assert res.returncode == 0
    assert "running (driver gone)" in res.stdout and "1 completed" in res.stdout
    assert "no driver holds the sweep" in res.stdout


def test_mlflow_in_the_results_sqlite_file_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    run_root = tmp_path / "run"
    path = spec(tmp_path, "same", "grid:\n  value: [1]\nbase: {seconds: 0.1}\n")
    uri = f"sqlite:///{run_root / 'results.db'}"
    res = cli("submit", str(path), "--run-root", str(run_root), "--tracking-uri", uri)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "is the results DB" in res.stderr and "Fix:" in res.stderr
    assert not run_root.exists()  # nothing written: no run root, no DB files


@pytest.mark.postgres
def test_mlflow_in_the_results_postgresql_database_is_refused(tmp_path: Path) -> None:
    with fresh_schema("refuse") as (schema, db_url):
        path = spec(tmp_path, "same", "grid:\n  value: [1]\nbase: {seconds: 0.1}\n")
        run_root = tmp_path / "run"
        args = ["--run-root", str(run_root), "--db-url", db_url, "--tracking-uri", PG_URL]
        res = cli("submit", str(path), *args)
        assert res.returncode == 2 and "is the results DB" in res.stderr, res.stderr
        with pytest.raises(StoreError):  # the results store made no table: nothing to open
            ResultsStore(db_url, create=False)
        with psycopg.connect(PG_DSN, autocommit=True) as conn:  # nor did MLflow
            query = "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s"
            row = conn.execute(query, (schema,)).fetchone()
        assert row is not None and row[0] == 0
        assert not run_root.exists()


def test_the_same_trials_written_otherwise_resubmit(submitted: tuple[Path, Path, Path]) -> None:
    """Reordered grid values and a default written out expand to the same trial keys: the same
    experiment, resubmitted (nothing runs)."""
    run_root, _, grid = submitted
    same = (
        grid.read_text()
        .replace("[1, 2]", "[2, 1]")
        .replace("{seconds: 0.1}", "{seconds: 0.1, fail: never}")
    )
    grid.write_text(same)
    res = cli("submit", str(grid), "--run-root", str(run_root))
    assert res.returncode == 0 and "2 trials already completed: skipped" in res.stdout, res.stderr


def test_more_resources_than_this_machine_are_refused(tmp_path: Path) -> None:
    path = spec(tmp_path, "big", "grid:\n  value: [1]\nresources:\n  num_cpus: 512\n")
    res = cli("submit", str(path), "--run-root", str(tmp_path / "run"))
    assert res.returncode == 2 and f"{path}:6: resources.num_cpus" in res.stderr, res.stderr
    assert "Fix:" in res.stderr and not (tmp_path / "run").exists()


def test_cancel_refuses_mlflow_in_the_results_db(submitted: tuple[Path, Path, Path]) -> None:
    run_root = submitted[0]
    uri = f"sqlite:///{run_root / 'results.db'}"
    res = cli("cancel", "grid", "--run-root", str(run_root), "--tracking-uri", uri)
    assert res.returncode == 2 and "is the results DB" in res.stderr
    with sqlite3.connect(run_root / "results.db") as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "experiments" not in tables  # no MLflow table written into the results DB
