"""The schedule of a sweep's trials: trials in order, ``slots`` at a time, each starting when a
slot frees; shared work (feature chunks, batches of replies, a wsd-fork trunk, greedy
references) split by the trials building it at once or waited for (:func:`simulate`, a
discrete-event simulation of the driver's locks). :mod:`orchestrator.cost.model` turns a
trial's stages into steps (:class:`Step`) and prices them with it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["StageRun", "Step", "simulate", "wall_time"]


def wall_time(totals: Sequence[float | None], slots: int) -> float | None:
    """Wall seconds of trials run in order on ``slots`` parallel slots, each starting on the
    first slot to come free (as the driver submits them); None when any total is unknown."""
    if any(t is None for t in totals):
        return None
    free = [0.0] * max(1, slots)
    for t in totals:
        start = heapq.heappop(free)
        heapq.heappush(free, start + (t or 0.0))
    return max(free)


@dataclass(frozen=True)
class Step:
    """One step of a trial in the schedule of :func:`simulate`: seconds of its own, or shared
    units under a key."""

    stage: str
    seconds: float = 0.0
    """its own seconds (a step without ``key``)"""
    idle: float | None = None
    """its own seconds when the trial found all of the stage's shared work done, neither built
    nor waited for (None: ``seconds``)"""
    key: str | None = None
    """the shared work's key (:attr:`workloads.protocol.StageWork.shared`)"""
    units: float = 0.0
    """the prefix of the shared units this trial needs"""
    per_unit: float = 0.0
    """seconds a unit takes one trial building it"""
    split: bool = False
    """trials at this step together split the units (else one builds, the others wait)"""
    lookahead: float = 0.0
    """split: units a trial builds beyond the prefix while it waits for another's last ones
    (:attr:`workloads.protocol.StageWork.lookahead`)"""


@dataclass
class StageRun:
    """What the schedule made of one stage of one trial."""

    spent: float = 0.0
    """seconds from the stage's start to its end"""
    waited: float = 0.0
    """of them, seconds waiting for shared work another trial was building"""
    company: int = 0
    """most trials building its shared units at once, itself included"""
    touched: bool = False
    """it built or waited for some of its shared units"""


def simulate(
    trials: Sequence[Sequence[Step]], slots: int, have: dict[str, float]
) -> tuple[list[float], list[float], list[dict[str, StageRun]]]:
    """Run ``trials`` (each its steps in order) as the driver does: in order, ``slots`` at a
    time, each starting when a slot frees. ``have``: shared units done before the sweep (the
    cache), by key. Returns each trial's start and end seconds and what each of its stages
    spent.

    Shared work (a step with a key; units under one key are nested prefixes) is either
    ``split``: every trial at the step builds the missing prefix at the sum of their rates and
    leaves when its own prefix is built (``lookahead``: ``k`` trials building together need
    ``k - 1`` lookaheads more); or else waited for: the first trial builds, the others wait
    until it is done, then build what they need beyond it. The rules and the locks they
    follow: docs/scale.md, "Cost before running".

    A stage lasts from its first step to its last, waits included, so a trial's stage seconds
    add up to its wall seconds. Each trial computes at its own rate; chunks are continuous.
    """
    run = _Schedule(trials, have)
    for _ in range(min(max(1, slots), len(trials))):
        run.running.append(run.queue.pop())
    run.advance_all()
    while run.running:
        run.step()
    return run.start, run.end, run.tracks


def _near(x: float, y: float) -> bool:
    return x >= y - 1e-9 * max(1.0, abs(y))


class _Schedule:
    """The state of one :func:`simulate` run: where each trial is, who holds which shared work,
    the clock."""

    def __init__(self, trials: Sequence[Sequence[Step]], have: dict[str, float]) -> None:
        n = len(trials)
        self.trials = trials
        self.done = dict(have)
        """key -> shared units built"""
        self.owner: dict[str, int] = {}
        """key -> the trial building it (wait rule)"""
        self.arrived: dict[int, float] = {}
        """trial -> when it reached the shared step it is at (who builds next, wait rule)"""
        self.pos: list[int] = [0] * n
        self.company: list[int] = [1] * n
        """most trials building the shared work of a trial's step with it, itself included"""
        self.left: list[float | None] = [None] * n
        """seconds left of a trial's own step (None: not begun)"""
        self.start, self.end = [0.0] * n, [0.0] * n
        self.tracks: list[dict[str, StageRun]] = [{} for _ in range(n)]
        self.queue = list(range(n))[::-1]
        self.running: list[int] = []
        self.t = 0.0

    def track(self, i: int, stage: str) -> StageRun:
        return self.tracks[i].setdefault(stage, StageRun())

    def need(self, i: int) -> float:
        s = self.trials[i][self.pos[i]]
        return s.units + s.lookahead * (self.company[i] - 1)

    def settle(self, i: int) -> bool:
        """Move trial i past the steps that are complete now; True when it has finished."""
        steps, done, owner = self.trials[i], self.done, self.owner
        while self.pos[i] < len(steps):
            s = steps[self.pos[i]]
            tr = self.track(i, s.stage)
            if s.key is None:
                if self.left[i] is None:
                    self.left[i] = s.seconds if tr.touched or s.idle is None else s.idle
                if (self.left[i] or 0.0) > 1e-9:
                    return False
                self.left[i] = None
            else:
                k = s.key
                holder = owner.get(k)
                free = s.split or holder is None or holder == i
                if free and s.per_unit <= 0 and not _near(done.setdefault(k, 0.0), self.need(i)):
                    done[k] = self.need(i)  # it takes no time
                    tr.touched = True
                got = done.setdefault(k, 0.0)
                if holder == i and _near(got, self.need(i)):
                    del owner[k]  # built what it needs: the lock is free
                elif not free or not _near(got, self.need(i)):
                    self.arrived.setdefault(i, self.t)
                    if not s.split and holder is None:
                        owner[k] = i
                    return False
                self.arrived.pop(i, None)
            self.pos[i] += 1
            self.company[i] = 1
        return True

    def _state(self) -> tuple[Any, ...]:
        return (tuple(self.pos), tuple(self.running), tuple(sorted(self.owner.items())))

    def advance_all(self) -> None:
        """Settle every running trial (those waiting first by when they came), start the next
        trials in the slots that free, until nothing changes."""
        while True:
            before = self._state()
            for i in sorted(self.running, key=lambda j: (self.arrived.get(j, self.t), j)):
                if self.settle(i):
                    self.end[i] = self.t
                    self.running.remove(i)
                    if self.queue:
                        j = self.queue.pop()
                        self.start[j] = self.t
                        self.running.append(j)
            if self._state() == before:
                return

    def _builders(self) -> dict[str, list[int]]:
        """Shared key -> the running trials building it now (each of them keeps the most
        builders it has had at this step in ``company``)."""
        builders: dict[str, list[int]] = {}
        for i in self.running:
            s = self.trials[i][self.pos[i]]
            if s.key is None:
                continue
            if s.split or self.owner.get(s.key) == i:
                builders.setdefault(s.key, []).append(i)
        for b in builders.values():
            for i in b:
                self.company[i] = max(self.company[i], len(b))
        return builders

    def step(self) -> None:
        """Advance the clock to the next event (a trial's own step ends, or a builder has built
        the prefix it needs) and settle."""
        builders = self._builders()
        rate = {
            k: sum(1.0 / self.trials[i][self.pos[i]].per_unit for i in b)
            for k, b in builders.items()
        }
        dt = math.inf
        for i in self.running:
            s = self.trials[i][self.pos[i]]
            if s.key is None:
                dt = min(dt, self.left[i] or 0.0)
            elif s.key in rate and i in builders[s.key]:
                dt = min(dt, max(0.0, self.need(i) - self.done[s.key]) / rate[s.key])
        if not math.isfinite(dt):
            raise RuntimeError("cost schedule: no trial can move (a bug in the simulation)")
        for i in self.running:
            s = self.trials[i][self.pos[i]]
            tr = self.track(i, s.stage)
            tr.spent += dt
            if s.key is None:
                self.left[i] = (self.left[i] or 0.0) - dt
                continue
            tr.touched = True
            if i in builders.get(s.key, ()):
                tr.company = max(tr.company, len(builders[s.key]))
            else:
                tr.waited += dt
        for k, b in builders.items():
            self.done[k] = min(max(self.need(i) for i in b), self.done[k] + rate[k] * dt)
        self.t += dt
        self.advance_all()
