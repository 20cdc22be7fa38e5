"""The decisions of adaptive designs in the results DB: written once, read in order, and the
migration that adds their table to an existing database (revision 0003)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from orchestrator.store import migrate
from orchestrator.store.results import Decision, ResultsStore
from tests.orchestrator.pg import fresh_schema
from tests.orchestrator.store.test_migrate import _seed_old_rows, _stop_at


def _pick(step: int, rank: int, value: float, **kw: object) -> Decision:
    return Decision(
        step=step,
        rank=rank,
        kind="pick",
        value=value,
        seed=0,
        trial_key=f"k{step}{rank}",
        predicted_cost_s=60.0,
        cost_basis="modelled",
        expected_half_width=0.1,
        half_width=None,
        spent_s=0.0,
        committed_s=0.0,
        reason="initial design",
        **kw,  # type: ignore[arg-type]
    )


def _roundtrip(store: ResultsStore) -> None:
    sweep_id = store.upsert_sweep("d", "sleep", "x", "x.yaml")
    first = [_pick(0, 0, 10.0), _pick(0, 1, 1000.0)]
    assert store.add_decisions(sweep_id, first) == 2
    stop = Decision(
        step=1, rank=0, kind="stop", reason="goal met", spent_s=120.0, half_width=math.nan,
        stop="goal",
    )  # fmt: skip
    # a resumed driver writes step 0 again: kept once; NaN reads back as None
    assert store.add_decisions(sweep_id, [*first, stop]) == 1
    got = store.decisions(sweep_id)
    assert [(d.step, d.rank, d.kind) for d in got] == [
        (0, 0, "pick"),
        (0, 1, "pick"),
        (1, 0, "stop"),
    ]
    assert got[2].half_width is None and got[2].stop == "goal" and got[2].created_at is not None
    assert got[0].as_json()["value"] == 10.0 and got[0].cost_basis == "modelled"
    store.delete_sweep(sweep_id)
    assert store.decisions(sweep_id) == []


def test_decisions_are_written_once_and_read_in_order(tmp_path: Path) -> None:
    store = ResultsStore(f"sqlite:///{tmp_path / 'results.db'}")
    try:
        _roundtrip(store)
    finally:
        store.close()


@pytest.mark.postgres
def test_decisions_on_postgresql() -> None:
    with fresh_schema("design") as (_schema, url):
        store = ResultsStore(url)
        try:
            _roundtrip(store)
        finally:
            store.close()


def test_a_database_at_0002_is_upgraded_with_the_design_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    _stop_at(url, "0002")
    _seed_old_rows(url)
    engine = create_engine(url)
    assert not inspect(engine).has_table("ss_design_decisions")
    engine.dispose()
    store = ResultsStore(url)
    try:
        assert store.schema_found == "0002" and migrate.head_revision() == "0003"
        sweep = store.get_sweep("old")
        assert sweep is not None
        assert [(t.key, t.state) for t in store.trials(sweep.id)] == [("k1", "completed")]
        assert store.decisions(sweep.id) == []
        assert store.add_decisions(sweep.id, [_pick(0, 0, 10.0)]) == 1
    finally:
        store.close()
    engine = create_engine(url)
    assert inspect(engine).has_table("ss_design_decisions")
    engine.dispose()
