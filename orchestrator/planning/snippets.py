"""Serving-engine snippets of a plan: the planned k per batch size as vLLM's
``speculative_config``, SGLang's launch flags per batch range, and this project's own
``decode.k_law`` file.

Conventions (k is this project's: verified tokens per sequence per cycle, the tree root
included, as SGLang's ``--speculative-num-draft-tokens``):

- vLLM (``num_speculative_tokens_per_batch_size``, vllm#32374; vLLM 0.32 reads a list of
  ``[range_start, range_end, K]``, inclusive ranges from 1): K speculative tokens, K = k - 1
  (vLLM counts drafted tokens; its EAGLE drafts a chain; K = 0 where the plan has k = 1, no
  speculation), ``num_speculative_tokens`` the largest K (the startup maximum it sizes buffers
  for); ``null`` when every K is 0 (vLLM needs K > 0: serve the target without speculation);
- SGLang has one setting per server: one launch line per batch range, with
  ``--max-running-requests`` at the range's top, ``--speculative-num-steps`` the tree depth,
  ``--speculative-eagle-topk`` the decode sweep's topk and ``--speculative-num-draft-tokens``
  the planned k (at most the tree's nodes); a range planned at k = 1 (no speculation) launches
  without the speculative flags;
- ``k_law.json``: Scylla Eq. 4 (``k = A*sqrt(1 + B/b) - C``) fitted to the planned k over a
  ladder of batch sizes, read by trials with ``decode.k_law: sweep:<plan name>``
  (:func:`workloads.engine.k_law.read_sweep_k_law`).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MAX_BATCH", "batch_ranges", "sglang_lines", "vllm_config", "write_k_law"]

MAX_BATCH = 4096
"""the top of the last batch range"""


def batch_ranges(batch_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """Inclusive ranges covering 1..:data:`MAX_BATCH` (or the largest planned b, when larger),
    one per planned b (sorted), split at the geometric mean of neighbours: [1, 8, 32] -> (1, 2),
    (3, 16), (17, 4096)."""
    bs = sorted(set(int(b) for b in batch_sizes))
    out = []
    lo = 1
    for i, b in enumerate(bs):
        last = max(MAX_BATCH, b)
        hi = last if i == len(bs) - 1 else max(b, math.floor(math.sqrt(b * bs[i + 1])))
        out.append((lo, hi))
        lo = hi + 1
    return out


def vllm_config(rows: Sequence[Mapping[str, Any]], draft: str) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` for the plan's rows (batch_size, k), as the module says
    (validated by vLLM 0.32 ``vllm/v1/spec_decode/dynamic/utils.py``); None when every
    planned k is 1. The method is the draft's: ``eagle3`` for an export of a draft with hidden
    fusion (a plain ``eagle`` would serve it silently at acceptance 1), read from the export's
    config.json when ``draft`` is a folder; ``eagle`` for a hub id."""
    from workloads.models.export import exported_vllm_method

    ranges = batch_ranges([int(r["batch_size"]) for r in rows])
    by_b = {int(r["batch_size"]): int(r["k"]) for r in rows}
    per = [[lo, hi, max(0, by_b[b] - 1)] for (lo, hi), b in zip(ranges, sorted(by_b), strict=True)]
    top = max(k for _, _, k in per)
    if top == 0:
        return None
    return {
        "method": exported_vllm_method(Path(draft)) if Path(draft).is_dir() else "eagle",
        "model": draft,
        "num_speculative_tokens": top,
        "num_speculative_tokens_per_batch_size": per,
    }


def sglang_lines(
    rows: Sequence[Mapping[str, Any]], *, target: str, draft: str, depth: int, topk: int
) -> list[str]:
    """One ``python -m sglang.launch_server`` line per batch range (with a comment line)."""
    from workloads.engine.k_law import tree_capacity

    cap = tree_capacity(depth, topk)
    ranges = batch_ranges([int(r["batch_size"]) for r in rows])
    lines = []
    for (lo, hi), row in zip(ranges, sorted(rows, key=lambda r: int(r["batch_size"])), strict=True):
        k = min(int(row["k"]), cap)
        said = f"k={row['k']}" if k > 1 else "k=1: no speculation, the target alone is faster"
        lines.append(f"# batch sizes {lo}-{hi} (planned at b={row['batch_size']}, {said})")
        args = ["python", "-m", "sglang.launch_server", "--model-path", target]
        if k > 1:
            args += [
                "--speculative-algorithm", "EAGLE",
                "--speculative-draft-model-path", draft,
                "--speculative-num-steps", str(depth),
                "--speculative-eagle-topk", str(topk),
                "--speculative-num-draft-tokens", str(k),
            ]  # fmt: skip
        args += ["--max-running-requests", str(hi)]
        lines.append(shlex.join(args))
    return lines


def write_k_law(
    folder: Path, ladder: Sequence[int], ks: Sequence[int], *, name: str, target: str
) -> Path:
    """``folder/k_law.json``: Eq. 4 fitted to the planned k at the ladder's batch sizes
    (written even when it does not fit; readers then refuse it, quoting the status)."""
    from analysis.eq4 import fit_eq4
    from workloads.engine.k_law import write_sweep_k_law

    eq4 = fit_eq4([float(b) for b in ladder], [float(k) for k in ks])
    return write_sweep_k_law(folder, eq4.to_dict(), sweep=name, target=target)
