"""``orchestrator roofline``: the seed paper's roofline model as one command.

Scylla (arXiv 2505.07858) Sec. 3.2, Appendix C, Eq. 4 and Thm 1.3: for each batch size, the
optimal number of verified tokens k_opt (where the step's arithmetic intensity reaches the
hardware's I_crit), the paper's Eq. 4 value, the theoretical throughput, and the fits of the
Eq. 4 and Thm 1.3 forms over the batch sizes. Registered in :mod:`orchestrator.cli`, which turns
``ValueError`` into one line and exit code 2.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

out = Console()

_BATCH_EXAMPLE = "Fix: --batch-sizes 1-64 (1,2,4,...,64) or --batch-sizes 1,2,4,8"


def parse_batch_sizes(text: str) -> list[int]:
    """Parse ``--batch-sizes``: ``"1-64"`` -> [1, 2, 4, ..., 64], ``"1,3,8"`` -> [1, 3, 8].

    A range LO-HI doubles from LO and always includes HI (``"3-20"`` -> [3, 6, 12, 20]).

    Returns sorted distinct positive batch sizes. Raises ``ValueError`` naming the flag and an
    example when ``text`` is neither form or holds a value < 1.
    """
    spec = text.strip()
    try:
        if "-" in spec and "," not in spec:
            lo_text, hi_text = spec.split("-", 1)
            lo, hi = int(lo_text), int(hi_text)
            if lo < 1 or hi < lo:
                raise ValueError
            sizes = []
            b = lo
            while b < hi:
                sizes.append(b)
                b *= 2
            sizes.append(hi)
        else:
            sizes = [int(part) for part in spec.split(",") if part.strip()]
            if not sizes or min(sizes) < 1:
                raise ValueError
    except ValueError:
        raise ValueError(
            f"--batch-sizes {text!r} is not a range LO-HI or a list of positive integers. "
            + _BATCH_EXAMPLE
        ) from None
    return sorted(set(sizes))


def roofline(
    *,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="built-in model (qwen2.5-72b, llama-3-8b, llama-3-70b, vicuna-7b, "
            "smollm2-135m; case-insensitive) or a path to a Hugging Face config.json",
        ),
    ] = "qwen2.5-72b",
    hardware: Annotated[
        str,
        typer.Option(
            "--hardware",
            help="datasheet profile h800, h100, h200, a100 (dense bf16), or local-cpu "
            "(measured now by a ~2 s torch micro-benchmark)",
        ),
    ] = "h800",
    prefix: Annotated[
        int, typer.Option("--prefix", min=0, help="prefix length s: tokens in each KV cache")
    ] = 10000,
    batch_sizes: Annotated[
        str,
        typer.Option(
            "--batch-sizes",
            help="LO-HI doubles from LO to HI (1-64 = 1,2,4,...,64), or a comma list (1,2,4,8)",
        ),
    ] = "1-64",
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="element type (sets bytes per element): bfloat16, float16 or float32. "
            "Default: bfloat16 for datasheet GPUs, float32 for local-cpu",
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            help="torch threads for the local-cpu micro-benchmark (default: torch's current count)",
        ),
    ] = None,
    k_max: Annotated[
        int, typer.Option("--k-max", min=1, help="largest k searched (verified tokens)")
    ] = 2048,
    json_out: Annotated[
        Path | None,
        typer.Option("--json-out", help="also write the table and fits to this JSON file"),
    ] = None,
) -> None:
    """Roofline of speculative decoding (Scylla arXiv 2505.07858, Sec. 3.2, App. C).

    Per batch size b (tau, the acceptance length, from Appendix E Eq. 8):
    - k_opt: the fewest verified tree tokens k whose decoding step (draft
      prefill + 5 draft steps + target verification of k tokens) reaches
      I_crit = peak FLOP/s / memory bandwidth of --hardware;
    - Eq. 4: the paper's k_opt(b) (Qwen2.5-72B, one H800, 10K prefix);
    - I(b,k_opt): FLOP/byte of that step;
    - tok/s: theoretical throughput b*tau/step time, at k_opt and at its
      peak over k (k@peak).
    Then fits over the batch sizes: k_opt = A*sqrt(1 + B/b) - C (Eq. 4 form)
    and peak tok/s = a*log2(b) + b0 (Thm 1.3).

    Example: orchestrator roofline --model qwen2.5-72b --hardware h800
    """
    from workloads.roofline import LOCAL_CPU, get_profile, load_model_shape

    bs = parse_batch_sizes(batch_sizes)
    shape = load_model_shape(model)
    if hardware.strip().lower().replace("_", "-") in (LOCAL_CPU, "cpu", "local"):
        out.print(
            f"measuring local CPU ({dtype or 'float32'}, {threads or 'default'} threads, ~2 s)...",
            highlight=False,
        )
    hw = get_profile(hardware, dtype=dtype, threads=threads)
    rows = _rows(shape, hw, bs, prefix, k_max)
    _print_table(rows, shape, hw, prefix, k_max)
    f4, thm = _print_fits(rows)
    if json_out is not None:
        payload = {
            "model": asdict(shape),
            "hardware": {**asdict(hw), "i_crit": hw.i_crit},
            "prefix": prefix,
            "k_max": k_max,
            "rows": rows,
            "eq4_fit": f4.to_dict() if f4.ok else None,
            "thm13_fit": thm.to_dict(),
        }
        _write_json(json_out, payload)


def _rows(shape: Any, hw: Any, bs: list[int], prefix: int, k_max: int) -> list[dict[str, Any]]:
    """Per batch size b: k_opt, the paper's Eq. 4, I(b, k_opt), tokens/s at k_opt and at the
    peak over k (Scylla App. C; :mod:`workloads.roofline`)."""
    from workloads.roofline import eq4_paper, k_opt, peak_throughput, theoretical_throughput

    rows: list[dict[str, Any]] = []
    for b in bs:
        opt = k_opt(shape, hw, b, prefix, k_max=k_max)
        peak = peak_throughput(shape, hw, b, prefix, k_max=k_max)
        eq4 = eq4_paper(b)
        rows.append(
            {
                "batch_size": b,
                "k_opt": opt.k,
                "reached": opt.reached,
                "eq4_paper": eq4,
                "diff": opt.k - eq4,
                "intensity": opt.intensity,
                "tokens_per_s_at_k_opt": theoretical_throughput(shape, hw, b, opt.k, prefix),
                "peak_tokens_per_s": peak.tokens_per_s,
                "k_at_peak": peak.k,
            }
        )
    return rows


def _print_table(rows: list[dict[str, Any]], shape: Any, hw: Any, prefix: int, k_max: int) -> None:
    table = Table(
        title=f"roofline: {shape.name} on {hw.name} ({hw.dtype}), prefix s = {prefix}",
        caption="k_opt: smallest k with I(b, k) >= I_crit; Eq. 4: the paper's k_opt(b) "
        "(Qwen2.5-72B, H800, s=10K); tok/s: b*tau(k)/step time, tau from Eq. 8",
    )
    for col in ["b", "k_opt", "Eq. 4", "diff", "I(b,k_opt)", "tok/s@k_opt", "peak tok/s", "k@peak"]:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["batch_size"]),
            f"{r['k_opt']}" + ("" if r["reached"] else "*"),
            f"{r['eq4_paper']:.1f}",
            f"{r['diff']:+.1f}",
            f"{r['intensity']:.1f}",
            f"{r['tokens_per_s_at_k_opt']:.4g}",
            f"{r['peak_tokens_per_s']:.4g}",
            str(r["k_at_peak"]),
        )
    out.print(table)
    if not all(r["reached"] for r in rows):
        out.print(f"* I(b, k) stays below I_crit up to --k-max {k_max}: k_opt is the bound.")
    out.print(
        f"I_crit = {hw.i_crit:.1f} FLOP/byte ({hw.peak_flops:.4g} FLOP/s / "
        f"{hw.bandwidth:.4g} B/s; {hw.source})",
        highlight=False,
    )


def _print_fits(rows: list[dict[str, Any]]) -> tuple[Any, Any]:
    """The Eq. 4 form over k_opt(b) and Thm 1.3 over the peak tokens/s, printed; both fits."""
    import pandas as pd

    from analysis.eq4 import fit_eq4
    from analysis.throughput import fit_peak_throughput

    f4 = fit_eq4([r["batch_size"] for r in rows], [r["k_opt"] for r in rows])
    if f4.ok:
        out.print(
            f"Eq. 4 form fit: k_opt = {f4.A:.6g}*sqrt(1 + {f4.B:.4g}/b) - {f4.C:.6g}, "
            f"R² = {f4.r2:.6f} (n = {f4.n}; paper: 27904*sqrt(1 + 0.034/b) - 27897)",
            highlight=False,
        )
    else:
        out.print(f"Eq. 4 form fit: not fitted ({f4.status})", highlight=False)
    thm = fit_peak_throughput(pd.DataFrame(rows, columns=["batch_size", "peak_tokens_per_s"]))
    if thm.ok:
        out.print(
            f"Thm 1.3 fit: peak tokens/s = {thm.a:.4g}*log2(b) + {thm.b:.4g} "
            f"(a 95% CI [{thm.a_ci[0]:.4g}, {thm.a_ci[1]:.4g}], b0 95% CI "
            f"[{thm.b_ci[0]:.4g}, {thm.b_ci[1]:.4g}]), R² = {thm.r2:.4f} "
            f"(n = {thm.n}; paper: 286.79*log2(b) + 7.54)",
            highlight=False,
        )
    else:
        out.print(f"Thm 1.3 fit: not fitted ({thm.status})", highlight=False)
    return f4, thm


def _write_json(json_out: Path, payload: dict[str, Any]) -> None:
    try:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(_finite(payload), indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        raise ValueError(
            f"--json-out {str(json_out)!r} cannot be written ({e.strerror}). "
            "Fix: pass a path in a writable folder"
        ) from None
    out.print(f"wrote {json_out}")


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
