"""Adaptive designs on the driver loop (:mod:`orchestrator.kinds.design.driver`), Ray faked.

:func:`orchestrator.driving.sweep_run.drive` runs :class:`DesignProposals` against a real SQLite
store and the real rule (:mod:`analysis.design`), with the Ray task replaced by the ``sleep``
workload's synthetic law (``sleep.law_y``, seeded noise) and the measured and predicted
seconds given by the test, so stops, records, failures, batches, resume and cheap wsd-fork
candidates are checked in seconds. The real thing (Ray, the CLI, MLflow, a driver killed with
``kill -9``) is ``test_design_e2e.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from analysis import design as rule
from orchestrator.driving import runner
from orchestrator.driving.events import ignore
from orchestrator.driving.sweep_run import SweepRun, drive
from orchestrator.driving.task import TaskOutcome
from orchestrator.kinds.design.driver import STOP_TAG, DesignProposals, PerTrial
from orchestrator.kinds.design.trials import design_trial
from orchestrator.spec.grid import trial_key
from orchestrator.spec.sweep import SweepSpec, load_spec
from orchestrator.store.results import ResultsStore
from workloads.sleep.config import SleepConfig

SPEC = """\
name: law
workload: sleep
design:
  axis: law_x
  values: [10, 100, 1000, 10000, 100000]
  goal: {goal}
  budget_hours: {hours}
  max_seeds: 4
  metric: sleep.law_y
base: {{seconds: 0, law_noise: 0.02}}
"""


def cost_s(x: float) -> float:
    """Measured (and, by default, predicted) seconds of a trial at ``law_x = x``."""
    return 10.0 + 10.0 * math.log10(x)


class Tracker:
    """Records what the design logs on the parent run."""

    def __init__(self) -> None:
        self.metrics: list[tuple[dict[str, float], int]] = []
        self.tags: dict[str, str] = {}
        self.artifacts: list[Path] = []

    def start_trial_run(self, parent: str, sweep: str, key: str, *_: Any, **__: Any) -> str:
        return f"run-{key}"

    def set_state(self, *_: Any, **__: Any) -> None:
        pass

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int = 0, **_: Any) -> None:
        if run_id == "parent":
            self.metrics.append((dict(metrics), step))

    def update_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        self.log_metrics(run_id, metrics)

    def log_series(self, *_: Any, **__: Any) -> None:
        pass

    def log_artifact(self, run_id: str, path: Path, *_: Any) -> None:
        self.artifacts.append(path)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.tags |= tags


class Killed(Exception):
    """The driver dies (a test's stand-in for ``kill -9`` between two Ray waits)."""


class FakeRay:
    """The Ray task: the outcome is the synthetic law of the config (None from ``fail``: the
    trial fails); the earliest submitted trial finishes first; ``kill_at``: the n-th wait
    kills the driver."""

    def __init__(self) -> None:
        self.fail: Callable[[SleepConfig], bool] = lambda _c: False
        self.runs: list[tuple[float, int]] = []
        self.outcomes: dict[object, TaskOutcome] = {}
        self.waits = 0
        self.kill_at: int | None = None
        self.slots = 2

    def remote(self, **kw: Any) -> object:
        cfg: SleepConfig = kw["config"]
        assert cfg.law_x is not None
        self.runs.append((cfg.law_x, cfg.seed))
        ref = object()
        law_y = cfg.law_y()
        self.outcomes[ref] = (
            TaskOutcome(ok=False, error="RuntimeError: boom")
            if self.fail(cfg) or law_y is None
            else TaskOutcome(ok=True, metrics={"sleep.law_y": law_y, "value": 1.0})
        )
        return ref

    def wait(self, refs: list[object], num_returns: int = 1, timeout: Any = None) -> Any:
        self.waits += 1
        if self.kill_at is not None and self.waits >= self.kill_at:
            raise Killed
        return refs[:1], refs[1:]


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> FakeRay:
    fake = FakeRay()
    monkeypatch.setattr(runner, "trial_task", lambda spec, **_: fake)
    monkeypatch.setattr(runner, "in_flight_limit", lambda spec: fake.slots)
    monkeypatch.setattr(runner.ray, "wait", fake.wait)
    monkeypatch.setattr(runner.ray, "get", lambda ref: fake.outcomes[ref])
    finish = SweepRun.finish

    def measured(self: SweepRun, task: Any, ref: Any, wall_s: float) -> TaskOutcome:
        t = self.trial(ref.key)
        assert t is not None
        return finish(self, task, ref, cost_s(float(t.overrides["law_x"])))

    monkeypatch.setattr(SweepRun, "finish", measured)
    return fake


def _spec(tmp_path: Path, *, goal: float = 0.03, hours: float = 10.0) -> SweepSpec:
    path = tmp_path / "law.yaml"
    path.write_text(SPEC.format(goal=goal, hours=hours))
    return load_spec(path)


def predicted(config: BaseModel) -> tuple[float | None, str]:
    law_x = getattr(config, "law_x", None)
    assert law_x is not None
    return cost_s(law_x), "stub: 10 s + 10 s per decade"


def run_design(
    tmp_path: Path,
    spec: SweepSpec,
    *,
    costs: Callable[[], Any] | None = None,
    the_rule: Any = None,
) -> tuple[DesignProposals, ResultsStore, int, Tracker]:
    """The driver loop with the design's proposals, as ``submit`` runs a design."""
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    sweep_id, _ = runner.register(store, spec, tmp_path / "law.yaml", "x", [])
    paths = runner.RunPaths(tmp_path / "runs", tmp_path / "cache")
    tracker = Tracker()
    with runner.sweep_lease(store, sweep_id) as me:
        run = SweepRun(store, tracker, spec, sweep_id, "parent", paths, me)  # type: ignore[arg-type]
        proposals = DesignProposals(
            run, rule=the_rule, costs=costs or (lambda: PerTrial(predicted))
        )
        try:
            drive(run, proposals, ignore)
        finally:
            proposals.close(run)
    return proposals, store, sweep_id, tracker


def _picks(store: ResultsStore, sweep_id: int) -> list[tuple[int, int, float | None, int | None]]:
    return [
        (d.step, d.rank, d.value, d.seed) for d in store.decisions(sweep_id) if d.kind == "pick"
    ]


def test_a_design_stops_at_the_goal_and_records_every_decision(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    spec = _spec(tmp_path)
    proposals, store, sweep_id, tracker = run_design(tmp_path, spec)
    summary = proposals.result
    assert summary.stop == "goal" and summary.half_width is not None
    assert summary.half_width <= 0.03 and "goal met" in summary.message
    decisions = store.decisions(sweep_id)
    picks = [d for d in decisions if d.kind == "pick"]
    assert [d.kind for d in decisions].count("stop") == 1 and decisions[-1].kind == "stop"
    assert decisions[-1].stop == "goal" and decisions[-1].half_width == summary.half_width
    # the first step is a batch of the initial design (2 free slots), one trial each
    assert [(d.step, d.value) for d in picks[:2]] == [(0, 10.0), (0, 1000.0)]
    assert len({d.value for d in picks}) >= 4  # the distinct-value floor (min_distinct 4)
    for d in picks:  # why each pick: its predicted cost, basis, half-widths, spent so far
        assert d.predicted_cost_s == pytest.approx(cost_s(d.value or 0))
        assert d.cost_basis == "stub: 10 s + 10 s per decade" and d.reason
        assert d.trial_key == design_trial(spec, int(d.value or 0), d.seed or 0).key
    with_fit = [d for d in picks if d.half_width is not None]
    assert with_fit and all(d.expected_half_width is not None for d in with_fit)
    spent = [d.spent_s for d in decisions]
    assert spent == sorted(spent) and spent[0] == 0
    # every trial an ordinary trial: key of the full config, grid point = axis value + seed
    trials = store.trials(sweep_id)
    assert {t.state for t in trials} == {"completed"}
    assert len(trials) == len(picks) == len(fake_ray.runs) == summary.trials
    for t in trials:
        assert set(t.overrides) == {"law_x", "seed"}
        cfg = SleepConfig.model_validate(t.config)
        assert t.key == trial_key("sleep", cfg)
    assert summary.spent_s == pytest.approx(sum(cost_s(x) for x, _ in fake_ray.runs))
    # MLflow: the half-width per step, the stop tag, design.json
    steps = [step for values, step in tracker.metrics if "design.half_width" in values]
    assert steps == sorted(steps) and len(steps) >= 2
    assert tracker.tags[STOP_TAG] == "goal"
    assert tracker.artifacts == [tmp_path / "runs" / "law" / "design.json"]


def test_a_design_stops_at_the_budget_and_never_passes_it(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    spec = _spec(tmp_path, goal=0.001, hours=0.1)  # 360 s: about 8 trials
    proposals, store, sweep_id, tracker = run_design(tmp_path, spec)
    assert proposals.result.stop == "budget" and "budget spent" in proposals.result.message
    assert sum(cost_s(x) for x, _ in fake_ray.runs) <= 360
    assert tracker.tags[STOP_TAG] == "budget"


def test_a_failed_trial_counts_as_spent_and_is_not_proposed_again(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    fake_ray.fail = lambda c: c.law_x == 100000 and c.seed == 0
    proposals, store, sweep_id, _ = run_design(tmp_path, _spec(tmp_path))
    assert fake_ray.runs.count((100000.0, 0)) == 1
    failed = [t for t in store.trials(sweep_id) if t.state == "failed"]
    assert [(t.overrides["law_x"], t.overrides["seed"]) for t in failed] == [(100000, 0)]
    assert proposals.result.stop == "goal"
    assert proposals.result.spent_s == pytest.approx(sum(cost_s(x) for x, _ in fake_ray.runs))
    picks = _picks(store, sweep_id)
    assert [(v, s) for _, _, v, s in picks].count((100000.0, 0)) == 1


def test_several_free_slots_get_a_batch_of_distinct_picks(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    fake_ray.slots = 3
    _, store, sweep_id, _ = run_design(tmp_path, _spec(tmp_path))
    first = [(v, s) for step, _, v, s in _picks(store, sweep_id) if step == 0]
    assert first == [(10.0, 0), (1000.0, 0), (100000.0, 0)]  # the initial design at once


def test_resume_after_a_killed_driver_makes_the_same_decisions(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    whole = tmp_path / "whole"
    whole.mkdir()
    _, store, sweep_id, _ = run_design(whole, _spec(whole))
    expected = [
        (d.step, d.rank, d.kind, d.value, d.seed, d.stop) for d in store.decisions(sweep_id)
    ]
    runs_whole = list(fake_ray.runs)

    fake_ray.runs.clear()
    fake_ray.waits, fake_ray.kill_at = 0, 5
    with pytest.raises(Killed):
        run_design(tmp_path, _spec(tmp_path))
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    info = store.get_sweep("law")
    assert info is not None
    states = [t.state for t in store.trials(info.id)]
    assert "running" in states and "completed" in states
    before = len(store.decisions(info.id))
    fake_ray.kill_at = None
    proposals, store, sweep_id, _ = run_design(tmp_path, _spec(tmp_path))
    got = [(d.step, d.rank, d.kind, d.value, d.seed, d.stop) for d in store.decisions(sweep_id)]
    assert got == expected and before < len(got)
    assert len(fake_ray.runs) == len(runs_whole) + states.count("running")  # rerun once
    trials = store.trials(sweep_id)
    assert {t.state for t in trials} == {"completed"} and len(trials) == len(runs_whole)

    # a resubmit of the finished design says it is done and why, and writes nothing
    runs = len(fake_ray.runs)
    again, store, sweep_id, _ = run_design(tmp_path, _spec(tmp_path))
    assert again.result.already and again.result.stop == "goal" and again.result.decisions == 0
    assert len(fake_ray.runs) == runs and len(store.decisions(sweep_id)) == len(got)


def test_a_larger_budget_on_resubmit_continues_the_design(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    first, store, sweep_id, _ = run_design(tmp_path, _spec(tmp_path, goal=0.001, hours=0.1))
    assert first.result.stop == "budget"
    n = len(fake_ray.runs)
    more, store, sweep_id, _ = run_design(tmp_path, _spec(tmp_path, goal=0.001, hours=0.2))
    assert more.result.stop == "budget" and not more.result.already
    assert len(fake_ray.runs) > n and more.result.spent_s <= 720
    assert [d.kind for d in store.decisions(sweep_id)].count("stop") == 2


def test_costs_are_asked_each_step_so_a_fork_off_a_built_trunk_is_preferred(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    """wsd-fork: a trial's budget below the longest trunk of its seed built so far trains only
    its decay branch (the trunk is per seed: workloads/training/stages.py ``trunk_key``). The
    cost model is built anew every step from what the store holds, so once a long trial of a
    seed has run, the forks off its trunk are cheap candidates, and the rule takes them."""
    built: list[int] = []

    def trunk_costs(root: Path) -> Callable[[], PerTrial]:
        def make() -> PerTrial:
            store = ResultsStore.sqlite_under(root)
            info = store.get_sweep("law")
            done = store.trials(info.id, {"completed"}) if info else []
            trunks: dict[int, float] = {}
            for t in done:
                seed, x = int(t.overrides["seed"]), float(t.overrides["law_x"])
                trunks[seed] = max(trunks.get(seed, 0.0), x)
            built.append(len(done))

            def cost(config: BaseModel) -> tuple[float | None, str]:
                x, seed = float(getattr(config, "law_x", 0)), int(getattr(config, "seed", 0))
                if x < trunks.get(seed, 0.0):
                    return 2.0, "fork off the trunk"
                return cost_s(x), "trunk"

            return PerTrial(cost)

        return make

    fake_ray.slots = 1
    path = tmp_path / "law.yaml"
    path.write_text(SPEC.format(goal=0.03, hours=10).replace("0.02", "0.05"))
    forks, store, sweep_id, _ = run_design(
        tmp_path, load_spec(path), costs=trunk_costs(tmp_path / "runs")
    )
    picks = [d for d in store.decisions(sweep_id) if d.kind == "pick"]
    assert len(built) >= len({d.step for d in picks})  # a fresh cost model per step
    assert built == sorted(built) and built[-1] > built[0]  # it saw the trials completed so far
    trunk_done = next(i for i, d in enumerate(picks) if d.value == 100000 and d.seed == 0)
    after = picks[trunk_done + 1 :]
    assert after and after[0].cost_basis == "fork off the trunk"  # the cheap fork is taken
    assert all(d.predicted_cost_s == 2.0 for d in after if d.cost_basis != "trunk")

    static = tmp_path / "static"
    static.mkdir()
    (static / "law.yaml").write_text(path.read_text())
    plain, pstore, psid, _ = run_design(static, load_spec(static / "law.yaml"))
    assert plain.result.stop == forks.result.stop == "goal"
    plain_picks = [d for d in pstore.decisions(psid) if d.kind == "pick"]
    # the goal for less predicted compute: the forks replace full trials
    assert sum(d.predicted_cost_s or 0 for d in picks) < sum(
        d.predicted_cost_s or 0 for d in plain_picks
    )


def test_a_metric_the_workload_does_not_report_stops_the_design(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    path = tmp_path / "law.yaml"
    # a law metric's per-set name passes the spec's check; the trials do not report it
    path.write_text(SPEC.format(goal=0.03, hours=1).replace("sleep.law_y", "sleep.law_y/none"))
    proposals, store, sweep_id, tracker = run_design(tmp_path, load_spec(path))
    r = proposals.result
    assert r.stop == "error" and r.error is not None
    assert "design.metric 'sleep.law_y/none'" in r.error
    assert "sleep.law_y" in r.error and "Fix:" in r.error
    assert len(fake_ray.runs) == 2  # the first batch ran; nothing after it
    assert tracker.tags[STOP_TAG] == "error"


def test_a_stub_rule_is_told_the_slots_the_pending_trials_and_the_costs(
    tmp_path: Path, fake_ray: FakeRay
) -> None:
    calls: list[dict[str, Any]] = []

    class Stub:
        Point, Candidate, initial_design = rule.Point, rule.Candidate, rule.initial_design

        @staticmethod
        def propose(points: Any, candidates: Any, **kw: Any) -> rule.Step:
            calls.append({"points": list(points), "candidates": list(candidates), **kw})
            if len(points) + len(kw["pending"]) >= 3:
                return rule.Step((), "candidates" if not kw["pending"] else None, 0.5, 1.0, "x")
            c = candidates[0]
            pick = rule.Pick(c.value, c.seed, c.cost_s or 0.0, None, "first candidate")
            return rule.Step((pick,), None, None, 0.0, "one")

    proposals, store, sweep_id, _ = run_design(tmp_path, _spec(tmp_path), the_rule=Stub())
    assert [c["slots"] for c in calls[:2]] == [2, 1]
    assert calls[1]["pending"] == [rule.Candidate(10.0, 0, cost_s(10))]
    assert all(c["goal"] == 0.03 and c["budget_s"] == 36000 for c in calls)
    assert all(c["min_distinct"] == 4 and c["initial"] == 3 and c["log_base"] == 10 for c in calls)
    assert len(calls[0]["candidates"]) == 20 and calls[0]["candidates"][0].cost_s == cost_s(10)
    assert proposals.result.stop == "candidates" and len(fake_ray.runs) == 3


def test_an_unknown_cost_is_recorded_as_unknown_or_as_the_rules_estimate() -> None:
    """A new user found unknown costs recorded as 0 s: with nothing measured the record holds
    no figure; once trials are measured the rule's estimate is recorded as such."""
    from orchestrator.kinds.design.driver import _recorded_cost

    unknown = "unknown: no cost model for workload sleep"
    assert _recorded_cost(0.0, unknown, 0.0) == (None, unknown)
    cost, basis = _recorded_cost(12.5, unknown, 40.0)
    assert cost == 12.5 and basis.startswith("estimated by the design rule") and unknown in basis
    assert _recorded_cost(30.0, "calibrated", 0.0) == (30.0, "calibrated")
