"""A ``serve_bench`` trial's metrics from what its servers and this platform's engine measured.

Names (b is each of ``serve.batch_sizes``; the headline ``tokens_per_s``/``speedup``/
``tpot_ms`` are at the smallest b):

- ``acceptance_length`` with ``_ci_low``/``_ci_high``, and ``acceptance_length_prompt_mean``
  with its CI: vLLM's serving in this platform's definition, tokens emitted by verification
  steps (every output token after the first, which prefill emits) per step, over the greedy
  pass, the 95% CI a bootstrap over requests;
- ``acceptance_length_vllm`` with its CI: vLLM's own definition, ``1 + accepted / steps`` from
  its per-request counts, which also count draft tokens accepted in a request's last step and
  then cut by ``max_tokens``; ``acceptance_length_counters`` its pooled value from the
  Prometheus counters (a check);
  ``acceptance_rate`` (accepted / proposed) and ``acceptance_rate/pos{i}`` per draft position;
- ``engine.acceptance_length`` with ``engine.acceptance_length_ci_low``/``_ci_high``: this
  platform's engine on the same prompts with a chain of K (``serve.compare_engine``), and
  ``engine.verify_steps`` its cycles beside vLLM's ``verify_steps``;
  ``agreement.difference`` (vLLM minus ours) and ``agreement.disjoint`` (1 when the two 95% CIs
  do not overlap: flagged on the dashboard);
- ``mismatches``/``near_ties``/``greedy.compared``: the speculating server's greedy outputs
  against the baseline server's, token for token (a near-tie per DESIGN.md); ``engine.mismatches``
  ours against the target's greedy output;
- ``startup_s``, ``baseline.startup_s``: launch to ready; ``tokens_per_s/b{b}``,
  ``tpot_ms/b{b}``, ``baseline.tokens_per_s/b{b}``, ``baseline.tpot_ms/b{b}``,
  ``speedup/b{b}`` (output tokens/s over the baseline's), ``bench.acceptance_length/b{b}``
  (vLLM's, from the benchmark client's counters), ``num_speculative_tokens/b{b}`` (K at b:
  ``serve.schedule``'s, else ``serve.num_speculative_tokens``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from workloads.engine.acceptance import acceptance_metrics

if TYPE_CHECKING:
    from workloads.models.target import Target
    from workloads.serving.config import ServeBenchConfig
    from workloads.serving.metrics import ServerRun

NAN = float("nan")


def greedy_comparison(
    target: Target, prompts: list[list[int]], base: ServerRun, spec: ServerRun
) -> tuple[dict[str, float], list[dict[str, object]]]:
    """``mismatches`` and ``near_ties`` of the speculating server's greedy outputs against the
    baseline server's (a near-tie: the target's top-2 logits at the first difference within the
    dtype's threshold, DESIGN.md), and ``greedy.compared`` (prompts); beside them, per prompt
    that diverged, where and by how much (:func:`workloads.measure.decode.divergence`, with the
    prompt's index)."""
    from workloads.measure.decode import divergence

    counts = {"mismatch": 0, "near_tie": 0}
    diverged: list[dict[str, object]] = []
    for i, (prompt, ref, out) in enumerate(zip(prompts, base.outputs, spec.outputs, strict=True)):
        found = divergence(target, prompt, ref, out)
        if found is not None:
            counts[str(found["kind"])] += 1
            diverged.append({"prompt": i, **found})
    metrics = {
        "mismatches": float(counts["mismatch"]),
        "near_ties": float(counts["near_tie"]),
        "greedy.compared": float(len(prompts)),
    }
    return metrics, diverged


def _bench(run: ServerRun | None, b: int, key: str) -> float:
    if run is None or b not in run.bench:
        return NAN
    value = run.bench[b].get(key)
    return float(value) if value is not None else NAN


def trial_metrics(
    cfg: ServeBenchConfig,
    spec: ServerRun,
    base: ServerRun | None,
    ours: dict[str, float] | None,
    greedy: dict[str, float] | None,
) -> dict[str, float]:
    """The trial's metrics (module docstring)."""
    m: dict[str, float] = {}
    steps = [c for _, c in spec.per_request]
    emitted = [len(out) - 1 for out in spec.outputs] if spec.per_request else []
    m.update(acceptance_metrics(emitted, steps))
    vllm = acceptance_metrics([a + c for a, c in spec.per_request], steps)  # 1 + accepted / steps
    for k in ("", "_ci_low", "_ci_high"):
        m[f"acceptance_length_vllm{k}"] = vllm[f"acceptance_length{k}"]
    m["acceptance_length_counters"] = spec.counters.acceptance_length
    m["acceptance_rate"] = spec.counters.acceptance_rate
    for i, rate in enumerate(spec.counters.per_position_rates()):
        m[f"acceptance_rate/pos{i}"] = rate
    m["verify_steps"] = spec.counters.num_drafts
    m["startup_s"] = spec.startup_s
    m["baseline.startup_s"] = base.startup_s if base is not None else NAN
    for b in cfg.serve.batch_sizes:
        tps, base_tps = _bench(spec, b, "output_throughput"), _bench(base, b, "output_throughput")
        m[f"tokens_per_s/b{b}"] = tps
        m[f"tpot_ms/b{b}"] = _bench(spec, b, "mean_tpot_ms")
        m[f"baseline.tokens_per_s/b{b}"] = base_tps
        m[f"baseline.tpot_ms/b{b}"] = _bench(base, b, "mean_tpot_ms")
        m[f"speedup/b{b}"] = tps / base_tps if base_tps > 0 else NAN
        m[f"bench.acceptance_length/b{b}"] = _bench(spec, b, "spec_decode_acceptance_length")
        m[f"num_speculative_tokens/b{b}"] = float(cfg.serve.k_at(b))
    b0 = min(cfg.serve.batch_sizes)
    for name in ("tokens_per_s", "tpot_ms", "speedup"):
        m[name] = m[f"{name}/b{b0}"]
    m["baseline.tokens_per_s"] = m[f"baseline.tokens_per_s/b{b0}"]
    m.update(greedy or {"mismatches": NAN, "near_ties": NAN, "greedy.compared": 0.0})
    m.update(agreement(m, ours))
    return m


def agreement(vllm: dict[str, Any], ours: dict[str, float] | None) -> dict[str, float]:
    """This platform's engine's acceptance (``engine.*``) beside vLLM's, the difference and
    whether the two 95% CIs are disjoint (1.0) or overlap (0.0); NaN without ours."""
    keys = ("acceptance_length", "acceptance_length_ci_low", "acceptance_length_ci_high")
    if ours is None:
        return {f"engine.{k}": NAN for k in keys} | {
            "engine.mismatches": NAN, "engine.verify_steps": NAN, "agreement.difference": NAN,
            "agreement.disjoint": NAN,
        }  # fmt: skip
    out = {f"engine.{k}": float(ours[k]) for k in keys}
    out["engine.mismatches"] = float(ours.get("mismatches", NAN))
    out["engine.verify_steps"] = float(ours.get("cycles", NAN))
    lo, hi = float(vllm["acceptance_length_ci_low"]), float(vllm["acceptance_length_ci_high"])
    olo, ohi = out["engine.acceptance_length_ci_low"], out["engine.acceptance_length_ci_high"]
    out["agreement.difference"] = float(vllm["acceptance_length"]) - out["engine.acceptance_length"]
    if any(math.isnan(x) for x in (lo, hi, olo, ohi)):
        out["agreement.disjoint"] = NAN
    else:
        out["agreement.disjoint"] = float(hi < olo or ohi < lo)
    return out
