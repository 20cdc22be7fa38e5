"""Console rendering of a sweep's events: the workload's progress line, undefined as n/a."""

from __future__ import annotations

import math
import shlex
from datetime import UTC, datetime

import pytest
from rich.console import Console

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


@pytest.mark.parametrize("root", ["/tmp/my runs", "/tmp/[x] runs", "/tmp/plain"])
def test_the_browse_line_pastes_into_a_shell_as_it_is(
    root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{root}/mlflow.db"
    render.print_browse(uri, "7")
    line = " ".join(capsys.readouterr().out.split("\n"))
    command = line.removeprefix("browse: ").split(", then open")[0]
    assert shlex.split(command) == [
        "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1"
    ]  # fmt: skip
    assert "http://127.0.0.1:5000/#/experiments/7/runs" in line


def _header_names(table: str) -> list[str]:
    """The column names of a rich table's (possibly folded) header, each put back together."""
    lines = table.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    rows = [line.strip("┃").split("┃") for line in lines[top + 1 : bottom]]
    return ["".join(row[i].strip() for row in rows) for i in range(len(rows[0]))]


def test_status_headers_stay_distinguishable_at_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two metrics that start alike (``acceptance_length``, ``acceptance_length_prompt_mean``)
    were both headed ``acceptance_…`` in an 80-column terminal (issue 33)."""
    monkeypatch.setattr(render, "out", Console(width=80, soft_wrap=True))
    columns = ("acceptance_length", "acceptance_length_prompt_mean")
    rows = [
        (
            "a1b2c3d4e5f6a7b8",
            "completed",
            {"pretrain.tokens": 1024, "draft.layers": 2},
            {"acceptance_length": 1.51234, "acceptance_length_prompt_mean": 1.49},
        )
    ]
    render.print_trials("tokens", rows, columns, {"acceptance_length": ".3f"})
    table = capsys.readouterr().out
    assert max(len(line) for line in table.splitlines()) <= 80
    names = _header_names(table)
    assert names == ["trial_key", "draft.layers", "pretrain.tokens", "state", *columns]
    assert "1.512" in table and "1.4900" in table  # the numbers are whole too


def test_status_keeps_the_state_and_key_whole_beside_four_metrics_at_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With mismatches and near-ties added, ``completed`` was cut to ``comple…`` in a pipe's
    80 columns (the status e2e test counts the word)."""
    monkeypatch.setattr(render, "out", Console(width=80, soft_wrap=True))
    columns = ("acceptance_length", "acceptance_length_prompt_mean", "mismatches", "near_ties")
    metrics = {"acceptance_length": 1.2, "acceptance_length_prompt_mean": 1.1, "mismatches": 0}
    rows = [("a1b2c3d4e5f6", "completed", {"pretrain.tokens": 4096, "seed": 0}, metrics)] * 4
    render.print_trials("smoke", rows, columns, {"mismatches": "d", "near_ties": "d"})
    table = capsys.readouterr().out
    assert max(len(line) for line in table.splitlines()) <= 80
    assert table.count("completed") == 4 and table.count("a1b2c3d4e5f6") == 4
    assert _header_names(table) == ["trial_key", "pretrain.tokens", "seed", "state", *columns]
