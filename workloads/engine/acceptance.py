"""A trial's acceptance length in the two definitions users meet, each with a bootstrap CI.

* **pooled** over verify steps: emitted tokens / verify steps, summed over every prompt (what
  SGLang's and vLLM's speculative-decoding metrics report: each cycle weighs the same). The
  trial metric ``acceptance_length`` is this one.
* **per-prompt mean**: the mean over prompts of each prompt's tokens / verify steps (what
  SpecForge's benchmark reports: each prompt weighs the same); the trial metric
  ``acceptance_length_prompt_mean``.

The two differ when prompts with many cycles accept differently from prompts with few, and can
order two drafts differently (vllm#42508). The CI resamples prompts with replacement and takes
the percentile interval of each statistic (Efron & Tibshirani 1993, Ch. 13), from a fixed seed.

Inputs are per prompt: ``accepted`` (tokens emitted, the sum of the cycles' acceptance lengths,
bonus token included) and ``cycles`` (verify steps), as ``EvalResult.per_prompt`` records them.
Pure numpy (no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BOOT_SEED",
    "N_BOOT",
    "AcceptanceCIs",
    "acceptance_cis",
    "acceptance_metrics",
    "per_prompt_mean",
    "pooled",
]

N_BOOT = 2000
"""bootstrap resamples of a trial's prompts (the percentile CI's Monte Carlo error at 95% is
about 0.5% of the interval's width at this count)"""
BOOT_SEED = 0
"""the bootstrap's seed: a trial's CIs are the same on every run of it"""


def _arrays(accepted: Sequence[float], cycles: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, c = np.asarray(accepted, dtype=float), np.asarray(cycles, dtype=float)
    if a.shape != c.shape or a.ndim != 1 or not len(a):
        raise ValueError(
            f"accepted and cycles must be two non-empty lists of one value per prompt (got "
            f"{a.shape} and {c.shape})"
        )
    if (c <= 0).any() or not np.isfinite(a).all() or not np.isfinite(c).all():
        raise ValueError("every prompt needs at least one verify step and finite counts")
    return a, c


def pooled(accepted: Sequence[float], cycles: Sequence[float]) -> float:
    """Emitted tokens / verify steps over all prompts (SGLang, vLLM), tokens per cycle.

    Raises:
        ValueError: mismatched or empty inputs, or a prompt without a verify step.
    """
    a, c = _arrays(accepted, cycles)
    return float(a.sum() / c.sum())


def per_prompt_mean(accepted: Sequence[float], cycles: Sequence[float]) -> float:
    """Mean over prompts of each prompt's emitted tokens / verify steps (SpecForge).

    Raises:
        ValueError: mismatched or empty inputs, or a prompt without a verify step.
    """
    a, c = _arrays(accepted, cycles)
    return float((a / c).mean())


@dataclass(frozen=True)
class AcceptanceCIs:
    """Both definitions (tokens per cycle) with their ``level`` bootstrap CIs over ``n``
    prompts."""

    pooled: float
    """emitted tokens / verify steps over all prompts"""
    pooled_ci: tuple[float, float]
    per_prompt_mean: float
    """mean over prompts of each prompt's tokens / verify steps"""
    per_prompt_mean_ci: tuple[float, float]
    n: int
    """prompts"""
    level: float
    n_boot: int


def acceptance_cis(
    accepted: Sequence[float],
    cycles: Sequence[float],
    *,
    n_boot: int = N_BOOT,
    level: float = 0.95,
    seed: int = BOOT_SEED,
) -> AcceptanceCIs:
    """Both acceptance lengths and their percentile bootstrap CIs over prompts (each resample
    draws ``len(accepted)`` prompts with replacement; both statistics from the same draws).

    Raises:
        ValueError: mismatched or empty inputs, a prompt without a verify step, ``n_boot < 1``
            or ``level`` outside (0, 1).
    """
    a, c = _arrays(accepted, cycles)
    if n_boot < 1 or not 0 < level < 1:
        raise ValueError(f"n_boot must be >= 1 and level in (0, 1) (got {n_boot}, {level})")
    idx = np.random.default_rng(seed).integers(0, len(a), size=(n_boot, len(a)))
    boot_pooled = a[idx].sum(axis=1) / c[idx].sum(axis=1)
    boot_mean = (a / c)[idx].mean(axis=1)
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    lo_p, hi_p = np.percentile(boot_pooled, q)
    lo_m, hi_m = np.percentile(boot_mean, q)
    return AcceptanceCIs(
        pooled=float(a.sum() / c.sum()),
        pooled_ci=(float(lo_p), float(hi_p)),
        per_prompt_mean=float((a / c).mean()),
        per_prompt_mean_ci=(float(lo_m), float(hi_m)),
        n=len(a),
        level=level,
        n_boot=n_boot,
    )


def acceptance_metrics(
    accepted: Sequence[float],
    cycles: Sequence[float],
    *,
    suffix: str = "",
    seed: int = BOOT_SEED,
) -> dict[str, float]:
    """A trial's acceptance metrics (tokens per cycle) from its prompts' counts: the pooled
    ``acceptance_length`` with ``acceptance_length_ci_low`` / ``_ci_high``, and the per-prompt
    mean ``acceptance_length_prompt_mean`` with ``acceptance_length_prompt_mean_ci_low`` /
    ``_ci_high`` (95% percentile bootstrap over prompts, :data:`N_BOOT` resamples, ``seed``).
    Each name ends in ``suffix`` (``"/humaneval"`` for one prompt set's). A prompt without a
    verify step (it ended at prefill) is left out: it has no tokens per cycle; with none left
    every value is NaN.
    """
    keep = [(float(a), float(c)) for a, c in zip(accepted, cycles, strict=True) if c > 0]
    names = [
        "acceptance_length",
        "acceptance_length_ci_low",
        "acceptance_length_ci_high",
        "acceptance_length_prompt_mean",
        "acceptance_length_prompt_mean_ci_low",
        "acceptance_length_prompt_mean_ci_high",
    ]
    if not keep:
        return {name + suffix: float("nan") for name in names}
    cis = acceptance_cis([a for a, _ in keep], [c for _, c in keep], seed=seed)
    values = [cis.pooled, *cis.pooled_ci, cis.per_prompt_mean, *cis.per_prompt_mean_ci]
    return {name + suffix: v for name, v in zip(names, values, strict=True)}
