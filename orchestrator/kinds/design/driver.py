"""Adaptive designs on the driver loop: :class:`DesignProposals` for a spec's ``design:`` block.

The rule (:func:`analysis.design.propose`, pure) decides; this module feeds it each step (the
completed trials, the candidates with costs asked anew of :mod:`orchestrator.cost.model`, the
trials in flight, goal, budget, free Ray slots) and records its picks or stop (``goal``,
``budget``, ``candidates``; ``error``: a completed trial did not report the design's metric).
Compute is trial wall seconds, times ``resources.num_gpus`` for GPU trials.

Every decision is recorded before its trial runs: SQL (``ss_design_decisions``), MLflow
(parent-run metrics ``design.*``, tag ``specscale.design.stop``, ``design.json`` written by
:meth:`DesignProposals.close`). A resubmit runs the recorded picks that did not complete first,
and records nothing twice. Steps, records and resume: docs/design.md.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from orchestrator.cost import model as costing
from orchestrator.cost.totals import TrialCost
from orchestrator.driving.events import Listener, Tally
from orchestrator.driving.sweep_run import Flight, SweepRun
from orchestrator.driving.task import TaskOutcome
from orchestrator.errors import SpecError
from orchestrator.kinds.design.spec import design_seeds
from orchestrator.kinds.design.summary import DesignSummary
from orchestrator.kinds.design.trials import design_of, design_trial
from orchestrator.spec.grid import TrialSpec
from orchestrator.spec.sweep import SweepSpec
from orchestrator.spec.yaml_lines import spec_line
from orchestrator.store.results import Decision, ResultsStore, TrialInfo, TrialState

__all__ = [
    "STOP_TAG",
    "CostFn",
    "Costs",
    "DesignProposals",
    "InitialCost",
    "PerTrial",
    "check_budget",
    "completed_values",
    "cost_model",
    "initial_cost",
]

Cost = tuple[float | None, str]
"""(predicted compute of one trial, trial seconds or GPU-seconds; None: unknown) and its basis"""


class CostFn(Protocol):
    """A cost model at one moment: a trial config -> its predicted cost."""

    def __call__(self, config: BaseModel) -> Cost:
        """The cost of one trial run next (what the cache holds now is shared)."""

    def in_order(self, configs: Sequence[BaseModel]) -> list[Cost]:
        """The costs of trials run in this order, shared work counted once (by the first)."""


Costs = Callable[[], CostFn]
"""a fresh cost model, built once per step (it reads what the cache and the store hold now)"""

STOP_TAG = "specscale.design.stop"
"""parent-run tag: why the design stopped (goal, budget, candidates, error)"""
LOG_BASE = 10.0
"""the law is in log10 of the axis: the goal is in metric units per decade"""


def _rule() -> Any:
    """The design rule (:mod:`analysis.design`), imported when a design runs."""
    return importlib.import_module("analysis.design")


def units(spec: SweepSpec) -> float:
    """Compute per trial second: ``resources.num_gpus`` for a GPU trial (GPU-seconds), else 1."""
    return float(spec.resources.num_gpus) or 1.0


class PerTrial:
    """A :class:`CostFn` from a plain ``config -> Cost`` function (no shared work)."""

    def __init__(self, fn: Callable[[BaseModel], Cost]) -> None:
        self.fn = fn

    def __call__(self, config: BaseModel) -> Cost:
        return self.fn(config)

    def in_order(self, configs: Sequence[BaseModel]) -> list[Cost]:
        return [self.fn(c) for c in configs]


class _Predicted:
    """:class:`orchestrator.cost.model.Predictor` as a :class:`CostFn`, in compute units."""

    def __init__(self, predict: costing.Predictor, factor: float) -> None:
        self.predict, self.factor = predict, factor

    def _cost(self, c: TrialCost) -> Cost:
        total = c.total_s
        if total is None:  # say why: the first stage without a figure
            why = next((s.detail for s in c.stages if s.seconds is None and s.detail), "")
            return None, f"unknown: {why}" if why else "unknown"
        return float(total) * self.factor, c.basis

    def __call__(self, config: BaseModel) -> Cost:
        return self._cost(self.predict(config))

    def in_order(self, configs: Sequence[BaseModel]) -> list[Cost]:
        swept = self.predict.sweep([(str(i), c) for i, c in enumerate(configs)])
        return [self._cost(c) for _, c in swept.trials]


def cost_model(
    store: ResultsStore | None,
    spec: SweepSpec,
    cache_dir: Path | None,
    *,
    hardware: str | None = None,
    devices: int = 1,
) -> Costs:
    """The design's cost model: :func:`orchestrator.cost.model.predictor` on this machine
    (or ``hardware``, ``devices`` GPUs of it: a dry run's ``--hardware``), calibrated from the
    results DB's completed trials, else modelled, else unknown, in trial seconds times
    :func:`units`; rebuilt on each call, so it sees the wsd-fork trunks, features and trials
    there are now.

    Raises (when called):
        OrchestratorError: an unknown hardware name.
        StoreError: the results DB cannot be read.
    """
    factor = units(spec)

    def make() -> CostFn:
        predict = costing.predictor(
            store, spec, cache_dir=cache_dir, hardware=hardware, devices=devices
        )
        return _Predicted(predict, factor)

    return make


@dataclass(frozen=True)
class InitialCost:
    """The initial design's trials still to run (axis values, seed) and their predicted
    compute; ``done`` the initial design's values already completed (a resubmit)."""

    values: list[Any]
    seed: int
    costs: list[float | None]
    bases: list[str]
    done: list[Any] = field(default_factory=list)

    @property
    def total_s(self) -> float | None:
        """Their predicted compute, trial seconds (None: some trial's cost is unknown)."""
        return None if any(c is None for c in self.costs) else sum(c or 0.0 for c in self.costs)

    @property
    def basis(self) -> str:
        """The distinct bases of the figures, in order."""
        return "; ".join(dict.fromkeys(self.bases)) or "nothing left to run"


def initial_cost(
    spec: SweepSpec, cost: CostFn, rule: Any = None, *, done: AbstractSet[float] = frozenset()
) -> InitialCost:
    """What the initial design (:func:`analysis.design.initial_design`: ``design.initial``
    distinct values spread in log space, at the first seed) will cost, run in order (shared
    work, e.g. cached features, counted once); values in ``done`` (completed) cost nothing."""
    d = design_of(spec)
    rule = rule or _rule()
    original = {float(v): v for v in d.values}
    chosen = [original[float(v)] for v in rule.initial_design(sorted(original), n=d.initial)]
    seed = design_seeds(d, spec.seeds)[0]
    todo = [v for v in chosen if float(v) not in done]
    figures = cost.in_order([design_trial(spec, v, seed).config for v in todo])
    bases = [b for _, b in figures]
    return InitialCost(
        todo, seed, [c for c, _ in figures], bases, [v for v in chosen if v not in todo]
    )


def completed_values(store: ResultsStore | None, spec: SweepSpec) -> set[float]:
    """Axis values of the sweep's completed design trials in ``store`` (none without one)."""
    info = store.get_sweep(spec.name) if store is not None else None
    if store is None or info is None:
        return set()
    axis = design_of(spec).axis
    return {
        float(t.overrides[axis])
        for t in store.trials(info.id, {TrialState.COMPLETED})
        if axis in t.overrides
    }


MODELLED_SLACK = 4.0
"""a budget is refused on a modelled initial-design cost only beyond this factor (a calibrated
or given cost: as soon as it exceeds the budget)"""


def check_budget(
    path: Path,
    spec: SweepSpec,
    cost: CostFn,
    rule: Any = None,
    *,
    done: AbstractSet[float] = frozenset(),
) -> list[str]:
    """Refuse a budget smaller than the initial design's predicted cost (:func:`initial_cost`,
    ``done``: values completed before); return the lines that say what the design will cost
    (for ``--dry-run``). An unknown cost is said, not refused; a modelled one only beyond
    :data:`MODELLED_SLACK` times the budget.

    Raises:
        SpecError: ``file:line`` of ``design.budget_hours`` with both numbers and a fix.
    """
    d = design_of(spec)
    init = initial_cost(spec, cost, rule, done=done)
    seeds = design_seeds(d, spec.seeds)
    n_values = len({float(v) for v in d.values})
    where = f"{len(init.values)} trials at {d.axis} = {_values(init.values)}, seed {init.seed}"
    if init.done:
        where += f" ({_values(init.done)} completed before)"
    lines = [
        d.describe(),
        f"candidates: {n_values} values x {len(seeds)} seeds = {n_values * len(seeds)} trials "
        f"at most (seeds {_values(seeds)})",
    ]
    total = init.total_s
    if total is None:
        lines.append(
            f"initial design: {where}; predicted cost unknown ({init.basis}): the budget of "
            f"{d.budget_hours:g} h is not checked against it"
        )
        return lines
    lines.append(f"initial design: {where}; predicted {_hours(total)} ({init.basis})")
    modelled = any("modelled" in b for b in init.bases)
    if modelled and d.budget_s < total <= MODELLED_SLACK * d.budget_s:
        lines.append(
            f"  the modelled figure exceeds the budget of {d.budget_hours:g} h but is within "
            f"{MODELLED_SLACK:g}x of it: not refused (the CPU's peak is measured under the load "
            "of the moment; a figure calibrated on completed trials is refused when over)"
        )
        return lines
    if total > (MODELLED_SLACK if modelled else 1.0) * d.budget_s:
        line = spec_line(path, ("design", "budget_hours"), ("design",))
        raise SpecError(
            f"{path}:{line}: design.budget_hours {d.budget_hours:g} h is less than the initial "
            f"design's predicted cost, {_hours(total)} ({where}; {init.basis}). Fix: "
            f"budget_hours: {math.ceil(total / 360) / 10:g} or more, or cheaper candidate "
            "values (the initial design spans the smallest to the largest)"
        )
    return lines


def _recorded_cost(rule_s: float, basis: str, spent_s: float) -> tuple[float | None, str]:
    """A pick's predicted seconds and basis as recorded: for an ``unknown...`` basis, the
    rule's estimate from the measured trials (the basis says so), or None when nothing was
    measured yet (the rule's 0 s placeholder is never recorded)."""
    if not basis.startswith("unknown"):
        return rule_s, basis
    if spent_s <= 0:
        return None, basis
    return rule_s, f"estimated by the design rule from the measured trials ({basis})"


def _values(values: Sequence[Any]) -> str:
    return "[" + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values) + "]"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h ({seconds:,.0f} s)"


@dataclass
class _Done:
    """What the store says the design has done: the rule's points (a failed trial, or one
    without a finite metric, is a point of NaN y: its compute counts as spent), the (value,
    seed) pairs it may not propose again, a completed trial without the metric."""

    points: list[Any] = field(default_factory=list)
    done: set[tuple[float, int]] = field(default_factory=set)
    missing: str | None = None

    @property
    def spent_s(self) -> float:
        """Measured compute of the finished trials (failed ones included)."""
        return float(sum(p.cost_s for p in self.points))

    @property
    def completed(self) -> int:
        """Trials with a finite metric."""
        return sum(1 for p in self.points if math.isfinite(p.y))


class DesignProposals:
    """A spec's adaptive design as the driver loop's proposals (:func:`~orchestrator.driving.
    sweep_run.drive`; see the module docstring).

    ``rule``: the design rule (a module or object with ``Point``, ``Candidate``, ``propose``
    and ``initial_design`` as :mod:`analysis.design`; default that module); ``costs``: the cost
    model (default :func:`cost_model` over the run's store and cache). :meth:`close` writes
    ``design.json`` and returns the summary.
    """

    def __init__(self, run: SweepRun, *, rule: Any = None, costs: Costs | None = None) -> None:
        self.spec = run.spec
        self.design = design_of(run.spec)
        self.rule = rule or _rule()
        self.costs = costs or cost_model(run.store, run.spec, run.paths.cache_dir)
        self.seeds = design_seeds(self.design, run.spec.seeds)
        self.values = {float(v): v for v in self.design.values}
        self.queue: list[tuple[TrialInfo, BaseModel]] = []
        self.in_flight: dict[str, tuple[float, int, float | None]] = {}
        """trial key -> (value, seed, predicted compute) of the picks running now"""
        self.in_flight_cost: dict[str, float | None] = {}
        """trial key -> predicted compute of each queued or running pick"""
        self.closed = False
        self.error: str | None = None
        self.result = DesignSummary(goal=self.design.goal, budget_s=self.design.budget_s)
        recorded = run.store.decisions(run.sweep_id)
        self.step = 1 + max((d.step for d in recorded), default=-1)
        self.last_stop = recorded[-1] if recorded and recorded[-1].kind == "stop" else None
        self._requeue(run, recorded)
        trials = run.store.trials(run.sweep_id)
        self.skipped = sum(1 for t in trials if t.state == TrialState.COMPLETED)
        finished = {t.key for t in trials if t.state in (TrialState.COMPLETED, TrialState.FAILED)}
        self.todo = len(self.values) * len(self.seeds) - len(finished)

    def _requeue(self, run: SweepRun, recorded: Sequence[Decision]) -> None:
        """The recorded picks whose trials did not complete or fail go first, in order."""
        trials = {t.key: t for t in run.store.trials(run.sweep_id)}
        for d in recorded:
            if d.kind != "pick" or d.value is None or d.seed is None:
                continue
            t = design_trial(self.spec, self.values.get(d.value, d.value), d.seed)
            info = trials.get(t.key)
            if info is not None and info.state in (TrialState.COMPLETED, TrialState.FAILED):
                continue
            if any(q.key == t.key for q, _ in self.queue):
                continue
            self.queue.append((self._row(run, t), t.config))
            self.in_flight_cost[t.key] = d.predicted_cost_s

    @staticmethod
    def _row(run: SweepRun, t: TrialSpec) -> TrialInfo:
        run.store.add_trials(run.sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides)])
        info = run.trial(t.key)
        assert info is not None
        return info

    # -- the driver loop's side ------------------------------------------------------------

    def propose(
        self, run: SweepRun, emit: Listener, tally: Tally, *, free: int = 1
    ) -> tuple[TrialInfo, Any] | None:
        if self.queue:
            return self._next()
        if self.closed:
            return None
        done = self._read(run)
        if done.missing and self.error is None:
            self.error = done.missing
        if self.error is not None:
            if not self.in_flight:
                self._stop(run, done, "error", self.error, None)
            return None
        candidates, bases = self._candidates(done)
        pending = [self.rule.Candidate(v, s, c) for v, s, c in self.in_flight.values()]
        step = self.rule.propose(
            done.points,
            candidates,
            goal=self.design.goal,
            budget_s=self.design.budget_s,
            slots=max(1, free),
            pending=pending,
            min_distinct=self.design.kept_distinct,
            log_base=LOG_BASE,
            initial=self.design.initial,
        )
        if step.picks:
            self._record(run, step, done, bases)
            return self._next()
        if not self.in_flight:  # the rule waits on nothing: it has stopped
            self._stop(run, done, step.stop or "candidates", step.message, step.half_width)
        return None

    def finished(self, run: SweepRun, flight: Flight, outcome: TaskOutcome | None) -> None:
        """A trial ended: no longer committed; a completed one must report the metric."""
        self.in_flight.pop(flight.trial.key, None)
        metric = self.design.metric
        if outcome is not None and outcome.ok and metric not in outcome.metrics:
            reported = ", ".join(sorted(outcome.metrics)[:30])
            missing = _missing(metric, run.spec.workload, flight.trial.key, reported)
            self.error = self.error or missing

    def cancel_rest(self) -> int:
        """A cancel request: the queued picks stay recorded (a resubmit runs them first)."""
        left = len(self.queue)
        self.queue.clear()
        self.closed = True
        return left

    # -- steps -----------------------------------------------------------------------------

    def _next(self) -> tuple[TrialInfo, Any]:
        info, config = self.queue.pop(0)
        value, seed = float(info.overrides[self.design.axis]), int(info.overrides["seed"])
        self.in_flight[info.key] = (value, seed, self.in_flight_cost.get(info.key))
        return info, config

    def _read(self, run: SweepRun) -> _Done:
        """The design's trials as the store has them (every trial of the sweep is one)."""
        out = _Done()
        factor = units(self.spec)
        frame = run.store.metrics_frame(run.sweep_id)
        metric = self.design.metric
        column = metric if metric in frame else f"metric.{metric}"
        by_key = (
            dict(zip(frame["trial_key"], frame[column], strict=True)) if column in frame else {}
        )
        for t in run.store.trials(run.sweep_id):
            if self.design.axis not in t.overrides or "seed" not in t.overrides:
                continue
            if t.state not in (TrialState.FAILED, TrialState.COMPLETED):
                continue
            x, seed = float(t.overrides[self.design.axis]), int(t.overrides["seed"])
            out.done.add((x, seed))
            y = by_key.get(t.key) if t.state == TrialState.COMPLETED else None
            if y is None or not math.isfinite(float(y)):
                y = math.nan  # spent, but no point of the law
                if t.state == TrialState.COMPLETED and column not in frame:
                    out.missing = out.missing or _missing(metric, self.spec.workload, t.key, "")
            out.points.append(self.rule.Point(x, seed, float(y), (t.wall_s or 0.0) * factor))
        return out

    def _candidates(self, done: _Done) -> tuple[list[Any], dict[tuple[float, int], str]]:
        """Every (value, seed) not run, queued or in flight, with its cost asked now."""
        cost = self.costs()
        busy = {(v, s) for v, s, _ in self.in_flight.values()}
        out, bases = [], {}
        for x in sorted(self.values):
            for seed in self.seeds:
                if (x, seed) in done.done or (x, seed) in busy:
                    continue
                predicted, basis = cost(design_trial(self.spec, self.values[x], seed).config)
                out.append(self.rule.Candidate(x, seed, predicted))
                bases[(x, seed)] = basis
        return out, bases

    def _record(
        self, run: SweepRun, step: Any, done: _Done, bases: dict[tuple[float, int], str]
    ) -> None:
        """Record a step's picks (SQL, then MLflow), then queue their trials."""
        spent = done.spent_s
        committed = sum(c or 0.0 for _, _, c in self.in_flight.values())
        decisions, trials = [], []
        for rank, pick in enumerate(step.picks):
            x, seed = float(pick.value), int(pick.seed)
            assert (x, seed) in bases, f"the rule picked ({x:g}, {seed}), not a candidate"
            t = design_trial(self.spec, self.values[x], seed)
            cost_s, basis = _recorded_cost(pick.predicted_cost_s, bases[(x, seed)], spent)
            decisions.append(
                Decision(
                    step=self.step,
                    rank=rank,
                    kind="pick",
                    value=x,
                    seed=seed,
                    trial_key=t.key,
                    predicted_cost_s=cost_s,
                    cost_basis=basis,
                    expected_half_width=pick.expected_half_width,
                    half_width=step.half_width,
                    spent_s=spent,
                    committed_s=committed,
                    reason=pick.reason,
                )
            )
            committed += pick.predicted_cost_s or 0.0
            trials.append(t)
        self.result.decisions += run.store.add_decisions(run.sweep_id, decisions)
        for t, d in zip(trials, decisions, strict=True):
            self.queue.append((self._row(run, t), t.config))
            self.in_flight_cost[t.key] = d.predicted_cost_s
        expected = [p.expected_half_width for p in step.picks if p.expected_half_width is not None]
        self._log(run, step.half_width, spent, min(expected) if expected else None)
        self.step += 1
        self.last_stop = None

    def _stop(
        self, run: SweepRun, done: _Done, stop: str, message: str, half_width: float | None
    ) -> None:
        """Record the stop once: a resubmit whose rule repeats the recorded stop writes nothing."""
        self.closed = True
        spent = done.spent_s
        r = self.result
        r.stop, r.message, r.half_width, r.spent_s = stop, message, half_width, spent
        r.trials = done.completed
        r.error = self.error
        last = self.last_stop
        if last is not None and last.stop == stop and math.isclose(last.spent_s, spent):
            r.already = r.decisions == 0
            return
        decision = Decision(
            step=self.step,
            rank=0,
            kind="stop",
            stop=stop,
            reason=message,
            half_width=half_width,
            spent_s=spent,
        )
        r.decisions += run.store.add_decisions(run.sweep_id, [decision])
        self._log(run, half_width, spent, None)
        run.tracker.set_tags(run.parent_run, {STOP_TAG: stop, "specscale.design.message": message})
        self.step += 1

    def _log(
        self, run: SweepRun, half_width: float | None, spent: float, expected: float | None
    ) -> None:
        values = {"design.spent_h": spent / 3600}
        if half_width is not None:
            values["design.half_width"] = half_width
        if expected is not None:
            values["design.expected_half_width"] = expected
        run.tracker.log_metrics(run.parent_run, values, step=self.step)

    # -- after the loop --------------------------------------------------------------------

    def close(self, run: SweepRun) -> DesignSummary:
        """Write every decision to ``<run root>/<sweep>/design.json`` and the parent run's
        artifacts; return the summary (``stop`` None: cancelled before a stop)."""
        decisions = run.store.decisions(run.sweep_id)
        path = run.paths.run_root / self.spec.name / "design.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "design": self.design.model_dump(mode="json"),
            "seeds": self.seeds,
            "decisions": [d.as_json() for d in decisions],
        }
        path.write_text(json.dumps(body, indent=1, allow_nan=True) + "\n", encoding="utf-8")
        run.tracker.log_artifact(run.parent_run, path)
        if self.result.stop is None and not self.closed:
            self.result.error = self.error
        return self.result


def _missing(metric: str, workload: str, key: str, reported: str) -> str:
    said = f" (it reported {reported})" if reported else ""
    return (
        f"design.metric {metric!r} is not a metric of {workload}: trial {key} did not report "
        f"it{said}. Fix: set design.metric to one of its metrics and resubmit (the design "
        "stopped; its completed trials are kept)"
    )
