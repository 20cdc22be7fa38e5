"""FLOPs and memory traffic of one speculative decoding step, and the roofline built on them.

Source: Scylla, "Scaling Laws for Speculative Decoding" (arXiv 2505.07858), Sec. 3.2 and
Appendix C (transformer FLOPs, read and write access), Eq. 4 (k_opt(b) for Qwen2.5-72B on one
H800) and Appendix E Eq. 8 (acceptance length tau(k)). Pure functions, no I/O.

Legend (the paper's symbols; a :class:`~workloads.roofline.models.ModelShape` carries the sizes):

    h     hidden size             h_kv  kv_heads * head_dim     h_m  MLP inner size
    V     vocabulary size         l     target decoder layers
    b     decoding batch size (sequences)
    s     prefix length: tokens already in the KV cache of each sequence before the step
    n     new tokens per sequence in one target forward (n = k when verifying k tree tokens)
    k     verified tree tokens per sequence per cycle (SGLang ``speculative_num_draft_tokens``)
    D     draft decoding steps per cycle (the paper uses 5); each step runs the draft
          (FC 2h->h, one decoder layer of the target's width, the target's LM head) on k tokens
    t     accepted tokens the draft re-reads (prefill) at the start of the next cycle

Counts are in elements, multiplied by ``bytes_per_element`` (2 for bf16) to give bytes. How
these counts compare with the paper's Eq. 4: docs/architecture.md, "Reasons in the workloads".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.roofline.hardware import HardwareProfile
from workloads.roofline.models import ModelShape

DRAFT_STEPS = 5
"""Draft decoding steps per cycle in the paper's step total (Appendix C)."""


@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes moved by one piece of work."""

    flops: float
    """floating-point operations (a multiply-add counts 2)"""
    bytes_read: float
    """bytes read from memory (weights, KV cache, activations)"""
    bytes_written: float
    """bytes written to memory (activations, new KV entries, logits)"""

    @property
    def bytes(self) -> float:
        """Bytes moved: read + written."""
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP/byte."""
        return self.flops / self.bytes

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.flops + other.flops,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
        )


@dataclass(frozen=True)
class KOpt:
    """The optimal number of verified tokens at one batch size (Scylla Sec. 3.2)."""

    b: int
    """batch size"""
    k: int
    """smallest k in [1, k_max] with I(b, k) >= I_crit (k_max when none reaches it)"""
    intensity: float
    """I(b, k) at that k, FLOP/byte"""
    i_crit: float
    """the hardware's peak FLOP/s / bandwidth, FLOP/byte"""
    reached: bool
    """False when I(b, k_max) < I_crit, i.e. ``k`` is only the search bound"""


@dataclass(frozen=True)
class PeakThroughput:
    """The best theoretical throughput over k at one batch size."""

    b: int
    """batch size"""
    k: int
    """the k in [1, k_max] that maximises throughput"""
    tokens_per_s: float
    """theoretical throughput there, tokens/s over the whole batch"""


def tau_eq8(k: float, c: float = 1.0) -> float:
    """Acceptance length (tokens per cycle) at k verified tokens: -6.25*(0.2c)^(k/30) + 6.

    Scylla Appendix E, Eq. 8, fitted for the paper's drafts; c in [0.9, 1.2] moves the curve.
    Below 1 for small k (0.07 at k=1); tends to 6 as k grows.
    """
    return -6.25 * (0.2 * c) ** (k / 30) + 6.0


def eq4_paper(b: float) -> float:
    """The paper's k_opt(b) = 27904*sqrt(1 + 0.034/b) - 27897 (Scylla Eq. 4, Thm 1.3).

    Derived for Qwen2.5-72B with a 10K-token prefix on one H800. ``b`` is the batch size (> 0).
    """
    if b <= 0:
        raise ValueError(f"batch size b={b} must be > 0")
    return 27904.0 * math.sqrt(1.0 + 0.034 / b) - 27897.0


def default_t_acc(k: int, c: float = 1.0) -> int:
    """Accepted tokens the draft prefills per cycle: tau_eq8(k) rounded half up, at least 1.

    Not in the paper: the tokens accepted in the previous cycle, tau on average; at least 1
    (the bonus token).
    """
    return max(1, math.floor(tau_eq8(k, c) + 0.5))


def target_step(shape: ModelShape, b: int, n: int, s: int, *, bytes_per_element: float = 2) -> Cost:
    """One target forward of ``n`` new tokens per sequence over a prefix of ``s`` tokens.

    Scylla Appendix C (target): FLOPs = 2bnh[V + l(2h + 2n + 2s + 2h_kv + 3h_m)];
    reads = l[11bnh + 2b(n+s)h_kv + 3bnh_m + 2h^2 + 2h h_kv + 3h h_m + 3h + 2h_kv] + bnh + hV;
    writes = l(8bnh + 2bnh_kv + 3bnh_m) + bnV (elements; x ``bytes_per_element``).
    Raises ``ValueError`` when b < 1, n < 1 or s < 0.
    """
    _check(b=b, n=n, s=s)
    h, hkv, hm, v, nl = shape.h, shape.h_kv, shape.h_m, shape.vocab, shape.layers
    flops = 2 * b * n * h * (v + nl * (2 * h + 2 * n + 2 * s + 2 * hkv + 3 * hm))
    reads = (
        nl
        * (
            11 * b * n * h
            + 2 * b * (n + s) * hkv
            + 3 * b * n * hm
            + 2 * h * h
            + 2 * h * hkv
            + 3 * h * hm
            + 3 * h
            + 2 * hkv
        )
        + b * n * h
        + h * v
    )
    writes = nl * (8 * b * n * h + 2 * b * n * hkv + 3 * b * n * hm) + b * n * v
    return Cost(float(flops), reads * bytes_per_element, writes * bytes_per_element)


def draft_decode(
    shape: ModelShape,
    b: int,
    k: int,
    s: int,
    D: int,
    *,
    bytes_per_element: float = 2,
) -> Cost:
    """``D`` draft decoding steps of ``k`` tokens per sequence over a prefix of ``s`` tokens.

    The draft is one decoder layer of the target's width (h, h_kv, h_m) behind an FC 2h->h and in
    front of the target's LM head (V). Scylla Appendix C (draft):
    FLOPs = D*2bkh(V + 4h + 2k + 2s + 2h_kv + 3h_m);
    reads = D[13bkh + 2b(k+s)h_kv + 3bkh_m + 4h^2 + 2h h_kv + 3h h_m + 3h + 2h_kv + bkh + hV];
    writes = D(9bkh + 2bkh_kv + 3bkh_m + bkV) (elements; x ``bytes_per_element``).
    Raises ``ValueError`` when b, k or D < 1 or s < 0.
    """
    _check(b=b, k=k, s=s, D=D)
    h, hkv, hm, v = shape.h, shape.h_kv, shape.h_m, shape.vocab
    flops = D * 2 * b * k * h * (v + 4 * h + 2 * k + 2 * s + 2 * hkv + 3 * hm)
    reads = D * (
        13 * b * k * h
        + 2 * b * (k + s) * hkv
        + 3 * b * k * hm
        + 4 * h * h
        + 2 * h * hkv
        + 3 * h * hm
        + 3 * h
        + 2 * hkv
        + b * k * h
        + h * v
    )
    writes = D * (9 * b * k * h + 2 * b * k * hkv + 3 * b * k * hm + b * k * v)
    return Cost(float(flops), reads * bytes_per_element, writes * bytes_per_element)


def draft_prefill(
    shape: ModelShape, b: int, t: int, s: int, *, bytes_per_element: float = 2
) -> Cost:
    """The draft re-reading ``t`` accepted tokens per sequence: :func:`draft_decode` with D=1, k=t.

    Scylla Appendix C ("draft prefill"). Raises ``ValueError`` when b or t < 1 or s < 0.
    """
    return draft_decode(shape, b, t, s, 1, bytes_per_element=bytes_per_element)


def decoding_step(
    shape: ModelShape,
    b: int,
    k: int,
    s: int,
    bytes_per_element: float = 2,
    *,
    t_acc: int | None = None,
    draft_steps: int = DRAFT_STEPS,
) -> Cost:
    """One speculative decoding cycle at batch ``b`` verifying ``k`` tokens per sequence.

    Scylla Appendix C step total: draft prefill of ``t_acc`` accepted tokens + ``draft_steps``
    (paper: 5) draft decoding steps of k tokens + one target verification of n = k tokens, all
    over a prefix of ``s`` tokens. ``t_acc`` defaults to :func:`default_t_acc` (tau_eq8(k)
    rounded, at least 1). Raises ``ValueError`` for b, k, t_acc or draft_steps < 1, or s < 0.
    """
    t = default_t_acc(k) if t_acc is None else t_acc
    bpe = bytes_per_element
    return (
        draft_prefill(shape, b, t, s, bytes_per_element=bpe)
        + draft_decode(shape, b, k, s, draft_steps, bytes_per_element=bpe)
        + target_step(shape, b, k, s, bytes_per_element=bpe)
    )


def intensity(
    shape: ModelShape,
    b: int,
    k: int,
    s: int,
    bytes_per_element: float = 2,
    *,
    t_acc: int | None = None,
    draft_steps: int = DRAFT_STEPS,
) -> float:
    """Arithmetic intensity I(b, k) of one decoding step, FLOP/byte (Scylla Sec. 3.2).

    FLOPs / bytes of :func:`decoding_step` with the same arguments.
    """
    return decoding_step(
        shape, b, k, s, bytes_per_element, t_acc=t_acc, draft_steps=draft_steps
    ).intensity


def k_opt(
    shape: ModelShape,
    hw: HardwareProfile,
    b: int,
    s: int,
    *,
    k_max: int = 2048,
    t_acc: int | None = None,
    draft_steps: int = DRAFT_STEPS,
) -> KOpt:
    """The optimal number of verified tokens: the smallest integer k with I(b, k) >= I_crit.

    Scylla Sec. 3.2. Scans k = 1..k_max (I need not be monotone: t_acc is rounded), at
    ``hw.bytes_per_element``; when no k reaches I_crit returns k = k_max with
    ``reached=False``. Raises ``ValueError`` when k_max < 1 (or b < 1, s < 0).
    """
    if k_max < 1:
        raise ValueError(f"k_max={k_max} must be >= 1")
    i_crit = hw.i_crit
    best_i = -math.inf
    for k in range(1, k_max + 1):
        i = intensity(shape, b, k, s, hw.bytes_per_element, t_acc=t_acc, draft_steps=draft_steps)
        best_i = i
        if i >= i_crit:
            return KOpt(b=b, k=k, intensity=i, i_crit=i_crit, reached=True)
    return KOpt(b=b, k=k_max, intensity=best_i, i_crit=i_crit, reached=False)


def step_time(cost: Cost, hw: HardwareProfile) -> float:
    """Roofline time of ``cost`` on ``hw``, seconds: max(flops / peak FLOP/s, bytes / bandwidth).

    Scylla Sec. 3.2 (the step is bound by whichever resource it saturates).
    """
    return max(cost.flops / hw.peak_flops, cost.bytes / hw.bandwidth)


def theoretical_throughput(
    shape: ModelShape,
    hw: HardwareProfile,
    b: int,
    k: int,
    s: int,
    tau: float | None = None,
    *,
    t_acc: int | None = None,
    draft_steps: int = DRAFT_STEPS,
) -> float:
    """Theoretical throughput, tokens/s over the batch: b * tau / step_time(decoding step).

    ``tau`` is the acceptance length (tokens per sequence per cycle, bonus token included);
    default :func:`tau_eq8` (k). ``t_acc`` defaults to tau rounded half up (at least 1). The
    step is :func:`decoding_step` at ``hw.bytes_per_element``, timed by :func:`step_time`.
    """
    tau_k = tau_eq8(k) if tau is None else tau
    t = max(1, math.floor(tau_k + 0.5)) if t_acc is None else t_acc
    cost = decoding_step(shape, b, k, s, hw.bytes_per_element, t_acc=t, draft_steps=draft_steps)
    return b * tau_k / step_time(cost, hw)


def peak_throughput(
    shape: ModelShape,
    hw: HardwareProfile,
    b: int,
    s: int,
    *,
    k_max: int = 2048,
    draft_steps: int = DRAFT_STEPS,
) -> PeakThroughput:
    """The k in [1, k_max] maximising :func:`theoretical_throughput` (tau from Eq. 8).

    The quantity whose growth in b Scylla Thm 1.3 fits as a*log2(b) + b0.
    """
    if k_max < 1:
        raise ValueError(f"k_max={k_max} must be >= 1")
    best = PeakThroughput(b=b, k=1, tokens_per_s=-math.inf)
    for k in range(1, k_max + 1):
        tps = theoretical_throughput(shape, hw, b, k, s, draft_steps=draft_steps)
        if tps > best.tokens_per_s:
            best = PeakThroughput(b=b, k=k, tokens_per_s=tps)
    return best


def _check(**values: int) -> None:
    for name, value in values.items():
        low = 0 if name == "s" else 1
        if value < low:
            raise ValueError(f"{name}={value} must be >= {low}")
