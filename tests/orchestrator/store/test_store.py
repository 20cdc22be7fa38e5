"""Contract tests of the results store, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.errors import StoreError
from orchestrator.store.results import ResultsStore, TrialState, mask_url

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _pg_reachable() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3):
            return True
    except Exception:  # any failure to connect means: skip the PostgreSQL params
        return False


@pytest.fixture(scope="module")
def pg_schema() -> Iterator[str]:
    """A unique schema for this module on the PostgreSQL server, dropped at teardown."""
    if not _pg_reachable():
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}")
    import psycopg

    schema = f"ss_test_{uuid.uuid4().hex[:12]}"
    yield schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ResultsStore]:
    if request.param == "sqlite":
        s = ResultsStore.sqlite_under(tmp_path / "run")
    else:
        schema = request.getfixturevalue("pg_schema")
        s = ResultsStore(PG_URL, schema=schema)
    yield s
    if request.param == "postgresql":
        # Tests in one module share the schema: remove what this test wrote.
        for sweep in s.list_sweeps():
            s.delete_sweep(sweep.id)
    s.close()


def _sweep(store: ResultsStore, name: str = "tokens") -> int:
    return store.upsert_sweep(name, "draft_train", "workload: draft_train\n", "sweeps/tokens.yaml")


def _trials(n: int) -> list[tuple[str, dict, dict]]:
    return [
        (
            f"key{i:02d}",
            {"pretrain": {"tokens": 1000 * (i + 1)}, "seed": i % 2},
            {"pretrain.tokens": 1000 * (i + 1), "seed": i % 2},
        )
        for i in range(n)
    ]


def test_sqlite_under_creates_file(tmp_path: Path) -> None:
    s = ResultsStore.sqlite_under(tmp_path / "a" / "b")
    try:
        assert (tmp_path / "a" / "b" / "results.db").exists()
        assert s.dialect == "sqlite"
    finally:
        s.close()


def test_upsert_sweep_is_idempotent(store: ResultsStore) -> None:
    first = _sweep(store)
    before = store.get_sweep("tokens")
    second = store.upsert_sweep("tokens", "draft_train", "changed: 1\n", "sweeps/tokens.yaml")
    after = store.get_sweep("tokens")
    assert first == second
    assert before is not None and after is not None
    assert after.spec_yaml == "changed: 1\n"
    assert after.created_at == before.created_at
    assert after.updated_at >= before.updated_at
    assert after.created_at.tzinfo is not None
    assert [s.name for s in store.list_sweeps()] == ["tokens"]
    assert store.get_sweep("missing") is None

    store.set_sweep_mlflow_run(first, "abc123")
    info = store.get_sweep("tokens")
    assert info is not None and info.mlflow_run_id == "abc123"
    with pytest.raises(StoreError, match="no sweep"):
        store.set_sweep_mlflow_run(first + 1000, "x")


def test_add_trials_twice_no_duplicates(store: ResultsStore) -> None:
    sid = _sweep(store)
    assert store.add_trials(sid, _trials(3)) == 3
    trials = store.trials(sid)
    store.mark_running(trials[0].id, "run0")
    assert store.add_trials(sid, _trials(4)) == 1  # only key03 is new
    after = store.trials(sid)
    assert [t.key for t in after] == ["key00", "key01", "key02", "key03"]
    assert after[0].state == "running"  # existing rows untouched
    assert after[1].config == {"pretrain": {"tokens": 2000}, "seed": 1}
    assert after[1].overrides == {"pretrain.tokens": 2000, "seed": 1}
    assert all(t.state == "pending" for t in after[1:])
    assert store.add_trials(sid, []) == 0
    with pytest.raises(ValueError, match="longer than 64"):
        store.add_trials(sid, [("k" * 65, {}, {})])


def test_add_trials_concurrently(store: ResultsStore) -> None:
    sid = _sweep(store)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            store.add_trials(sid, _trials(20))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.trials(sid)) == 20


def test_state_transitions(store: ResultsStore) -> None:
    sid = _sweep(store)
    store.add_trials(sid, _trials(4))
    t0, t1, t2, t3 = (t.id for t in store.trials(sid))

    store.mark_running(t0, "run0")
    store.mark_completed(t0, wall_s=12.5)
    store.mark_running(t1, "run1")
    store.mark_failed(t1, "Traceback ...\nRuntimeError: boom", wall_s=1.0)
    store.mark_cancelled(t2)

    by_id = {t.id: t for t in store.trials(sid)}
    assert by_id[t0].state == TrialState.COMPLETED
    assert by_id[t0].wall_s == pytest.approx(12.5)
    assert by_id[t0].attempts == 1
    assert by_id[t0].mlflow_run_id == "run0"
    started, finished = by_id[t0].started_at, by_id[t0].finished_at
    assert started is not None and finished is not None
    assert finished >= started
    assert by_id[t1].state == "failed"
    assert "RuntimeError: boom" in (by_id[t1].error or "")
    assert by_id[t2].state == "cancelled"
    assert by_id[t3].state == "pending" and by_id[t3].attempts == 0

    # A retry clears the error and counts the attempt.
    store.mark_running(t1, "run1b")
    retried = {t.id: t for t in store.trials(sid)}[t1]
    assert retried.attempts == 2 and retried.error is None and retried.state == "running"

    assert {t.id for t in store.trials(sid, {"completed", "cancelled"})} == {t0, t2}
    assert store.trials(sid, set()) == []
    with pytest.raises(ValueError):
        store.trials(sid, {"bogus"})
    with pytest.raises(StoreError, match="no trial"):
        store.mark_completed(10_000, 1.0)


def test_updated_at_moves_on_every_change(store: ResultsStore) -> None:
    """``updated_at`` moves on each write to the sweep, its trials, metrics and fits, and on a
    cancel request; not on a no-op ``add_trials``."""
    sid = _sweep(store)

    def updated() -> datetime:
        info = store.get_sweep("tokens")
        assert info is not None
        return info.updated_at

    def step(what: str, write: Callable[[], object]) -> None:
        before = updated()
        time.sleep(0.01)  # timestamps have microsecond resolution; leave no doubt
        write()
        after = updated()
        assert after > before, f"{what} did not move updated_at ({before} -> {after})"
        assert after.tzinfo is not None

    step("add_trials", lambda: store.add_trials(sid, _trials(2)))
    t0, t1 = (t.id for t in store.trials(sid))
    step("mark_running", lambda: store.mark_running(t0, "run0"))
    step("log_metrics", lambda: store.log_metrics(t0, {"acceptance_length": 1.5}))
    step("log_metric_series", lambda: store.log_metric_series(t0, "loss", [2.0, 1.0]))
    step("mark_completed", lambda: store.mark_completed(t0, wall_s=1.0))
    step("save_fit", lambda: store.save_fit(sid, _fit(0.3, 4)))
    step("set_sweep_mlflow_run", lambda: store.set_sweep_mlflow_run(sid, "parent"))
    step("mark_running", lambda: store.mark_running(t1, None))
    step("mark_failed", lambda: store.mark_failed(t1, "boom", wall_s=0.5))
    step("reset_trials", lambda: store.reset_trials(sid, {"failed"}))
    step("mark_cancelled", lambda: store.mark_cancelled(t1))
    step("reset_trials", lambda: store.reset_trials(sid, {"cancelled"}))
    step("mark_running", lambda: store.mark_running(t1, None))
    step("reset_stale_running", lambda: store.reset_stale_running(sid))
    step("request_cancel", lambda: store.request_cancel(sid, stale_after_s=60.0))
    step("upsert_sweep", lambda: _sweep(store))

    unchanged = updated()
    time.sleep(0.01)
    assert store.add_trials(sid, _trials(2)) == 0  # nothing new: no change
    assert store.reset_stale_running(sid) == 0
    assert updated() == unchanged


def test_reset_stale_running(store: ResultsStore) -> None:
    sid = _sweep(store)
    other = _sweep(store, "other")
    store.add_trials(sid, _trials(3))
    store.add_trials(other, _trials(1))
    a, b, c = store.trials(sid)
    store.mark_running(a.id, None)
    store.mark_running(b.id, None)
    store.mark_completed(b.id, 1.0)
    store.mark_running(c.id, None)
    store.mark_running(store.trials(other)[0].id, None)

    assert store.reset_stale_running(sid) == 2
    assert [t.state for t in store.trials(sid)] == ["pending", "completed", "pending"]
    assert store.trials(other)[0].state == "running"
    assert store.reset_stale_running(sid) == 0


def test_metrics_upsert_and_nonfinite_round_trip(store: ResultsStore) -> None:
    sid = _sweep(store)
    store.add_trials(sid, _trials(1))
    tid = store.trials(sid)[0].id
    store.log_metrics(
        tid, {"acceptance_length": 1.25, "nan_metric": math.nan, "pos": math.inf, "neg": -math.inf}
    )
    store.log_metrics(tid, {"acceptance_length": 1.5})  # replaces, does not duplicate
    store.log_metric_series(tid, "loss", [3.0, 2.5, math.nan, 1.0])
    store.log_metric_series(tid, "loss", [3.0, 2.0, math.nan, 1.0])

    row = store.metrics_frame(sid).iloc[0]
    assert row["acceptance_length"] == 1.5
    assert math.isnan(row["nan_metric"])
    assert row["pos"] == math.inf and row["neg"] == -math.inf
    assert row["loss"] == 3.0  # step 0 of the series

    series = store.metric_series(tid, "loss")
    assert series[:2] == [3.0, 2.0] and math.isnan(series[2]) and series[3] == 1.0
    assert store.metric_series(tid, "acceptance_length") == [1.5]
    with pytest.raises(StoreError):
        store.log_metrics(tid + 10_000, {"x": 1.0})  # no such trial (foreign key)
    with pytest.raises(ValueError, match="non-numeric"):
        store.log_metrics(tid, {"x": "abc"})  # type: ignore[dict-item]


def test_metrics_frame_wide(store: ResultsStore) -> None:
    sid = _sweep(store)
    store.add_trials(
        sid,
        [
            ("k0", {}, {"pretrain": {"tokens": 1000}, "seed": 0}),  # nested overrides flatten
            ("k1", {}, {"pretrain.tokens": 2000, "seed": 1}),
            ("k2", {}, {"pretrain.tokens": 4000, "seed": 0}),
        ],
    )
    k0, k1, _k2 = store.trials(sid)
    store.log_metrics(k0.id, {"acceptance_length": 1.1, "tokens_per_s": 9.0})
    store.log_metrics(k1.id, {"acceptance_length": 1.2, "seed": 99.0})
    store.log_metrics(k1.id, {"acceptance_length": 7.0}, step=3)  # not step 0: not in the frame
    store.mark_running(k0.id, None)
    store.mark_completed(k0.id, 2.0)

    frame = store.metrics_frame(sid)
    assert list(frame.columns) == [
        "trial_key",
        "state",
        "pretrain.tokens",
        "seed",
        "acceptance_length",
        "metric.seed",
        "tokens_per_s",
    ]
    assert frame.shape == (3, 7)
    assert list(frame["trial_key"]) == ["k0", "k1", "k2"]
    assert list(frame["state"]) == ["completed", "pending", "pending"]
    assert list(frame["pretrain.tokens"]) == [1000, 2000, 4000]
    assert frame["acceptance_length"].tolist()[:2] == [1.1, 1.2]
    assert math.isnan(frame["acceptance_length"].iloc[2])
    assert frame["metric.seed"].iloc[1] == 99.0

    empty = store.metrics_frame(_sweep(store, "empty"))
    assert list(empty.columns) == ["trial_key", "state"] and len(empty) == 0


def _fit(a: float, n: int) -> dict:
    return {
        "law": "tokens",
        "x_name": "pretrain.tokens",
        "y_name": "acceptance_length",
        "form": "a*log10(x)+b",
        "a": a,
        "b": 0.5,
        "a_lo": a - 0.1,
        "a_hi": a + 0.1,
        "b_lo": math.nan,
        "b_hi": math.nan,
        "r2": 0.97,
        "n": n,
        "details": {"residuals": [0.01, -0.02]},
    }


def test_fit_replace_per_law(store: ResultsStore) -> None:
    sid = _sweep(store)
    store.save_fit(sid, _fit(0.3, 4))
    store.save_fit(sid, _fit(0.4, 6))
    layers = {**_fit(0.2, 3), "law": "layers", "x_name": "draft.layers"}
    store.save_fit(sid, layers)

    fits = store.fits(sid)
    assert [f["law"] for f in fits] == ["layers", "tokens"]
    tokens = fits[1]
    assert tokens["a"] == pytest.approx(0.4) and tokens["n"] == 6
    assert tokens["a_lo"] == pytest.approx(0.3)
    assert math.isnan(tokens["b_lo"]) and math.isnan(tokens["b_hi"])
    assert tokens["details"] == {"residuals": [0.01, -0.02]}
    assert tokens["created_at"].tzinfo is not None
    with pytest.raises(ValueError, match="missing key"):
        store.save_fit(sid, {"law": "tokens"})


def test_unreachable_url_masks_password() -> None:
    with pytest.raises(StoreError) as info:
        ResultsStore("postgresql://alice:s3cret@127.0.0.1:1/db")
    message = str(info.value)
    assert "s3cret" not in message
    assert "postgresql://alice:***@127.0.0.1:1/db" in message
    assert "\n" not in message


def test_unwritable_sqlite_path(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        ResultsStore(f"sqlite:///{tmp_path / 'missing' / 'dir' / 'results.db'}")


@pytest.mark.parametrize("url", ["mysql:/x", "not a url", "http://example.com/db", ""])
def test_non_database_url(url: str) -> None:
    with pytest.raises(StoreError, match="not a database URL"):
        ResultsStore(url)


def test_mask_url() -> None:
    assert mask_url("postgresql://u:pw@h:5432/d") == "postgresql://u:***@h:5432/d"
    assert mask_url("postgresql://u@h/d") == "postgresql://u@h/d"
    assert mask_url("sqlite:///x.db") == "sqlite:///x.db"


def test_schema_rejected_for_sqlite(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        ResultsStore(f"sqlite:///{tmp_path / 'r.db'}", schema="x")


def test_postgres_scheme_aliases() -> None:
    from orchestrator.store.results import normalize_db_url

    assert normalize_db_url("postgres://u@h/d").drivername == "postgresql+psycopg"
    assert normalize_db_url("postgresql://u@h/d").drivername == "postgresql+psycopg"
    assert normalize_db_url("sqlite:///x.db").drivername == "sqlite"
