"""The seed paper's published numbers beside ours.

Source: Scylla, "Scaling Laws for Speculative Decoding" (arXiv 2505.07858), as summarised in
``shared/PAPER_NOTES.md``; the numbers live in ``analysis/reference/scylla_2505_07858.yaml``
(the laws of Thm 1.1-1.3, the endpoints printed with Thm 1.1, Eq. 4 and its k_opt values,
Table 4 means, Table 5). Pure functions: no I/O beyond reading that packaged file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from analysis._json import JsonRecord

if TYPE_CHECKING:
    from analysis.laws import LogLinearFit

REFERENCE_FILE = Path(__file__).parent / "reference" / "scylla_2505_07858.yaml"
"""the packaged reference data file"""


@cache
def reference() -> dict[str, Any]:
    """The reference data file as a dict (keys ``paper``, ``laws``, ``eq4``, ``eq8``,
    ``table4``, ``table5``). Raises ``OSError`` or ``yaml.YAMLError`` if the package is broken."""
    data: dict[str, Any] = yaml.safe_load(REFERENCE_FILE.read_text(encoding="utf-8"))
    return data


def paper_constants() -> dict[str, dict[str, Any]]:
    """The paper's law constants by law name ("tokens", "layers", "batch"): ``source``, ``x``,
    ``x_unit``, ``x_scale``, ``y``, ``log_base``, ``a``, ``b``, ``r2`` (None where unpublished)."""
    ref = reference()
    out = {}
    for law, item in ref["laws"].items():
        entry = {
            k: item.get(k) for k in ("x", "x_unit", "x_scale", "y", "log_base", "a", "b", "r2")
        }
        entry["source"] = f"{ref['paper']} {item['source']}"
        out[law] = entry
    return out


PAPER_CONSTANTS: dict[str, dict[str, Any]] = paper_constants()
"""The paper's published law constants (``analysis/reference/scylla_2505_07858.yaml``).

The token law's T is in billions of tokens (b is tau at T = 1B); for raw token counts the
intercept is ``b - 9*a``, the slope unchanged.
"""


@dataclass(frozen=True)
class PaperComparison(JsonRecord):
    """Our fitted slope beside the paper's (same law, same log base).

    ``paper_b_ours`` is the paper's b in our x unit: ``b - a*log_base(x_scale)``.
    """

    law: str
    source: str
    paper_a: float
    paper_b: float
    """b as published, in the paper's x unit"""
    paper_b_ours: float
    """the paper's b in our x unit"""
    paper_r2: float
    ours_a: float
    ours_a_ci: tuple[float, float]
    """our a's confidence interval (HC3, t-based)"""
    ours_b: float
    ours_r2: float
    slope_ratio: float
    """ours_a / paper_a (NaN when our fit is not ok)"""
    ci_covers_paper: bool | None
    """whether ``ours_a_ci`` contains paper_a; None when our fit is not ok (no verdict)"""
    boot_ci: tuple[float, float] | None
    """our a's bootstrap interval, when one was computed"""
    boot_covers_paper: bool | None


def compare_with_paper(
    fit: LogLinearFit, boot_a_ci: tuple[float, float] | None = None
) -> PaperComparison | None:
    """Our fit of ``fit.law`` beside the paper's published constants, or None when the paper
    states no such law or the log bases differ. ``boot_a_ci`` adds the bootstrap interval's
    verdict. A fit that is not ok gives NaN numbers and None verdicts."""
    paper = paper_constants().get(fit.law)
    if paper is None or int(paper["log_base"]) != fit.log_base:
        return None
    pa, pb = float(paper["a"]), float(paper["b"])
    scale = float(paper.get("x_scale") or 1.0)
    lo, hi = fit.a_ci
    boot_cov = None
    if boot_a_ci is not None and fit.ok:
        boot_cov = bool(boot_a_ci[0] <= pa <= boot_a_ci[1])
    return PaperComparison(
        law=fit.law,
        source=str(paper["source"]),
        paper_a=pa,
        paper_b=pb,
        paper_b_ours=pb - pa * math.log(scale, fit.log_base),
        paper_r2=math.nan if paper.get("r2") is None else float(paper["r2"]),
        ours_a=fit.a,
        ours_a_ci=fit.a_ci,
        ours_b=fit.b,
        ours_r2=fit.r2,
        slope_ratio=fit.a / pa,
        ci_covers_paper=bool(lo <= pa <= hi) if fit.ok else None,
        boot_ci=boot_a_ci,
        boot_covers_paper=boot_cov,
    )


def table4_ratios() -> dict[str, float]:
    """Scylla over EAGLE-2 mean acceptance length per target model (Table 4)."""
    means = reference()["table4"]["means"]
    return {m: v["Scylla"] / v["EAGLE-2"] for m, v in means.items()}
