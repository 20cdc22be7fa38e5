"""One trial's task, in-process (orchestrator.driving.task.run_trial)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from orchestrator.driving.task import TaskOutcome, run_trial
from workloads.config import Resources
from workloads.sleep.config import SleepConfig


def _run(out: Path, fail: Literal["never", "error"] = "never") -> TaskOutcome:
    return run_trial(
        workload="sleep", config=SleepConfig(seconds=0, fail=fail), trial_key="k" * 16,
        cache_dir=str(out.parent / "cache"), out_dir=str(out), run_root=str(out.parent),
        threads=1, resources=Resources(),
    )  # fmt: skip


def test_a_failed_attempt_leaves_its_traceback_and_a_later_success_removes_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "trial"
    failed = _run(out, fail="error")
    assert not failed.ok and "RuntimeError" in str(failed.error)
    assert "Traceback" in (out / "traceback.txt").read_text()
    done = _run(out)
    assert done.ok
    assert not (out / "traceback.txt").exists()  # a completed trial shows no stale traceback
