"""What ``orchestrator plan`` reads: the finished sweeps of the results DB that carry each law,
their trial points, the measured target and hardware, and the user's options checked.

Sweep kinds (by the workload's registry entry, its ``law_axes`` and ``report``, and the config
field the completed trials vary):

- ``tokens``: a draft_train sweep over ``pretrain.tokens`` (>= 3 distinct budgets > 0): the
  token law (Scylla Thm 1.1), required;
- ``depth``: a draft_train sweep over ``draft.layers`` (>= 3 distinct depths): the depth law
  (Thm 1.2), optional;
- ``decode``: a decode_bench sweep over ``decode.num_draft_tokens`` (>= 3 distinct fixed k, at
  greedy decoding): acceptance versus k and throughput per batch size, required.

Every refusal is an :class:`~orchestrator.errors.OrchestratorError` with the fix (the CLI prints
it in one line and exits 2, before anything is written).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from orchestrator.errors import OrchestratorError
from orchestrator.store.results import ResultsStore
from orchestrator.store.rows import SweepInfo, TrialInfo
from workloads.registry import WORKLOADS

__all__ = [
    "DEFAULT_MIN_GAIN",
    "DEFAULT_PREFIX",
    "DecodeData",
    "LawData",
    "PlanOptions",
    "PlanSweeps",
    "check_budget",
    "choose_sweeps",
    "finite_number",
    "parse_batch_mix",
    "resolve_shape_name",
]

DEFAULT_MIN_GAIN = 0.05
"""acceptance length per added training hour below which the plan stops training for more"""

DEFAULT_PREFIX = 1024
"""prefix length s of the roofline's decoding step (tokens in each KV cache)"""


@dataclass(frozen=True)
class PlanOptions:
    """What the user asked for (the CLI's options, checked)."""

    sweeps: tuple[str, ...] = ()
    model: str | None = None
    """roofline target shape (None: the measured target's)"""
    hardware: str | None = None
    """hardware profile (None: local-cpu, this machine)"""
    batch_mix: Mapping[int, float] = field(default_factory=lambda: {1: 1.0})
    budget_hours: float | None = None
    min_gain: float = DEFAULT_MIN_GAIN
    prefix: int = DEFAULT_PREFIX
    holdout: float | None = None
    """plan from the token trials at budgets <= this and score the rest"""
    allow_mixed_targets: bool = False
    n_resamples: int = 1000
    seed: int = 0
    cache_dir: Path | None = None
    """where a local-cpu profile is cached (``hw.cached``)"""
    profile: Any = None
    """a :class:`~workloads.roofline.hardware.HardwareProfile` used instead of measuring
    local-cpu (tests, the synthetic DB)"""


TOKENS, LAYERS, K = "pretrain.tokens", "draft.layers", "decode.num_draft_tokens"
METRIC = "acceptance_length"

RUN_TOKENS = "orchestrator submit sweeps/tokens.yaml (make run)"
RUN_DECODE = "orchestrator submit sweeps/batch.yaml (make batch, after the token sweep)"


@dataclass(frozen=True)
class LawData:
    """The completed trials of a law sweep: x (the axis), acceptance length, the trials."""

    sweep: str
    axis: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    trials: tuple[TrialInfo, ...]
    target: str
    """the trials' target.model"""
    gpus: bool
    """whether the trials ran on GPUs (their ``hardware.gpus`` metric)"""
    hardware_ids: frozenset[float] = frozenset()
    """their ``hardware.id`` metrics (:func:`workloads.roofline.hardware.fingerprint_id`)"""


@dataclass(frozen=True)
class DecodeData:
    """The completed fixed-k greedy trials of a decode_bench sweep."""

    sweep: str
    table: pd.DataFrame
    """columns batch_size, num_draft_tokens, acceptance_length, tokens_per_s, ar_tokens_per_s,
    speedup (one row per trial)"""
    target: str
    draft: dict[str, Any]
    """the trials' ``draft`` block (source, sweep, trial_key)"""
    depth: int
    """the tree depth it decoded with (a cycle accepts at most depth + 1 tokens)"""
    threads: int = 1
    """CPU cores (torch threads) a trial used: the local-cpu profile's thread count"""


@dataclass(frozen=True)
class PlanSweeps:
    """The sweeps a plan rests on."""

    tokens: LawData
    decode: DecodeData
    depth: LawData | None = None
    notes: list[str] = field(default_factory=list)


def parse_batch_mix(text: str) -> dict[int, float]:
    """``"1:0.2,8:0.5,32:0.3"`` -> {1: 0.2, 8: 0.5, 32: 0.3}: batch size -> share of steps.

    Raises:
        OrchestratorError: not ``b:share`` pairs, a b that is not an integer >= 1, a share that
            is not in (0, 1], a b given twice, or shares that do not sum to 1 (within 1e-6).
    """
    fix = "Fix: e.g. --batch-mix 1:0.2,8:0.5,32:0.3 (batch size:share, shares summing to 1)"
    mix: dict[int, float] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        b_text, sep, w_text = part.partition(":")
        try:
            b, w = float(b_text), float(w_text)
        except ValueError:
            raise OrchestratorError(
                f"--batch-mix {text!r}: {part!r} is not b:share. {fix}"
            ) from None
        if not sep or not math.isfinite(b) or b < 1 or b != int(b):
            raise OrchestratorError(
                f"--batch-mix {text!r}: batch size {b_text.strip()!r} must be an integer >= 1. "
                + fix
            )
        if not (math.isfinite(w) and 0 < w <= 1):
            raise OrchestratorError(
                f"--batch-mix {text!r}: share {w_text.strip()!r} of b={int(b)} must be in (0, 1]. "
                f"{fix}"
            )
        if int(b) in mix:
            raise OrchestratorError(f"--batch-mix {text!r}: b={int(b)} is given twice. {fix}")
        mix[int(b)] = w
    if not mix:
        raise OrchestratorError(f"--batch-mix {text!r} names no batch size. {fix}")
    total = sum(mix.values())
    if abs(total - 1.0) > 1e-6:
        raise OrchestratorError(f"--batch-mix {text!r}: the shares sum to {total:g}, not 1. {fix}")
    return mix


def check_budget(hours: float | None) -> None:
    """Refuse a training budget that is not a positive number of hours."""
    if hours is not None and not (math.isfinite(hours) and hours > 0):
        raise OrchestratorError(
            f"--budget-hours {hours:g} must be a positive number of training hours. Fix: e.g. "
            "--budget-hours 2, or leave it out (the plan stops at --min-gain)"
        )


def resolve_shape_name(name: str) -> str:
    """The built-in roofline shape ``name`` means (aliases resolved), or a did-you-mean refusal."""
    from workloads.roofline.models import builtin_names, canonical_name

    found = canonical_name(name)
    if found is not None:
        return found
    names = builtin_names()
    close = difflib.get_close_matches(name.strip().lower(), names, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise OrchestratorError(
        f"--model {name!r} is not a known target shape; {hint}Fix: one of {', '.join(names)}"
    )


def choose_sweeps(
    store: ResultsStore, names: Sequence[str], *, allow_mixed_targets: bool = False
) -> PlanSweeps:
    """The token, depth and decode sweeps among ``names`` (all the DB's sweeps when empty).

    Raises:
        OrchestratorError: a name the DB does not have; no sweep (or two) of a required kind;
            sweeps of different targets without ``allow_mixed_targets``.
    """
    every = {s.name: s for s in store.list_sweeps()}
    unknown = [n for n in names if n not in every]
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(every), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise OrchestratorError(
            f"no sweep {unknown[0]!r} in the results DB{hint}; it has "
            f"{', '.join(sorted(every)) or 'none'}. Fix: name a finished sweep of this DB"
        )
    names = list(dict.fromkeys(names))  # a sweep named twice is one sweep
    pool = [every[n] for n in names] if names else list(every.values())
    found = _classify(store, pool)
    for kind in ("tokens", "decode"):
        if names and not found[kind]:
            elsewhere = _classify(store, [i for n, i in every.items() if n not in names])[kind]
            if elsewhere:
                raise OrchestratorError(
                    f"none of {', '.join(names)} is a finished {kind} sweep, but this DB has "
                    f"{elsewhere[0].sweep}. Fix: name it too (orchestrator plan "
                    f"{' '.join([*names, elsewhere[0].sweep])} ...)"
                )
    tokens = _one(found["tokens"], "token-law", TOKENS, RUN_TOKENS, names)
    decode = _one(found["decode"], "decode", K, RUN_DECODE, names)
    depth = _one(found["depth"], "depth-law", LAYERS, "", names, required=False)
    chosen = [("tokens", tokens.sweep, tokens.target), ("decode", decode.sweep, decode.target)]
    if depth is not None:
        chosen.append(("depth", depth.sweep, depth.target))
    targets = {t for _, _, t in chosen}
    if len(targets) > 1 and not allow_mixed_targets:
        said = ", ".join(f"{s} ({t})" for _, s, t in chosen)
        raise OrchestratorError(
            f"the plan's sweeps decode different targets: {said}; laws of one target do not "
            "carry over to another as measured. Fix: name sweeps of one target, or pass "
            "--allow-mixed-targets to plan across them anyway (labelled on every figure)"
        )
    notes = []
    if len(targets) > 1:
        notes.append(f"mixed targets ({', '.join(sorted(targets))}), --allow-mixed-targets")
    return PlanSweeps(tokens=tokens, decode=decode, depth=depth, notes=notes)


def _classify(store: ResultsStore, pool: Sequence[SweepInfo]) -> dict[str, list[Any]]:
    """The sweeps of ``pool`` by kind (token law, depth law, decode), by the registry's fields
    (a workload's law axes; a throughput report means a decode sweep)."""
    found: dict[str, list[Any]] = {"tokens": [], "depth": [], "decode": []}
    for info in pool:
        workload = WORKLOADS.get(info.workload)
        if workload is None:
            continue
        for kind, axis in (("tokens", TOKENS), ("depth", LAYERS)):
            law = law_data(store, info, axis) if axis in workload.law_axes else None
            if law is not None:
                found[kind].append(law)
        if workload.report == "throughput":  # a decode sweep: acceptance and tokens/s per (b, k)
            dec = decode_data(store, info)
            if dec is not None:
                found["decode"].append(dec)
    return found


def _one(
    found: list[Any], kind: str, axis: str, run: str, names: Sequence[str], *, required: bool = True
) -> Any:
    if len(found) > 1:
        listed = ", ".join(f.sweep for f in found)
        raise OrchestratorError(
            f"{len(found)} finished {kind} sweeps ({listed}); the plan uses one. Fix: name the "
            f"sweeps to plan from, e.g. orchestrator plan {found[0].sweep} ..."
        )
    if found:
        return found[0]
    if not required:
        return None
    among = f"among {', '.join(names)}" if names else "in the results DB"
    raise OrchestratorError(
        f"no finished {kind} sweep {among}: the plan needs completed trials at >= 3 distinct "
        f"{axis} values. Fix: run {run}"
    )


def law_data(store: ResultsStore, info: SweepInfo, axis: str) -> LawData | None:
    """The completed trials of ``info`` at >= 3 distinct values of ``axis`` (> 0) with a finite
    acceptance length, or None."""
    trials = [t for t in store.trials(info.id, {"completed"}) if axis in t.overrides]
    if not trials:
        return None
    frame = store.metrics_frame(info.id).set_index("trial_key")
    column = f"metric.{METRIC}" if f"metric.{METRIC}" in frame else METRIC
    if column not in frame:
        return None
    xs, ys, kept = [], [], []
    gpus, ids = False, set()
    for t in trials:
        x, y = finite_number(t.overrides[axis]), finite_number(frame.at[t.key, column])
        if x is None or y is None or x <= 0:
            continue
        xs.append(x)
        ys.append(y)
        kept.append(t)
        g = finite_number(frame.at[t.key, "hardware.gpus"]) if "hardware.gpus" in frame else None
        gpus = gpus or bool(g)
        hid = finite_number(frame.at[t.key, "hardware.id"]) if "hardware.id" in frame else None
        if hid is not None:
            ids.add(hid)
    if len(set(xs)) < 3:
        return None
    return LawData(
        info.name, axis, tuple(xs), tuple(ys), tuple(kept), _target(kept), gpus, frozenset(ids)
    )


def decode_data(store: ResultsStore, info: SweepInfo) -> DecodeData | None:
    """The completed fixed-k trials at the reference condition (greedy) of a decode_bench
    sweep with >= 3 distinct k, or None (also when the sweep has no greedy trials: a
    temperature > 0 in its grid or its ``base``)."""
    from analysis.throughput import decode_table, split_conditions

    frame = store.metrics_frame(info.id)
    if frame.empty:
        return None
    frame = _with_fixed_knobs(frame, store.trials(info.id))
    try:
        table = decode_table(frame)
    except ValueError:
        return None
    table = split_conditions(table)[0][1]
    temps = table.get("decode.temperature", table.get("temperature"))
    if temps is not None and (pd.to_numeric(temps, errors="coerce").fillna(0.0) > 0).any():
        return None  # no greedy trials: the plan's acceptance-vs-k curve is greedy decoding's
    done = table[(table["state"] == "completed") & ~table["k_auto"]]
    need = ["batch_size", "num_draft_tokens", METRIC, "tokens_per_s"]
    if any(c not in done for c in need):
        return None
    done = done.dropna(subset=need)
    if done["num_draft_tokens"].nunique() < 3:
        return None
    cols = [c for c in (*need, "ar_tokens_per_s", "speedup") if c in done]
    keys = set(done["trial_key"])
    trials = [t for t in store.trials(info.id, {"completed"}) if t.key in keys]
    first = trials[0].config if trials else {}
    return DecodeData(
        info.name,
        done[cols].reset_index(drop=True),
        _target(trials),
        dict(first.get("draft") or {}),
        int((first.get("decode") or {}).get("depth") or 0),
        max(1, int(float((first.get("resources") or {}).get("num_cpus") or 1))),
    )


def _with_fixed_knobs(frame: pd.DataFrame, trials: Sequence[TrialInfo]) -> pd.DataFrame:
    """``frame`` with ``decode.batch_size``, ``decode.num_draft_tokens`` and
    ``decode.temperature`` read from each trial's full config where the grid does not vary them
    (NaN for a trial whose config lacks the knob); ``frame`` is not modified."""
    configs = {t.key: t.config.get("decode") or {} for t in trials}
    out = frame.copy()
    for knob in ("batch_size", "num_draft_tokens", "temperature"):
        if knob not in out and f"decode.{knob}" not in out:
            out[f"decode.{knob}"] = out["trial_key"].map(
                lambda key, k=knob: configs.get(key, {}).get(k, math.nan)
            )
    return out


def _target(trials: Sequence[TrialInfo]) -> str:
    models = {str((t.config.get("target") or {}).get("model", "")) for t in trials}
    return ", ".join(sorted(models)) or "unknown"


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None (missing, not a number, NaN or infinite)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
