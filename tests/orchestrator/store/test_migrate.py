"""Alembic migrations of the results store: empty to head, old revisions, refusals, races."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, create_engine, inspect, text

from orchestrator.errors import StoreError
from orchestrator.store import migrate
from orchestrator.store.results import ResultsStore, _Base
from tests.orchestrator.pg import fresh_schema


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


def _ctx(conn: Connection) -> MigrationContext:
    return MigrationContext.configure(conn, opts={"version_table": migrate.VERSION_TABLE})


def _columns(url: str, table: str) -> set[str]:
    engine = create_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns(table)}
    finally:
        engine.dispose()


def _stop_at(url: str, revision: str, *, drop_version_table: bool = False) -> None:
    """Build the database only up to ``revision`` (optionally as before Alembic existed)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), revision)
        if drop_version_table:
            conn.execute(text(f"DROP TABLE {migrate.VERSION_TABLE}"))
    engine.dispose()


def _seed_old_rows(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO ss_sweeps (id, name, workload, spec_yaml, spec_path, created_at, "
                "updated_at) VALUES (1, 'old', 'draft_train', 'x', 'x.yaml', "
                "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO ss_trials (sweep_id, trial_key, config_json, overrides_json, state, "
                "attempts) VALUES (1, 'k1', '{}', '{}', 'completed', 1)"
            )
        )
    engine.dispose()


def test_empty_to_head_matches_the_models(tmp_path: Path) -> None:
    url = _sqlite_url(tmp_path)
    store = ResultsStore(url)
    assert store.schema_found == "none"
    store.close()
    engine = create_engine(url)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        diff = compare_metadata(_ctx(conn), _Base.metadata)
    engine.dispose()
    assert diff == [], f"ORM models and migrations disagree: {diff}"


@pytest.mark.postgres
def test_empty_to_head_matches_the_models_on_postgresql() -> None:
    with fresh_schema("mig") as (_schema, url):
        ResultsStore(url).close()
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == migrate.head_revision()
            diff = compare_metadata(_ctx(conn), _Base.metadata)
        engine.dispose()
        assert diff == [], f"ORM models and migrations disagree: {diff}"


@pytest.mark.parametrize("pre_alembic", [False, True], ids=["at-0001", "pre-alembic"])
def test_an_old_database_is_upgraded_and_keeps_its_rows(tmp_path: Path, pre_alembic: bool) -> None:
    url = _sqlite_url(tmp_path)
    _stop_at(url, "0001", drop_version_table=pre_alembic)
    _seed_old_rows(url)
    assert "cancel_requested_at" not in _columns(url, "ss_sweeps")
    store = ResultsStore(url)
    assert store.schema_found == ("pre-alembic" if pre_alembic else "0001")
    sweep = store.get_sweep("old")
    assert sweep is not None
    assert [(t.key, t.state) for t in store.trials(sweep.id)] == [("k1", "completed")]
    store.close()
    assert {"driver", "heartbeat_at", "cancel_requested_at"} <= _columns(url, "ss_sweeps")


def test_a_newer_database_is_refused(tmp_path: Path) -> None:
    url = _sqlite_url(tmp_path)
    ResultsStore(url).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="revision '9999'.*newer version") as err:
        ResultsStore(url)
    assert "\n" not in str(err.value)


def test_opening_leaves_no_lock_file_and_a_db_at_head_takes_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating, reopening and a refused newer database leave only the database file
    (issue 33: every open left an empty ``results.db.migrate.lock``)."""
    url = _sqlite_url(tmp_path)

    def files() -> list[str]:
        return sorted(p.name for p in tmp_path.iterdir())

    ResultsStore(url).close()  # created: migrated under the lock, which is then removed
    assert files() == ["results.db"]
    locks: list[str] = []
    real = migrate.FileLock

    def counting(path: str, **kwargs: object) -> object:
        locks.append(str(path))
        return real(path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(migrate, "FileLock", counting)
    ResultsStore(url).close()  # at head: read, not locked
    assert locks == [] and files() == ["results.db"]
    old = tmp_path / "old.db"
    _stop_at(f"sqlite:///{old}", "0001")  # below head: upgraded under the lock, then it is gone
    ResultsStore(f"sqlite:///{old}").close()
    assert len(locks) == 1 and files() == ["old.db", "results.db"]
    old.unlink()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StoreError, match="newer version"):
        ResultsStore(url)
    assert files() == ["results.db"]


def test_optunas_alembic_version_table_is_left_alone(tmp_path: Path) -> None:
    url = _sqlite_url(tmp_path)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('v3.2.0.a')"))
    engine.dispose()
    ResultsStore(url).close()
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).all() == [
            ("v3.2.0.a",)
        ]
    engine.dispose()


def _open_and_write(url: str, worker: int, n: int) -> None:
    store = ResultsStore(url)
    sweep_id = store.upsert_sweep("shared", "draft_train", "x", "x.yaml")
    trials = [(f"w{worker}-{i:03d}", {"i": i}, {"i": i}) for i in range(n)]
    store.add_trials(sweep_id, trials)
    for info in store.trials(sweep_id):
        if info.key.startswith(f"w{worker}-"):
            store.mark_running(info.id, None)
            store.log_metrics(info.id, {"acceptance_length": 1.0 + worker, "loss": float("nan")})
            store.mark_completed(info.id, 0.1)
    store.close()


def _race(url: str, workers: int, n: int) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_open_and_write, args=(url, w, n)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    assert [p.exitcode for p in procs] == [0] * workers


def _check_race(url: str, workers: int, n: int) -> None:
    store = ResultsStore(url)
    sweep = store.get_sweep("shared")
    assert sweep is not None
    trials = store.trials(sweep.id)
    assert len(trials) == workers * n == len({t.key for t in trials})
    assert {t.state for t in trials} == {"completed"}
    frame = store.metrics_frame(sweep.id)
    assert frame["acceptance_length"].notna().sum() == workers * n
    assert frame["loss"].isna().all()
    store.close()


def test_concurrent_first_start_and_writers_on_sqlite(tmp_path: Path) -> None:
    """Three processes create the schema of a new SQLite file at once, then write 40 trials
    each with metrics: no lock error, nothing lost or doubled."""
    url = _sqlite_url(tmp_path)
    _race(url, workers=3, n=40)
    _check_race(url, workers=3, n=40)
    engine = create_engine(url)
    with engine.connect() as conn:
        versions = conn.execute(text(f"SELECT version_num FROM {migrate.VERSION_TABLE}")).all()
    engine.dispose()
    assert versions == [(migrate.head_revision(),)]


@pytest.mark.postgres
def test_concurrent_first_start_and_writers_on_postgresql() -> None:
    with fresh_schema("race") as (_schema, url):
        _race(url, workers=3, n=40)
        _check_race(url, workers=3, n=40)
