"""Console rendering of a sweep's events: the workload's progress line, undefined as n/a."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from analysis.numbers import fmt
from orchestrator.commands import render
from orchestrator.driving.events import SweepOpened, TrialEvent
from orchestrator.store.results import TrialInfo, TrialState
from workloads.registry import WORKLOADS


def _trial() -> TrialInfo:
    now = datetime.now(UTC)
    return TrialInfo(
        id=1,
        key="k" * 16,
        config={},
        overrides={"decode.temperature": 0.7},
        state=TrialState.COMPLETED,
        error=None,
        attempts=1,
        mlflow_run_id=None,
        started_at=now,
        finished_at=now,
        wall_s=1.0,
    )


def test_fmt_is_n_a_for_every_undefined_value() -> None:
    for value in (None, math.nan, math.inf, -math.inf, "x", True):
        assert fmt(value, ".3f") == "n/a"
    assert fmt(3.0, "d") == "3" and fmt(2.5, ".2f") == "2.50" and fmt(0, ".1f") == "0.0"


def test_a_sampled_decode_trial_prints_n_a_mismatches(capsys: pytest.CaptureFixture[str]) -> None:
    """At temperature > 0 ``mismatches`` is NaN by design: the line says n/a, never crashes."""
    console = render.SweepConsole(WORKLOADS["decode_bench"])
    metrics = {
        "tokens_per_s": 12.5,
        "speedup": 1.5,
        "acceptance_length": 2.0,
        "mismatches": math.nan,
    }
    with console.live():
        console(SweepOpened("d", "1 trials", "sqlite://", "sqlite://", "p" * 32, 1, 0))
        console(TrialEvent("completed", _trial(), metrics))
    text = capsys.readouterr().out
    assert "tokens_per_s=12.50 speedup=1.50 acceptance_length=2.000 mismatches=n/a" in text


def test_each_workload_prints_its_own_metrics() -> None:
    sleep = render.metrics_line(WORKLOADS["sleep"].progress, {"sleep.seconds": 0.2})
    assert sleep == "sleep.seconds=0.20 sleep.attempt=n/a"
    assert "acceptance" not in sleep
    draft = render.metrics_line(WORKLOADS["draft_train"].progress, {"acceptance_length": 1.5})
    assert draft.startswith("acceptance_length=1.500")
