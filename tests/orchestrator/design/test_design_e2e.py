"""Adaptive designs for real: ``orchestrator submit`` of a ``design:`` spec on a local Ray, the
``sleep`` workload's synthetic law (``sleep.law_y``, seeded noise) as the fast trial, SQL and
MLflow checked afterwards; a driver killed with ``kill -9`` mid-design, then resubmitted.

The decisions of a resumed design are checked by replaying the rule (pure) on what the store
holds: each recorded step must be what :func:`analysis.design.propose` answers given the trials
completed before it, which is what an uninterrupted driver decides from the same trials (the
same-decisions check against an uninterrupted run with controlled costs is
``test_driver.py::test_resume_after_a_killed_driver_makes_the_same_decisions``; here the
measured seconds, which the rule's cost estimate reads, vary from run to run).
"""

from __future__ import annotations

import os
from pathlib import Path

from mlflow.tracking import MlflowClient

from analysis import design as rule
from orchestrator.kinds.design.driver import STOP_TAG
from orchestrator.store.results import Decision, ResultsStore, TrialInfo
from orchestrator.tracking.tracker import default_tracking_uri
from tests.orchestrator.driving.test_control import cli, kill_9, reaper, running, wait_for

__all__ = ["reaper"]  # the fixture, used by name

VALUES = [10, 100, 1000, 10000, 100000]
SPEC = """\
name: {name}
workload: sleep
design:
  axis: law_x
  values: {values}
  goal: {goal}
  budget_hours: 1
  max_seeds: 4
  metric: sleep.law_y
base: {{seconds: {seconds}, law_noise: 0.06}}
resources: {{num_cpus: {cpus}}}
"""


def _spec(tmp_path: Path, name: str, *, goal: float, seconds: float) -> Path:
    path = tmp_path / f"{name}.yaml"
    cpus = os.cpu_count() or 1  # one trial at a time: a sequential design
    text = SPEC.format(name=name, values=VALUES, goal=goal, seconds=seconds, cpus=cpus)
    path.write_text(text)
    return path


def _read(run_root: Path, name: str) -> tuple[list[Decision], list[TrialInfo], str | None]:
    store = ResultsStore.sqlite_under(run_root)
    try:
        info = store.get_sweep(name)
        assert info is not None
        return store.decisions(info.id), store.trials(info.id), info.mlflow_run_id
    finally:
        store.close()


def test_a_design_sweep_stops_at_its_goal_and_records_its_decisions(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    path = _spec(tmp_path, "law", goal=0.025, seconds=0.2)
    res = cli("submit", str(path), "--run-root", str(run_root))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "adaptive design over law_x: 5 values" in res.stdout
    assert "design: stopped (goal): goal met: slope " in res.stdout
    assert "(R^2 " in res.stdout and ", half-width " in res.stdout
    decisions, trials, parent = _read(run_root, "law")
    picks = [d for d in decisions if d.kind == "pick"]
    assert decisions[-1].kind == "stop" and decisions[-1].stop == "goal"
    assert [d.kind for d in decisions].count("stop") == 1
    assert {t.state for t in trials} == {"completed"} and len(trials) == len(picks)
    assert {d.trial_key for d in picks} == {t.key for t in trials}
    assert all(set(t.overrides) == {"law_x", "seed"} for t in trials)
    assert len({d.value for d in picks}) >= 4 and all(d.reason for d in picks)
    # MLflow: the parent run's stop tag, half-width per step and design.json
    assert parent
    client = MlflowClient(default_tracking_uri(run_root))
    run = client.get_run(parent)
    assert run.data.tags[STOP_TAG] == "goal"
    history = client.get_metric_history(parent, "design.half_width")
    assert history and history[-1].value == decisions[-1].half_width
    assert "design.json" in {a.path for a in client.list_artifacts(parent)}
    page = (run_root / "law" / "dashboard.html").read_text()
    assert "<h2 id='design'>Design: adaptive trials over law_x</h2>" in page
    assert "id='design-table'" in page and page.count("plotly.js v") == 1

    again = cli("submit", str(path), "--run-root", str(run_root))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "design: done before this submit (goal)" in again.stdout
    assert _read(run_root, "law")[0] == decisions  # nothing new recorded, nothing rerun


def _replay(decisions: list[Decision], trials: list[TrialInfo]) -> None:
    """Each recorded step is the rule's answer given the trials completed before it (one slot:
    every earlier pick had completed), with the candidates' costs unknown (no cost model for
    ``sleep``) and the trials' measured seconds."""
    by_key = {t.key: t for t in trials}
    done: list[rule.Point] = []
    taken: set[tuple[float, int]] = set()
    for d in decisions:
        candidates = [
            rule.Candidate(float(v), s, None)
            for v in VALUES
            for s in range(4)
            if (float(v), s) not in taken
        ]
        step = rule.propose(
            done, candidates, goal=0.025, budget_s=3600, slots=1, min_distinct=4, initial=3
        )
        if d.kind == "stop":
            assert step.picks == () and step.stop == d.stop, (d, step)
            continue
        assert [(p.value, p.seed) for p in step.picks] == [(d.value, d.seed)], (d, step)
        t = by_key[d.trial_key or ""]
        y = _metric(t)
        done.append(rule.Point(float(d.value or 0), int(d.seed or 0), y, t.wall_s or 0.0))
        taken.add((float(d.value or 0), int(d.seed or 0)))


def _metric(t: TrialInfo) -> float:
    from workloads.sleep.config import SleepConfig

    y = SleepConfig.model_validate(t.config).law_y()  # what the trial reported
    assert y is not None
    return y


def test_kill_9_mid_design_then_resubmit_continues_the_same_design(
    tmp_path: Path, reaper: list[int]
) -> None:
    run_root = tmp_path / "run"
    path = _spec(tmp_path, "crash", goal=0.025, seconds=1.0)

    def some_done_one_running() -> bool:
        states = [t.state for t in _read(run_root, "crash")[1]]
        return states.count("completed") >= 3 and states.count("running") == 1

    with running("submit", str(path), "--run-root", str(run_root)) as driver:
        wait_for(some_done_one_running, 240, "3 completed design trials and 1 running")
        kill_9(driver, reaper)
    before, trials_before, _ = _read(run_root, "crash")
    interrupted = [t.key for t in trials_before if t.state == "running"]
    assert len(interrupted) == 1 and all(d.kind == "pick" for d in before)

    res = cli("submit", str(path), "--run-root", str(run_root))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "design: stopped (goal)" in res.stdout
    first_started = next(x for x in res.stdout.splitlines() if "started" in x)
    assert interrupted[0] in first_started  # the recorded pick that did not finish, first
    after, trials, _ = _read(run_root, "crash")
    assert after[: len(before)] == before  # kept, not recorded again
    steps = [(d.step, d.rank) for d in after]
    assert len(steps) == len(set(steps)) and [d.kind for d in after].count("stop") == 1
    assert {t.state for t in trials} == {"completed"}
    assert len(trials) == len({t.key for t in trials}) == len(after) - 1
    rerun = {t.key: t.attempts for t in trials}
    assert rerun[interrupted[0]] == 2 and sum(rerun.values()) == len(trials) + 1
    _replay(after, trials)
