"""How much must a draft be trained until speculation pays: the token law's crossing of the
break-even acceptance length.

Inputs, both measured:

- the token law of a ``draft_train`` sweep, ``tau(T) = a*log_base(T) + b`` (Scylla, arXiv
  2505.07858, Thm 1.1), fitted by :func:`analysis.laws.fit_log_linear` (OLS, HC3 covariance);
- the break-even acceptance length tau* at a batch size b: the acceptance length (tokens per
  cycle) at which a speculative cycle emits tokens exactly as fast as plain autoregressive
  decoding, i.e. ``cycle time / AR step time``. This platform's ``decode_bench`` measures it
  from per-cycle and per-step times (``break_even_acceptance_length``), which leave out prefill
  and per-batch work; :func:`end_to_end_break_even` reads it from the end-to-end tokens/s ratio
  of either engine (what a speedup of 1 needs).

:func:`crossing_budget` solves ``tau(T*) = tau*`` for the budget T* (tokens) and gives its
(1 - alpha) interval by inverse prediction on the fitted mean line (Fieller's theorem; Fieller
1954, J. R. Stat. Soc. B 16(2); Draper & Smith, *Applied Regression Analysis*, 3rd ed., Sec. 3.2
"inverse regression"): the set of x = log_base(T) where tau* lies inside the mean line's
(1 - alpha) confidence band.

:func:`batch_crossing` applies the same inverse prediction to Thm 1.3's other question: the
batch size b* where the measured speedup over autoregressive decoding crosses 1.

Pure functions: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd
from scipy import stats

from analysis._json import JsonRecord
from analysis.laws import LogLinearFit, fit_log_linear

__all__ = ["STATUSES", "Crossing", "batch_crossing", "crossing_budget", "end_to_end_break_even"]

STATUSES = ("ok", "already", "unbounded", "decreasing", "no fit", "no break-even")
"""the values of :attr:`Crossing.status` (meanings: :func:`crossing_budget`)"""

_NOTES = {
    "ok": "the law crosses tau* at T*; the interval is bounded",
    "already": "tau* is below the law's lower confidence band at the smallest measured budget: "
    "speculation pays already there",
    "unbounded": "the slope is not resolved from 0 (a^2 <= t^2 Var(a)): no budget is supported; "
    "the confidence set is {region}",
    "decreasing": "the law falls with training (a < 0, resolved): T* is where acceptance drops "
    "below tau*, not a budget to reach",
    "no fit": "the token law has no fit: {why}",
    "no break-even": "tau* is not a finite number (the break-even was not measured)",
}


@dataclass(frozen=True)
class Crossing(JsonRecord):
    """The budget T* where a token law's mean line reaches a break-even tau*, with its set.

    Log units are ``log_base`` of tokens (the law's regressor); a set end that does not exist
    is ``-inf``/``inf`` in log units and 0/``inf`` in tokens. ``covers`` tests membership in
    the (1 - alpha) set for every ``region``, the complement of an interval included.
    """

    tau_star: float
    """break-even acceptance length (tokens per cycle)"""
    tau_star_var: float
    """variance of tau*'s estimate included in the set (0: tau* taken as exact)"""
    log_base: int
    """base of the law's logarithm (10 for Thm 1.1)"""
    budget: float
    """T* = log_base**((tau_star - b)/a): pretraining tokens where the mean line is tau_star
    (NaN without a fit or tau*, inf or 0 when a = 0)"""
    budget_lo: float
    """lower end of the (1 - alpha) set (tokens); 0 when it is unbounded below"""
    budget_hi: float
    """upper end of the (1 - alpha) set (tokens); inf when it is unbounded above"""
    log_budget: float
    """log_base(T*)"""
    log_lo: float
    """log_base(budget_lo); -inf when unbounded below"""
    log_hi: float
    """log_base(budget_hi); inf when unbounded above"""
    status: str
    """one of :data:`STATUSES`"""
    region: str
    """shape of the (1 - alpha) set in log units: "interval" [lo, hi], "complement" (every x
    outside an open interval, see ``gap``), "half-line", "everything", "none" (empty), or "-"
    (no set: no fit or no tau*)"""
    extrapolated: bool
    """T* lies outside the measured budgets [min x, max x] of the fit"""
    measured: tuple[float, float]
    """(smallest, largest) budget the law was fitted on (tokens)"""
    alpha: float
    """1 - confidence level of the set"""
    t: float
    """Student t quantile at 1 - alpha/2 with the fit's df_resid (or tau*'s, when smaller)"""
    quadratic: tuple[float, float, float]
    """(A, B, C): the set is {x : A x^2 + B x + C <= 0}, x in log units; A = a^2 - t^2 Var(a),
    B = 2((b - tau*) a - t^2 Cov(a, b)), C = (b - tau*)^2 - t^2 (Var(b) + tau_star_var); NaN
    without a set"""
    gap: tuple[float, float]
    """region "complement": the excluded open interval (log units); else (NaN, NaN)"""
    note: str
    """one sentence: what the status means here"""

    @property
    def bounded(self) -> bool:
        """True when the (1 - alpha) set is a bounded interval (status ok, already, decreasing)."""
        return self.region == "interval"

    def covers(self, tokens: float) -> bool:
        """Whether a budget (tokens > 0) is in the (1 - alpha) set (False without a set)."""
        qa, qb, qc = self.quadratic
        if not (tokens > 0 and math.isfinite(qa)):
            return False
        x = math.log(tokens) / math.log(self.log_base)
        return qa * x * x + qb * x + qc <= 0.0


def end_to_end_break_even(acceptance_length: float, speedup: float) -> float:
    """The break-even acceptance length at one batch size, from one run's end-to-end speedup.

    A speculating engine (vLLM's server, this platform's tree decoder) emits
    ``acceptance_length`` tokens (per sequence) per verification step in ``c`` plain-decoding
    step times, so its speedup over plain decoding is ``acceptance_length / c`` and the cycle
    cost ``c = acceptance_length / speedup`` is the break-even tau*. Assumes the cycle's cost
    does not depend on how many tokens were accepted (the same draft and verify width every
    step) and charges everything else the speedup holds (prefill, scheduling) to the cycle.
    Inputs: tokens per verification step and the ratio of output tokens/s (vLLM's
    ``speedup/b{b}``, ``decode_bench``'s ``speedup``); returns tokens per cycle, NaN when either
    is not a finite positive number.
    """
    try:
        tau, s = float(acceptance_length), float(speedup)
    except (TypeError, ValueError):
        return math.nan
    if not (math.isfinite(tau) and math.isfinite(s) and tau > 0 and s > 0):
        return math.nan
    return tau / s


def crossing_budget(
    fit: LogLinearFit,
    tau_star: float,
    *,
    alpha: float = 0.05,
    tau_star_var: float = 0.0,
    tau_star_df: float = math.inf,
) -> Crossing:
    """The budget where the token law's mean line reaches ``tau_star``, with its set.

    ``fit``: ``acceptance_length = a*log_base(T) + b`` (:func:`analysis.laws.fit_log_linear`),
    its ``cov`` ordered (a, b) (HC3) and ``df_resid``; ``tau_star``: the break-even acceptance
    length (tokens per cycle); ``tau_star_var``: the variance of its estimate (squared standard
    error; 0 = exact, the default) and ``tau_star_df`` its degrees of freedom (runs - 1).
    Point: ``x* = (tau* - b) / a``, ``T* = log_base**x*``. Set (Fieller / inverse prediction):
    ``{x : |tau* - (a x + b)| <= t sqrt(Var(a) x^2 + 2 Cov(a,b) x + Var(b) + tau_star_var)}``,
    t the Student quantile at 1 - alpha/2 with the law's ``df_resid``, or ``tau_star_df`` when
    that is smaller and tau* has a variance (the conservative choice where Welch-Satterthwaite
    would vary with x); tau*'s estimate is taken as independent of the law's (not so when both
    come from the same trials). Squared, the quadratic :attr:`Crossing.quadratic` ``<= 0``. Its
    status (:data:`STATUSES`):

    - "no fit": ``fit`` is not ok; "no break-even": ``tau_star`` is not finite;
    - "unbounded": ``a^2 - t^2 Var(a) <= 0``: the slope is not resolved from 0, so the set is
      infinite (everything, a half-line, or the complement of an interval) and no budget is
      supported;
    - "decreasing": a bounded set but a < 0 (acceptance falls with training);
    - "already": tau* is below the mean line at the smallest measured budget and the set's
      upper end is below that budget (speculation pays at the smallest budget measured);
    - "ok": otherwise; ``extrapolated`` when T* is outside the measured budgets.

    Raises:
        ValueError: ``alpha`` not in (0, 1), ``tau_star_var`` negative or NaN, or
            ``tau_star_df`` not positive.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha} must be in (0, 1). Fix: e.g. alpha=0.05.")
    if not tau_star_var >= 0:
        raise ValueError(f"tau_star_var={tau_star_var} must be >= 0. Fix: 0 when tau* is exact.")
    if not tau_star_df > 0:
        raise ValueError(f"tau_star_df={tau_star_df} must be > 0. Fix: the runs of tau* less 1.")
    lb = math.log(fit.log_base)
    xs = [v for v in fit.x if v > 0]
    measured = (min(xs), max(xs)) if xs else (math.nan, math.nan)
    nan = math.nan
    blank = _no_set(float(tau_star), tau_star_var, fit.log_base, measured, alpha)
    if not (fit.ok and fit.df_resid > 0 and math.isfinite(fit.a) and xs):
        why = fit.status if not fit.ok else "no residual degrees of freedom"
        return _with(blank, "no fit", why=why)
    if not math.isfinite(tau_star):
        return _with(blank, "no break-even")
    df = min(fit.df_resid, tau_star_df) if tau_star_var > 0 else fit.df_resid
    t = float(stats.t.ppf(1 - alpha / 2, df))
    (va, cab), (_, vb) = fit.cov
    d = fit.b - tau_star  # mean line minus tau* at x = 0
    qa = fit.a**2 - t**2 * va
    qb = 2.0 * (d * fit.a - t**2 * cab)
    qc = d**2 - t**2 * (vb + tau_star_var)
    x_star = -d / fit.a if fit.a != 0 else math.copysign(math.inf, -d) if d != 0 else nan
    region, lo, hi, gap = _solve(qa, qb, qc)
    x_min, x_max = math.log(measured[0]) / lb, math.log(measured[1]) / lb
    if region != "interval":
        status = "unbounded"
    elif fit.a < 0:
        status = "decreasing"
    elif tau_star < fit.a * x_min + fit.b and hi < x_min:
        status = "already"
    else:
        status = "ok"
    found = replace(
        blank,
        budget=_power(fit.log_base, x_star),
        budget_lo=_power(fit.log_base, lo),
        budget_hi=_power(fit.log_base, hi),
        log_budget=x_star,
        log_lo=lo,
        log_hi=hi,
        status=status,
        region=region,
        extrapolated=not (math.isnan(x_star) or x_min <= x_star <= x_max),
        t=t,
        quadratic=(qa, qb, qc),
        gap=gap,
    )
    return _with(found, status, region=_region_text(region, gap, fit.log_base))


def _no_set(
    tau_star: float, tau_star_var: float, log_base: int, measured: tuple[float, float], alpha: float
) -> Crossing:
    """A crossing of ``tau_star`` with no budget and no set: every number NaN, region "-",
    status "no fit" (:func:`_with` gives the status and its note)."""
    nan = math.nan
    return Crossing(
        tau_star=tau_star,
        tau_star_var=tau_star_var,
        log_base=log_base,
        budget=nan,
        budget_lo=nan,
        budget_hi=nan,
        log_budget=nan,
        log_lo=nan,
        log_hi=nan,
        status="no fit",
        region="-",
        extrapolated=False,
        measured=measured,
        alpha=alpha,
        t=nan,
        quadratic=(nan, nan, nan),
        gap=(nan, nan),
        note="",
    )


def batch_crossing(best: pd.DataFrame, *, alpha: float = 0.05) -> tuple[LogLinearFit, Crossing]:
    """The batch size b* where speculation stops (or starts) paying, with its (1 - alpha) set.

    ``best``: one row per batch size with ``batch_size`` (sequences) and ``speedup`` (the best
    configuration's tokens/s over the autoregressive baseline at that b, e.g.
    :func:`analysis.throughput.best_per_batch`). Fits ``speedup = a*log2(b) + b0`` (OLS, HC3,
    :func:`analysis.laws.fit_log_linear`, law "speedup") and solves ``speedup(b*) = 1`` by
    :func:`crossing_budget`; the returned :class:`Crossing`'s budget fields are batch sizes
    here. Its status reads: "decreasing" (a < 0, resolved) speculation pays below b*; "ok" it
    pays above b*; "already" it pays from the smallest b measured; "unbounded" the trend over b
    is not resolved from 0 (no crossing is supported); "no fit" fewer than 3 batch sizes.
    ``extrapolated``: b* is outside the measured batch sizes (e.g. below 1 when speculation
    never pays). Raises ``ValueError`` when a column is missing or ``alpha`` is not in (0, 1).
    """
    fit = fit_log_linear(best, "batch_size", "speedup", law="speedup", log_base=2, alpha=alpha)
    return fit, crossing_budget(fit, 1.0, alpha=alpha)


def _solve(qa: float, qb: float, qc: float) -> tuple[str, float, float, tuple[float, float]]:
    """The set {x : qa x^2 + qb x + qc <= 0}: (region, inf, sup, gap) (see :class:`Crossing`)."""
    inf, nan = math.inf, math.nan
    no_gap = (nan, nan)
    if qa == 0.0:  # linear (or constant) condition
        if qb == 0.0:
            return ("everything", -inf, inf, no_gap) if qc <= 0 else ("none", nan, nan, no_gap)
        root = -qc / qb
        return ("half-line", -inf, root, no_gap) if qb > 0 else ("half-line", root, inf, no_gap)
    disc = qb * qb - 4.0 * qa * qc
    if qa > 0:  # disc < 0 only by rounding: the point estimate always satisfies the condition
        r1, r2 = _roots(qa, qb, qc, max(disc, 0.0))
        return "interval", r1, r2, no_gap
    if disc <= 0:  # qa < 0: the parabola opens down and never rises above 0
        return "everything", -inf, inf, no_gap
    return "complement", -inf, inf, _roots(qa, qb, qc, disc)


def _roots(qa: float, qb: float, qc: float, disc: float) -> tuple[float, float]:
    """The two real roots of ``qa x^2 + qb x + qc``, smaller first, ``disc`` its discriminant
    (>= 0), without cancellation (Press et al., *Numerical Recipes*, 3rd ed., Sec. 5.6)."""
    q = -0.5 * (qb + math.copysign(math.sqrt(disc), qb))
    if q == 0.0:  # qb = 0 and disc = 0: a double root at 0
        return 0.0, 0.0
    r1, r2 = q / qa, qc / q
    return (r1, r2) if r1 <= r2 else (r2, r1)


def _power(base: int, x: float) -> float:
    """``base**x`` in tokens: 0 at -inf, inf at +inf or on overflow, NaN for NaN."""
    if math.isnan(x):
        return math.nan
    if x == -math.inf:
        return 0.0
    try:
        return float(base) ** x
    except OverflowError:
        return math.inf


def _region_text(region: str, gap: tuple[float, float], base: int) -> str:
    if region == "complement":
        lo, hi = _power(base, gap[0]), _power(base, gap[1])
        return f"every budget outside ({lo:.3g}, {hi:.3g}) tokens"
    return {"everything": "every budget", "half-line": "a half-line", "none": "empty"}.get(
        region, region
    )


def _with(c: Crossing, status: str, **fields: str) -> Crossing:
    """``c`` with ``status`` and its note."""
    return replace(c, status=status, note=_NOTES[status].format(**fields))
