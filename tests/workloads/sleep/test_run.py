"""The diagnostic ``sleep`` workload: what it reports and how it fails."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from workloads.sleep.config import SleepConfig
from workloads.sleep.run import run


def test_reports_its_sleep_and_counts_attempts(tmp_path: Path) -> None:
    cfg = SleepConfig(seconds=0.3, value=math.inf)
    first = run(cfg, out_dir=tmp_path)
    second = run(cfg, out_dir=tmp_path)
    assert 0.3 <= first.metrics["sleep.seconds"] < 2.0
    assert first.metrics["value"] == math.inf
    assert (first.metrics["sleep.attempt"], second.metrics["sleep.attempt"]) == (1.0, 2.0)
    assert len(first.series["ticks"]) == 3
    assert first.series["ticks"] == sorted(first.series["ticks"])
    lines = [json.loads(x) for x in (tmp_path / "attempts.jsonl").read_text().splitlines()]
    assert [x["attempt"] for x in lines] == [1, 2]
    assert lines[0]["node_id"] is None  # outside Ray


def test_fail_error_raises_after_the_sleep(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="on purpose"):
        run(SleepConfig(seconds=0, fail="error"), out_dir=tmp_path)


def test_config_refuses_negative_seconds() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        SleepConfig(seconds=-1)


def test_the_synthetic_law_is_seeded_and_leaves_old_trial_keys_alone(tmp_path: Path) -> None:
    from orchestrator.spec.grid import _key_dump

    assert "sleep.law_y" not in run(SleepConfig(seconds=0), out_dir=tmp_path / "a").metrics
    cfg = SleepConfig(seconds=0, law_x=1000, law_noise=0.0, seed=3)
    assert run(cfg, out_dir=tmp_path / "b").metrics["sleep.law_y"] == pytest.approx(1.3)
    noisy = [SleepConfig(law_x=1000, seed=s).law_y() for s in range(200)]
    assert noisy == [SleepConfig(law_x=1000, seed=s).law_y() for s in range(200)]
    values = [y for y in noisy if y is not None]
    sd = statistics.stdev(values)
    assert 0.015 < sd < 0.025 and len(set(values)) == 200
    # fields added after sleep shipped: at their defaults they are not in the trial key
    assert set(_key_dump(SleepConfig(value=2))) == {
        "seed",
        "seconds",
        "value",
        "fail",
        "fail_attempts",
    }
