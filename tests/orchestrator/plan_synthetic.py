"""A results DB with known laws, built by hand: what the plan's tests and its benchmark
(``benchmarks/plan_bench.py``) plan from, so a recommendation can be checked against the truth.

Two sweeps, recorded as a finished submit records them (SQL rows, step-0 metrics):

- ``tokens`` (draft_train over pretrain.tokens x seeds): ``acceptance_length = a*log10(T) + b +
  N(0, noise)``; stage seconds linear in each stage's work on :data:`PROFILE` (pretraining
  ``setup + per_work * work``), recorded with this machine's ``hardware.id`` so the cost model
  calibrates on them;
- ``batch`` (decode_bench over decode.batch_size x decode.num_draft_tokens, its draft the
  token sweep's best trial): ``acceptance_length = A - B*r**k`` (the form of Scylla App. E Eq.
  8) + noise, throughput ``b*tau / (c0 + c1*b*k)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.spec.grid import expand
from orchestrator.spec.sweep import parse_spec
from orchestrator.store.results import ResultsStore
from workloads.draft_train.cost import DRAFT_TRAIN_COST
from workloads.roofline.hardware import HardwareProfile, fingerprint_id, hardware_fingerprint

__all__ = ["PROFILE", "TrueLaws", "build_db"]

PROFILE = HardwareProfile(
    name="local-cpu", peak_flops=1e11, bandwidth=2e10, dtype="float32", bytes_per_element=4,
    source="fixed for the synthetic DB",
)  # fmt: skip
"""the CPU profile the synthetic stage seconds are made on (pass it to the plan)"""

TOKENS_SPEC = """name: {name}
workload: draft_train
seeds: {seeds}
grid:
  pretrain.tokens: {budgets}
base:
  pretrain: {{seq_len: 128}}
  sft: {{tokens: 512, seq_len: 128, epochs: 1, responses: dataset}}
  draft: {{layers: {layers}}}
  eval: {{num_prompts: 1, max_new_tokens: 8, depth: 2, topk: 2, num_draft_tokens: 4}}
resources: {{num_cpus: 1}}
"""

DECODE_SPEC = """name: {name}
workload: decode_bench
seeds: {seeds}
grid:
  decode.batch_size: {bs}
  decode.num_draft_tokens: {ks}
base:
  target: {{model: {target}}}
  draft: {{source: trial, sweep: {tokens}, trial_key: best}}
  decode: {{depth: 6, topk: 4, max_new_tokens: 8}}
  prompts: {{num_prompts: 4}}
resources: {{num_cpus: 1}}
"""


@dataclass(frozen=True)
class TrueLaws:
    """The laws the DB's trials are drawn from."""

    a: float = 0.137
    """acceptance per decade of pretraining tokens"""
    b: float = 0.75
    noise: float = 0.03
    """seed standard deviation of acceptance length"""
    eq8: tuple[float, float, float] = (3.2, 3.0, 0.80)
    """(A, B, r) of acceptance vs k"""
    c0: float = 0.05
    """seconds of a decoding cycle at any b, k"""
    c1: float = 0.002
    """seconds per verified token of the batch"""
    setup_s: float = 5.0
    per_work: float = 2.0
    """pretraining seconds per second of work at utilisation 1 on :data:`PROFILE`"""

    def tau_tokens(self, t: float) -> float:
        return self.a * math.log10(t) + self.b

    def tau_k(self, k: float) -> float:
        a, b, r = self.eq8
        return a - b * r**k


def build_db(
    run_root: Path,
    *,
    laws: TrueLaws | None = None,
    budgets: Sequence[int] = (8192, 16384, 32768, 65536, 131072),
    seeds: int = 2,
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    ks: Sequence[int] = (2, 4, 8, 16, 32),
    decode_seeds: int = 1,
    layers: int = 1,
    seed: int = 0,
    tokens_name: str = "tokens",
    decode_name: str = "batch",
    decode_target: str = "smollm2-135m-instruct",
) -> ResultsStore:
    """Write ``run_root/results.db`` with the two sweeps and return the open store
    (``decode_target``: the decode sweep's target.model, another one to test mixed targets)."""
    law = laws or TrueLaws()
    rng = np.random.default_rng(seed)
    run_root.mkdir(parents=True, exist_ok=True)
    store = ResultsStore.sqlite_under(run_root)
    here = fingerprint_id(hardware_fingerprint(device="cpu", threads=1))
    text = TOKENS_SPEC.format(
        name=tokens_name, seeds=list(range(seeds)), budgets=list(budgets), layers=layers
    )
    sweep_id, trials = _sweep(store, text, run_root / f"{tokens_name}.yaml")
    for t in trials:
        cfg = t.config
        m = {
            "pretrain.tokens_trained": float(cfg.pretrain.tokens),  # type: ignore[attr-defined]
            "sft.tokens_trained": float(cfg.sft.tokens),  # type: ignore[attr-defined]
        }
        done = DRAFT_TRAIN_COST.done(cfg, m, PROFILE)
        m["wall_s/pretrain"] = law.setup_s + law.per_work * done["pretrain"]
        m["wall_s/sft"] = 2.0 * done["sft"]
        m["hardware.id"], m["hardware.gpus"], m["hardware.threads"] = here, 0.0, 1.0
        tokens = float(cfg.pretrain.tokens)  # type: ignore[attr-defined]
        m["acceptance_length"] = law.tau_tokens(tokens) + float(rng.normal(0, law.noise))
        _complete(store, sweep_id, t.key, m, m["wall_s/pretrain"] + m["wall_s/sft"])
    text = DECODE_SPEC.format(
        name=decode_name,
        seeds=list(range(decode_seeds)),
        bs=list(batch_sizes),
        ks=list(ks),
        tokens=tokens_name,
        target=decode_target,
    )
    sweep_id, trials = _sweep(store, text, run_root / f"{decode_name}.yaml")
    for t in trials:
        b = int(t.overrides["decode.batch_size"])
        k = int(t.overrides["decode.num_draft_tokens"])
        tau = min(float(k), max(1.0, law.tau_k(k) + float(rng.normal(0, law.noise))))
        tps = b * tau / (law.c0 + law.c1 * b * k)
        ar = b / law.c0
        m = {"acceptance_length": tau, "tokens_per_s": tps, "ar_tokens_per_s": ar}
        m["speedup"] = tps / ar
        _complete(store, sweep_id, t.key, m, 1.0)
    return store


def _sweep(store: ResultsStore, text: str, path: Path) -> tuple[int, list[Any]]:
    """Record the spec ``text`` and its trials (pending); (sweep id, the trials)."""
    spec = parse_spec(text, path)
    sweep_id = store.upsert_sweep(spec.name, spec.workload, text, path.name)
    trials = expand(spec)
    store.add_trials(
        sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides) for t in trials]
    )
    return sweep_id, trials


def _complete(
    store: ResultsStore, sweep_id: int, key: str, m: dict[str, float], wall: float
) -> None:
    info = store.trial(sweep_id, key)
    assert info is not None
    store.mark_running(info.id, None)
    store.log_metrics(info.id, m)
    store.mark_completed(info.id, wall)
