"""What a workload is to the orchestrator: the :class:`Workload` descriptor, the
:class:`TrialContext` a trial runs in, the signatures of its submit-time checks
(:class:`Preflight`) and dry-run lines (:data:`Describe`), and the contract of its cost
(:class:`CostModel`: the :class:`StageWork` of each stage of a trial before it runs).

Each workload's package declares one :class:`Workload` (``workloads/<workload>/workload.py``);
:mod:`workloads.registry` is the table of them. This module stays light (pydantic and the
roofline's hardware profile only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from workloads.config import Resources
from workloads.result import Progress, TrialResult
from workloads.roofline.hardware import HardwareProfile

Report = Literal["law", "throughput", "table"]
"""what a sweep of the workload gets after its trials:

- ``law``: acceptance length against the grid's law axis (pretraining tokens, draft depth, ...),
  fitted with CIs and R², or main effects for a sweep of variants;
- ``throughput``: the peak throughput per batch size, fitted against batch size, with the
  roofline;
- ``table``: the trial table only (a workload that measures no law)."""


@dataclass(frozen=True)
class TrialContext:
    """Where one trial runs: its shared cache, its own output folder, the run root (to find
    other sweeps' trials), a progress callback and the spec's Ray resources."""

    cache_dir: Path
    out_dir: Path
    """exists when ``run`` is called"""
    run_root: Path
    progress: Progress
    resources: Resources

    @classmethod
    def local(cls, out_dir: Path, *, cache_dir: Path | None = None) -> TrialContext:
        """A context for running a trial by hand (a test, a notebook): ``out_dir`` created,
        the cache beside it unless given, progress printed, default resources."""
        out_dir.mkdir(parents=True, exist_ok=True)
        return cls(
            cache_dir=cache_dir or out_dir.parent / "cache",
            out_dir=out_dir,
            run_root=out_dir.parent,
            progress=print,
            resources=Resources(),
        )


class Preflight(Protocol):
    """A check at submit: ``(distinct trial configs, run root, *, cache_dir, dry_run)``; raises
    :class:`ConfigError` (or ``ValueError``) naming the field at fault.

    ``cache_dir`` is the cache the trials will use (``--cache-dir``; None: ``<run root>/cache``),
    where a check may read what is cached and leave what the trials reuse (the corpus check's
    token shards) once the sweep is accepted; with ``dry_run`` a check writes nothing at all.
    Checks that need neither take ``**_``.
    """

    def __call__(
        self,
        configs: Sequence[Any],
        run_root: Path,
        /,
        *,
        cache_dir: Path | None = None,
        dry_run: bool = False,
    ) -> None: ...


Describe = Callable[[Sequence[Any]], list[str]]
"""``(distinct trial configs) -> lines``: what the sweep will cost, printed by ``--dry-run``"""


@dataclass(frozen=True)
class Workload:
    """One workload as the orchestrator sees it.

    Attributes:
        name: the spec's ``workload:`` value.
        config_model: the pydantic model of one trial's config.
        run: ``(config, context) -> TrialResult``; raises on a trial error (recorded as failed).
        preflight: checks run at submit over the distinct configs, before anything is written.
        progress: ``(metric, format)`` pairs of the console line of a completed trial; a metric
            a trial does not report, or reports as NaN (undefined), is shown as ``n/a``.
        status_columns: metrics of the ``orchestrator status`` table.
        report: which report the sweep gets (:data:`Report`).
        summary: one line for ``--help`` and the docs.
        example: a shipped sweep of the workload, named by spec errors as an example.
        describe: what the sweep will cost (tokens, disk, ...), for ``--dry-run``; no lines
            when None.
        cost: how its trials' stages cost before they run (``submit --dry-run``, the submit
            banner, adaptive designs; :class:`CostModel`); None: their cost is unknown.
        law_axes: the config fields (dotted) over which the workload's metric follows a
            log-linear law, the axes a spec's ``design:`` may vary (none: no adaptive design).
        law_metrics: the metrics such a law may be of, the first a design's default (a metric
            ``m`` also allows its per-set ``m/<set>``).
    """

    name: str
    config_model: type[BaseModel]
    run: Callable[[Any, TrialContext], TrialResult]
    summary: str
    preflight: tuple[Preflight, ...] = ()
    progress: tuple[tuple[str, str], ...] = ()
    status_columns: tuple[str, ...] = ()
    report: Report = "table"
    example: str = "sweeps/tokens.yaml"
    describe: Describe | None = None
    law_axes: tuple[str, ...] = ()
    law_metrics: tuple[str, ...] = ()
    cost: CostModel | None = None


class CostUnknown(ValueError):
    """The work of a trial cannot be counted before it runs (e.g. the target's shape is not
    known without downloading it)."""


@dataclass(frozen=True, kw_only=True)
class StageWork:
    """Work one stage of a trial asks for."""

    stage: str
    """the stage, e.g. ``pretrain`` (its measured seconds are the metric ``wall_s/<stage>``)"""
    units: float
    """work asked for, in ``unit``"""
    unit: str
    """what a unit is: ``tokens``, ``chats``, ``prompts``"""
    ideal_s: float
    """seconds of all ``units`` at utilisation 1 on the context's hardware"""
    kind: Literal["train", "decode"]
    """dense FLOPs (share of peak) or decoding steps (share of the roofline)"""
    shared: str | None = None
    """key of the cache that shares this work between trials and sweeps (None: the trial's own);
    units under one key are nested prefixes (a larger budget's first tokens are a smaller's)"""
    cached: float = 0.0
    """units under ``shared`` already on disk"""
    split: bool = False
    """how trials running at once share the units under ``shared``: True, they split them
    (each builds the next chunk nobody is building); False, one builds them under a lock and the
    others wait until it is done"""
    lookahead: float = 0.0
    """split work: units a trial builds beyond the prefix while it waits for the last ones
    another builds (a batch of replies: ``workloads.training.regenerate`` generates batch
    i + 1 while another trial generates batch i)"""
    note: str = ""
    """what the count assumes"""

    def ideal_of(self, units: float) -> float:
        """Seconds of ``units`` of this work at utilisation 1."""
        return self.ideal_s * units / self.units if self.units else 0.0


@dataclass(frozen=True, kw_only=True)
class CostContext:
    """Where a trial's work is counted."""

    hw: HardwareProfile
    """the hardware the trial runs on"""
    cache_dir: Path | None = None
    """the cache the trial will use (what is cached there costs nothing); None: nothing cached"""
    tau: float = 1.0
    """acceptance length assumed for the evaluation (tokens per cycle; 1 = no draft token
    accepted, the most cycles)"""
    devices: float = 1.0
    """devices (GPUs) the trial's training workers spread over"""


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """How a workload's trials cost, for ``orchestrator submit --dry-run`` and adaptive designs."""

    stages: tuple[str, ...]
    """the stages, each measured as the trial metric ``wall_s/<stage>``"""
    plan: Callable[[Any, CostContext], tuple[StageWork, ...]]
    """``(config, context) -> works``; raises :class:`CostUnknown` with the reason"""
    done: Callable[[Any, Mapping[str, float], HardwareProfile], dict[str, float]]
    """``(config, metrics, hw) -> {stage: ideal seconds}``: what a finished trial's stages did
    by its metrics, at utilisation 1 on ``hw`` (stages it does not report are left out);
    raises :class:`CostUnknown`"""
    dtype: Callable[[Any], str]
    """the dtype a trial computes in (picks the hardware profile)"""
    tau_group: Callable[[Any], str]
    """trials whose measured acceptance length says what this one's evaluation will see (the
    same target, draft and tree; the prompt sets apart, see ``tau_sets``)"""
    tau_sets: Callable[[Any], tuple[str, ...]] = lambda cfg: ()
    """the names of the prompt sets a trial evaluates (each measured as
    ``<tau_metric>/<name>``); () when the workload does not say"""
    tau_metric: str = "acceptance_length"
    """the metric of the measured acceptance length (tokens per cycle)"""
