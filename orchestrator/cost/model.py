"""What a sweep's trials will cost before they run: seconds per stage, each with its basis.

Bases (the rules: docs/scale.md, "Cost before running"):

- ``calibrated``: the stage's measured seconds (``wall_s/<stage>``) of completed trials of the
  same workload, target and hardware (``hardware.id``) in the results DB, fitted by OLS linear
  in the stage's work (:mod:`workloads.draft_train.cost`); one trial or one work value: a ratio
  through the origin.
- ``modelled``: the same work over the hardware's throughput times
  :func:`workloads.roofline.train_cost.utilisation`.
- ``unknown``: no cost model, shape or hardware profile; no figure.

Shared work costs only what the cache folder lacks. :meth:`Predictor.sweep` costs the trials in
the schedule of :func:`orchestrator.cost.schedule.simulate` (each trial's figure includes its
waits); called with one config, the predictor costs that trial run alone now. The ``setup``
stage (a trial's wall seconds less its stages') is left out when nothing calibrates it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.cost.fit import StageFit, fit_stage
from orchestrator.cost.hardware import Hardware, resolve_hardware
from orchestrator.cost.schedule import StageRun, Step, simulate
from orchestrator.cost.totals import Basis, StageCost, SweepCost, TrialCost
from orchestrator.kinds import kind_of
from orchestrator.spec.sweep import SweepSpec
from orchestrator.store.history import CompletedTrial
from orchestrator.store.results import ResultsStore
from workloads.protocol import CostContext, CostModel, CostUnknown, StageWork
from workloads.roofline.hardware import HardwareProfile, fingerprint_id
from workloads.roofline.train_cost import Utilisation, utilisation

__all__ = ["Predictor", "predictor"]

SETUP = "setup"
"""the stage of a trial's start-up: its measured wall seconds less its stages' seconds"""
SETUP_COLD = "setup (cold)"
"""the start-up of a trial that starts a Ray worker: the first trial of each slot of a sweep
(imports, the data read once per process, the target converted once per cache)"""


@dataclass
class _Taus:
    """Acceptance lengths measured by the matched trials of one tau group (target, draft,
    tree)."""

    by_sets: dict[tuple[str, ...], list[float]] = field(default_factory=dict)
    """the prompt sets evaluated -> pooled acceptance lengths"""
    per_set: dict[str, list[float]] = field(default_factory=dict)
    """a prompt set's name -> its own acceptance lengths (``<tau_metric>/<name>``)"""


@dataclass
class _Group:
    """The calibration of one group of trials (target, dtype, ...) on the hardware."""

    fits: dict[str, StageFit]
    taus: dict[str, _Taus]
    """tau group -> the acceptance lengths its trials measured"""
    n: int
    """matched trials"""


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value >= 1


@dataclass(frozen=True)
class _StagePlan:
    stage: str
    basis: Basis
    detail: str
    steps: tuple[Step, ...]
    what: str = ""
    """its shared work in words (``features``, ``replies``, ...), for the detail"""


SHARED_WORK = {"features": "features", "regen": "replies", "trunk": "trunk", "greedy": "greedy"}
"""a shared key's prefix -> the work in words"""


class Predictor:
    """Predicted seconds of a spec's trials (call it with a trial config): calibrated stages
    where the results DB has matched trials, modelled ones elsewhere, unknown without a model.

    Made by :func:`predictor`; :meth:`sweep` costs a whole sweep as the driver runs it (its
    shared work built once, trials running at once sharing it, see :func:`simulate`).
    """

    def __init__(
        self,
        spec: SweepSpec,
        hardware: Hardware,
        history: Sequence[CompletedTrial],
        *,
        cache_dir: Path | None,
        match_hardware: bool = True,
        profile: HardwareProfile | None = None,
    ) -> None:
        self.spec = spec
        self.hardware = hardware
        self.model: CostModel | None = spec.workload_info.cost
        self.cache_dir = cache_dir
        self._profile = profile
        self._groups: dict[str, _Group] = {}
        self.notes: list[str] = list(hardware.notes)
        """what the figures assume and which trials were not used, for the console"""
        self._history = self._matched(history, match_hardware)

    def _matched(self, history: Sequence[CompletedTrial], match: bool) -> list[Any]:
        """(config, trial) of the completed trials run on this hardware."""
        if self.model is None or not history:
            return []
        want = fingerprint_id(self.hardware.fingerprint)
        found, unmarked, elsewhere, invalid = [], 0, 0, 0
        for t in history:
            hw_id = t.metrics.get("hardware.id")
            if match and hw_id is None:
                unmarked += 1
                continue
            if match and hw_id != want:
                elsewhere += 1
                continue
            try:
                found.append((self.spec.config_model.model_validate(t.config), t))
            except ValueError:
                invalid += 1
        if unmarked:
            self.notes.append(
                f"{unmarked} completed trials in the results DB record no hardware "
                "(hardware.id, recorded since issue 24): not used for calibration"
            )
        if elsewhere:
            self.notes.append(f"{elsewhere} completed trials ran on other hardware: not used")
        if invalid:
            self.notes.append(f"{invalid} completed trials no longer validate: not used")
        if not match:
            self.notes.append("calibrated on trials of any hardware (hardware not matched)")
        return found

    def profile(self, config: BaseModel) -> HardwareProfile | None:
        """The hardware profile a trial computes on (its dtype's)."""
        if self._profile is not None:
            return self._profile
        if self.model is None:
            return None
        return self.hardware.profile_of(self.model.dtype(config))

    def utilisation(self, config: BaseModel) -> Utilisation | None:
        """The utilisation assumed for a trial's modelled figures."""
        prof = self.profile(config)
        return None if prof is None else utilisation(prof)

    def _group(self, config: BaseModel, prof: HardwareProfile) -> _Group:
        """The calibration of the trials of ``config``'s group (fitted once)."""
        assert self.model is not None
        model = self.model
        key = _calibration_key(config)
        if key in self._groups:
            return self._groups[key]
        points: dict[str, list[tuple[float, float]]] = {}
        taus: dict[str, _Taus] = {}
        n = 0
        mine = [(cfg, t) for cfg, t in self._history if _calibration_key(cfg) == key]
        cold = _cold_trials([t for _, t in mine])
        for cfg, t in mine:
            try:
                done = model.done(cfg, t.metrics, prof)
            except CostUnknown:
                continue
            n += 1
            measured = 0.0
            for stage in model.stages:
                y = t.metrics.get(f"wall_s/{stage}")
                if y is None or not math.isfinite(y):
                    continue
                measured += y
                if stage in done:
                    points.setdefault(stage, []).append((done[stage], y))
            wall = t.wall_s if t.wall_s is not None else t.metrics.get("wall_s/total")
            if wall is not None and math.isfinite(wall):
                which = SETUP_COLD if (t.sweep, t.key) in cold else SETUP
                points.setdefault(which, []).append((0.0, max(0.0, wall - measured)))
            tau = t.metrics.get(model.tau_metric)
            if _finite(tau):
                assert tau is not None
                found = taus.setdefault(model.tau_group(cfg), _Taus())
                sets = model.tau_sets(cfg)
                found.by_sets.setdefault(sets, []).append(tau)
                for name in sets:
                    one = t.metrics.get(f"{model.tau_metric}/{name}")
                    if _finite(one):
                        assert one is not None
                        found.per_set.setdefault(name, []).append(one)
        setups = {s: [y for _, y in points.pop(s, [])] for s in (SETUP, SETUP_COLD)}
        fits = {s: f for s, pts in points.items() if (f := fit_stage(s, pts)) is not None}
        for stage, other in ((SETUP, SETUP_COLD), (SETUP_COLD, SETUP)):
            ys = setups[stage] or setups[other]  # one kind only: it stands for both
            if ys:
                mean = sum(ys) / len(ys)
                fits[stage] = StageFit(stage, mean, 0.0, None, len(ys), "mean", 0.0, mean)
        group = _Group(fits, taus, n)
        self._groups[key] = group
        return group

    def _tau(self, config: BaseModel, group: _Group) -> tuple[float | None, str]:
        """The acceptance length the trial's evaluation is costed at, and where it comes from:
        the mean of matched trials with the same target, draft and tree on the same prompt
        sets; else the mean over the trial's prompt sets of each set's own acceptance length
        (``acceptance_length/<set>``) measured by matched trials that evaluated it among
        others; else their pooled mean on other sets; else None (acceptance length 1)."""
        assert self.model is not None
        found = group.taus.get(self.model.tau_group(config))
        if found is None:
            return None, "no matched trial with this target, draft and tree measured it"
        sets = self.model.tau_sets(config)
        if sets in found.by_sets:
            same = found.by_sets[sets]
            return _mean(same), f"measured by {len(same)} matched trials on the same prompt sets"
        if sets and all(s in found.per_set for s in sets):
            tau = _mean([_mean(found.per_set[s]) for s in sets])
            return tau, (
                f"the mean over its prompt sets ({', '.join(sets)}) of each one's acceptance "
                "length measured by matched trials that evaluated more sets"
            )
        every = [v for vs in found.by_sets.values() for v in vs]
        return _mean(every), f"measured by {len(every)} matched trials on other prompt sets"

    def plan(self, config: BaseModel, *, cold: bool = False) -> _Plan:
        """One trial's steps in the order it runs them (start-up, then each stage's shared work
        and its own), or its cost when unknown; ``cold``: it starts a Ray worker (the first
        trial of a slot)."""
        if self.model is None:
            why = f"no cost model for workload {self.spec.workload}"
            return _Plan(unknown=TrialCost((StageCost("trial", None, "unknown", why),)))
        prof = self.profile(config)
        if prof is None:
            return _Plan(
                unknown=_unknown(self.model, self.hardware.missing or "no hardware profile")
            )
        group = self._group(config, prof)
        tau_measured, how = self._tau(config, group)
        tau = tau_measured or 1.0
        ctx = CostContext(
            hw=prof, cache_dir=self.cache_dir, tau=tau, devices=self.hardware.gpus_per_trial or 1
        )
        try:
            works = self.model.plan(config, ctx)
        except CostUnknown as exc:
            return _Plan(unknown=_unknown(self.model, str(exc)))
        util = utilisation(prof)
        stages = []
        setup = group.fits.get(SETUP_COLD if cold else SETUP)
        if setup is not None:
            which = "trials that started a Ray worker" if cold else "trials after the first"
            detail = f"{setup.detail()} ({which} of a slot)"
            stages.append(_StagePlan(SETUP, "calibrated", detail, (Step(SETUP, seconds=setup.a),)))
        for stage in self.model.stages:
            mine = [w for w in works if w.stage == stage]
            if mine:
                stages.append(_stage_plan(stage, mine, group.fits.get(stage), util))
        if tau_measured is not None:
            self._note(f"evaluation at acceptance length {tau:.3g}: {how}")
        else:
            self._note(f"evaluation at acceptance length 1 ({how}): an upper bound")
        if setup is None:
            self._note(
                "trial start-up (target load, draft vocabulary, step-cost probe) not modelled"
            )
        have = {w.shared: w.cached for w in works if w.shared is not None}
        return _Plan(tuple(stages), have)

    def __call__(self, config: BaseModel) -> TrialCost:
        """The cost of one trial run now alone (what the cache holds now is shared), on a Ray
        worker already started (the start-up of a trial that follows another)."""
        costs, _ = self._schedule([self.plan(config)], 1)
        return costs[0]

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def sweep(self, trials: Sequence[tuple[str, BaseModel]]) -> SweepCost:
        """The cost of ``(key, config)`` trials run in this order as the driver runs them:
        :attr:`Hardware.slots` at a time, each starting when a slot frees, the first of each
        slot starting a Ray worker; shared work (features, replies, trunk, greedy references)
        built once, the cache folder's content counted as done, and trials running at once
        sharing it by the rule of :func:`simulate` (each trial's seconds include its waits)."""
        slots = self.hardware.slots
        plans = [self.plan(cfg, cold=i < slots) for i, (_, cfg) in enumerate(trials)]
        costs, wall = self._schedule(plans, slots)
        one = None
        if slots > 1 and not any(c.total_s is None for c in costs):
            alone = [self.plan(cfg, cold=i == 0) for i, (_, cfg) in enumerate(trials)]
            one = self._schedule(alone, 1)[1]
        return SweepCost(
            tuple((key, c) for (key, _), c in zip(trials, costs, strict=True)),
            self.hardware,
            schedule_wall_s=wall,
            one_slot_wall_s=one,
        )

    def sweep_apart(self, trials: Sequence[tuple[str, BaseModel]]) -> SweepCost:
        """The simpler rule :meth:`sweep` is benchmarked against (``benchmarks/cost_bench.py``):
        each trial priced as if run alone after the ones before it (shared work built by the
        first that needs it, no waits, no split), then packed on :attr:`Hardware.slots` by
        :func:`wall_time`."""
        slots = self.hardware.slots
        plans = [self.plan(cfg, cold=i < slots) for i, (_, cfg) in enumerate(trials)]
        costs, _ = self._schedule(plans, 1)
        pairs = tuple((key, c) for (key, _), c in zip(trials, costs, strict=True))
        return SweepCost(pairs, self.hardware)

    def _schedule(self, plans: Sequence[_Plan], slots: int) -> tuple[list[TrialCost], float]:
        """Each plan's cost in the schedule of :func:`simulate`, and the schedule's wall
        seconds (trials of unknown cost take no time in it)."""
        have: dict[str, float] = {}
        for p in plans:
            for k, v in p.have.items():
                have[k] = max(have.get(k, 0.0), v)
        steps = [[s for sp in p.stages for s in sp.steps] for p in plans]
        start, end, tracks = simulate(steps, slots, have)
        costs = []
        for p, track in zip(plans, tracks, strict=True):
            if p.unknown is not None:
                costs.append(p.unknown)
                continue
            order = [sp for sp in p.stages if sp.stage != SETUP]
            order += [sp for sp in p.stages if sp.stage == SETUP]  # start-up last, as shown
            costs.append(TrialCost(tuple(_stage_cost(sp, track.get(sp.stage)) for sp in order)))
        return costs, max(end, default=0.0) - min(start, default=0.0)

    def fits(self) -> dict[str, dict[str, StageFit]]:
        """The calibrations made so far: group -> stage -> fit."""
        return {k: g.fits for k, g in self._groups.items()}

    def matched(self) -> int:
        """Completed trials in the results DB run on this hardware (any group)."""
        return len(self._history)


@dataclass(frozen=True)
class _Plan:
    """A trial's stages in the order it runs them, and the shared units its cache holds; or,
    when its cost is unknown, that cost."""

    stages: tuple[_StagePlan, ...] = ()
    have: dict[str, float] = field(default_factory=dict)
    unknown: TrialCost | None = None


def _cold_trials(trials: Sequence[CompletedTrial]) -> set[tuple[str, str]]:
    """(sweep, key) of the trials that started before any trial of their sweep finished: each
    started a Ray worker of its own (start-up, once per process); without times, none."""
    first: dict[str, Any] = {}
    for t in trials:
        if t.finished_at is not None and (t.sweep not in first or t.finished_at < first[t.sweep]):
            first[t.sweep] = t.finished_at
    return {
        (t.sweep, t.key)
        for t in trials
        if t.started_at is not None and t.sweep in first and t.started_at < first[t.sweep]
    }


def _calibration_key(config: BaseModel) -> str:
    """Trials that calibrate each other: the same target (model, dtype, weights) and device."""
    target = getattr(config, "target", None)
    parts = [str(getattr(target, k, "")) for k in ("model", "dtype", "weights")]
    return "|".join([*parts, str(getattr(config, "device", ""))])


def _unknown(model: CostModel, why: str) -> TrialCost:
    return TrialCost(tuple(StageCost(s, None, "unknown", why) for s in model.stages))


def _stage_plan(
    stage: str, works: Sequence[StageWork], fit: StageFit | None, util: Utilisation
) -> _StagePlan:
    """A stage's steps from its works: one per shared work (its units beyond the cache, at the
    seconds per unit of the stage's fit, else over the utilisation), then its own seconds.

    Calibrated, the stage alone costs ``fit.predict(x)`` for its work ``x`` at utilisation 1
    beyond the cache (as a trial run alone): its shared work ``b`` seconds per second of work
    (the fit's slope), its own work and the fit's intercept the rest (when that rest would be
    negative, the shared work takes all of ``fit.predict(x)``); own seconds ``fit.predict``
    of its own work when the trial finds its shared work done."""
    shared = [w for w in works if w.shared is not None]
    own = [w for w in works if w.shared is None]
    x_shared = sum(w.ideal_of(max(0.0, w.units - w.cached)) for w in shared)
    x_own = sum(w.ideal_of(w.units) for w in own)
    what = ", ".join(
        dict.fromkeys(SHARED_WORK.get((w.shared or "").split(":")[0], "work") for w in shared)
    )
    if fit is not None:
        alone = fit.predict(x_shared + x_own)
        rate = fit.b
        rest = alone - rate * x_shared
        if rest < 0:
            rate, rest = (alone / x_shared if x_shared > 0 else 0.0), 0.0
        per_ideal = {id(w): rate for w in shared}
        mine, idle = rest, fit.predict(x_own)
        basis: Basis = "calibrated"
        detail = fit.detail(x_shared + x_own)
    else:
        per_ideal = {id(w): 1.0 / util.share(w.kind) for w in shared}
        mine = sum(w.ideal_of(w.units) / util.share(w.kind) for w in own)
        idle = None
        basis = "modelled"
        kinds = sorted({w.kind for w in works})
        shares = ", ".join(f"{k} {util.share(k):g}" for k in kinds)  # type: ignore[arg-type]
        detail = f"{x_shared + x_own:.3g} s at peak / utilisation {shares}"
    steps = [
        Step(
            stage,
            key=w.shared,
            units=w.units,
            per_unit=per_ideal[id(w)] * w.ideal_s / w.units if w.units else 0.0,
            split=w.split,
            lookahead=w.lookahead,
        )
        for w in shared
    ]
    steps.append(Step(stage, seconds=mine, idle=idle))
    return _StagePlan(stage, basis, detail, tuple(steps), what)


def _stage_cost(plan: _StagePlan, track: StageRun | None) -> StageCost:
    """A stage's seconds in the schedule (waits included), its basis and detail: the fit or
    the model, and what the schedule made of its shared work."""
    tr = track or StageRun()
    detail = plan.detail
    if plan.what and not tr.touched:
        detail += f"; its {plan.what} done already (the cache, or an earlier trial)"
    if tr.company > 1:
        others = tr.company - 1
        detail += (
            f"; {plan.what} split with {others} trial{'s' if others != 1 else ''} "
            "building it at once"
        )
    if tr.waited > 0:
        detail += f"; {tr.waited:.3g} s of it waiting for another trial's {plan.what}"
    return StageCost(plan.stage, tr.spent, plan.basis, detail)


def _extra_gpus(spec: SweepSpec) -> float:
    """The GPU a trial training on workers keeps beside them (as
    :func:`orchestrator.driving.runner.extra_gpus`), read from the base config and the grid."""
    if not spec.resources.num_gpus or not kind_of(spec).fixed_configs:
        return 0.0
    try:
        base = spec.config_model.model_validate(spec.base)
    except ValueError:
        return 0.0
    train = getattr(base, "train", None)
    workers = [getattr(train, "workers", 1), *spec.grid.get("train.workers", [])]
    on = bool(getattr(train, "deepspeed", None)) or any(
        isinstance(w, int) and w > 1 for w in workers
    )
    return min(1.0, spec.resources.num_gpus) if on else 0.0


def predictor(
    store: ResultsStore | None,
    spec: SweepSpec,
    *,
    cache_dir: Path | None = None,
    hardware: str | None = None,
    devices: int = 1,
    match_hardware: bool = True,
    profile: HardwareProfile | None = None,
) -> Predictor:
    """The cost of ``spec``'s trials, a callable ``config -> TrialCost``.

    Args:
        store: the results DB whose completed trials calibrate the figures (None: modelled
            only).
        spec: the sweep (its workload's cost model, its resources).
        cache_dir: the cache the trials will use (what it holds costs nothing); None: nothing
            cached.
        hardware: a profile name (``h200``, ``local-cpu``, ...; None: this machine).
        devices: GPUs of ``hardware`` (a datasheet GPU) for the sweep's parallelism; ignored
            for this machine and its CPU.
        match_hardware: calibrate only on trials that recorded this hardware (``hardware.id``);
            False: on every trial of the workload and target (said in the notes).
        profile: the hardware profile to use instead of ``hardware``'s (tests).

    Raises:
        OrchestratorError: an unknown hardware name (with the closest one).
        StoreError: the results DB cannot be read.
    """
    hw = resolve_hardware(spec, hardware, devices, cache_dir, _extra_gpus(spec))
    history = store.completed_trials(spec.workload) if store is not None else []
    return Predictor(
        spec, hw, history, cache_dir=cache_dir, match_hardware=match_hardware, profile=profile
    )
