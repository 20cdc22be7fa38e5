"""The decode check's measuring machinery (``benchmarks/gpu_check.py decode``): a cell's timed
calls on one persistent :class:`~workloads.engine.steps.Steps` after an untimed first call that
prepares it, what the cell's steps did wrong, the calls every cell makes (:class:`Run`) and the
budget's shares."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from benchmarks.gpu.common import free
from workloads.engine.ar_decode import ar_generate
from workloads.engine.oracle_draft import OracleDraft
from workloads.engine.steps import Steps, StepStats
from workloads.engine.tree_decode import BatchResult, TreeShape, generate

__all__ = [
    "MAX_CALLS",
    "Cell",
    "GridClock",
    "Run",
    "again",
    "chain",
    "faults",
    "fmt",
    "measure_cell",
    "prep_s",
    "random_prompts",
    "release",
    "timed_calls",
]


MAX_CALLS = 20
"""timed calls of one cell at most by default (``--calls``; a cell stops earlier when its share
of the budget is spent)"""


class Cell:
    """Tokens, seconds and the cycle split of one (method, b, k) over its timed calls."""

    def __init__(self) -> None:
        self.calls = self.tokens = self.cycles = self.mismatches = self.accepted = 0
        self.row_cycles = 0
        self.total_s = self.prefill_s = self.draft_s = self.verify_s = 0.0
        self.ks_used: list[int] = []

    def add(self, r: BatchResult, refs: list[list[int]] | None) -> None:
        self.calls += 1
        self.tokens += r.generated
        self.cycles += r.cycles
        self.total_s += r.total_s
        self.prefill_s += r.prefill_s
        self.draft_s += r.draft_s
        self.verify_s += r.verify_s
        self.accepted += sum(sum(a) for a in r.accept_lengths)
        self.row_cycles += sum(len(a) for a in r.accept_lengths)
        self.ks_used += list(getattr(r, "num_draft_tokens", []))
        if refs is not None:
            self.mismatches += sum(o != ref for o, ref in zip(r.tokens, refs, strict=True))

    def row(self) -> dict[str, Any]:
        """tokens/s over the batch, acceptance length, ms per cycle and the cycle split (shares of
        the time after the prefill); None where nothing was measured."""
        cyc = self.total_s - self.prefill_s
        book = cyc - self.draft_s - self.verify_s

        def share(x: float) -> float | None:
            return x / cyc if cyc > 0 else None

        def ms(x: float) -> float | None:
            return 1000 * x / self.cycles if self.cycles else None

        return {
            "tokens_per_s": self.tokens / self.total_s if self.total_s > 0 else None,
            "acceptance_length": self.accepted / self.row_cycles if self.row_cycles else None,
            "ms_per_cycle": 1000 * cyc / self.cycles if self.cycles else None,
            "prefill_share_of_total": self.prefill_s / self.total_s if self.total_s > 0 else None,
            "draft_share": share(self.draft_s),
            "verify_share": share(self.verify_s),
            "bookkeeping_share": share(book),
            "draft_ms_per_cycle": ms(self.draft_s),
            "verify_ms_per_cycle": ms(self.verify_s),
            "bookkeeping_ms_per_cycle": ms(book),
            "calls": self.calls,
            "tokens": self.tokens,
            "seconds": self.total_s,
            "mismatches": self.mismatches,
            "mean_k": statistics.fmean(self.ks_used) if self.ks_used else None,
        }


def chain(k: int) -> TreeShape:
    """k verified tokens per row: the root and a chain of k - 1 oracle proposals."""
    return TreeShape(depth=k - 1, topk=1, num_draft_tokens=k)


def random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``n`` prompts of random ids, lengths spread over [3/4 length, length] (ragged rows)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, 3 * length // 4), length + 1, (n,), generator=gen)
    return [torch.randint(0, vocab, (int(m),), generator=gen).tolist() for m in lengths]


class GridClock:
    """The decode check's budget: each cell gets an equal share of what is left."""

    def __init__(self, deadline: float, cells: int) -> None:
        self.deadline, self.left = deadline, cells

    def cell_budget(self) -> float:
        """Seconds for the next cell (0 when the budget is spent); counts the cell."""
        remaining = self.deadline - time.perf_counter()
        share = remaining / max(self.left, 1)
        self.left -= 1
        return max(share, 0.0)


def timed_calls(
    call: Callable[[], BatchResult],
    refs: list[list[int]] | None,
    budget_s: float,
    max_calls: int = MAX_CALLS,
) -> Cell:
    """Calls of ``call`` (each a full decode) until ``budget_s`` is spent or ``max_calls`` are
    made, at least one."""
    cell = Cell()
    t0 = time.perf_counter()
    while cell.calls < max_calls:
        cell.add(call(), refs)
        spent = time.perf_counter() - t0
        if spent + spent / cell.calls > budget_s:  # the next call would overrun
            break
    return cell


def _snap(st: StepStats) -> StepStats:
    return replace(st, fallbacks=dict(st.fallbacks))


def _prep(before: StepStats, warm: StepStats, end: StepStats) -> dict[str, Any]:
    """What a cell's steps cost to prepare in its untimed first call (``before`` -> ``warm``:
    graphs captured, dynamo graphs compiled, their seconds, outside the timed figures) and what
    went wrong over the cell: capture fallbacks (with why), step shapes first met inside a
    cycle (``late``), captures and compiles of the timed calls (``warm`` -> ``end``); all three
    must be 0."""
    new = {k: v for k, v in end.fallbacks.items() if k not in before.fallbacks}
    return {
        "captures": warm.captures - before.captures,
        "capture_s": warm.capture_s - before.capture_s,
        "compiles": warm.compiles - before.compiles,
        "compile_s": warm.compile_s - before.compile_s,
        "fallbacks": len(new),
        "fallback_reasons": new,
        "late": end.late - before.late,
        "timed_captures": end.captures - warm.captures,
        "timed_compiles": end.compiles - warm.compiles,
    }


def measure_cell(
    steps: Steps,
    first: Callable[[], BatchResult],
    then: Callable[[BatchResult], Callable[[], BatchResult]],
    refs: list[list[int]] | None,
    budget_s: float,
    max_calls: int,
    *,
    first_counts: bool = True,
) -> tuple[dict[str, Any], BatchResult]:
    """One cell on its persistent ``steps`` (KV caches reserved before): an untimed first call,
    which prepares the steps (compiles, captures), then timed calls of ``then(first's result)``
    until ``budget_s`` is spent (the first call's seconds counted in it when ``first_counts``),
    their outputs checked against ``refs`` (None: the first call's). The cell's row with its
    preparation (:func:`_prep`), and the first call's result."""
    t0 = time.perf_counter()
    before = _snap(steps.stats)
    r0 = first()
    warm = _snap(steps.stats)
    left = budget_s - (time.perf_counter() - t0 if first_counts else 0.0)
    cell = timed_calls(then(r0), r0.tokens if refs is None else refs, left, max_calls)
    return cell.row() | _prep(before, warm, steps.stats), r0


def again(call: Callable[[], BatchResult]) -> Callable[[BatchResult], Callable[[], BatchResult]]:
    """A cell's ``then`` when its timed calls repeat its first call."""
    return lambda _: call


def faults(result: dict[str, Any], name: str, row: dict[str, Any], mode: str) -> None:
    """Record in ``errors`` what a cell's steps did wrong (see :func:`_prep`)."""
    said = []
    if row["late"]:
        said.append(f"{row['late']} step shapes first met inside a cycle (not prepared)")
    if row["timed_captures"] or row["timed_compiles"]:
        said.append(
            f"the timed calls captured {row['timed_captures']} and compiled "
            f"{row['timed_compiles']} graphs (inside the timed figures)"
        )
    if row["fallbacks"]:
        said.append(f"{row['fallbacks']} step shapes ran eagerly: {row['fallback_reasons']}")
    if mode == "compile" and not row.get("from_grid") and row["compiles"] == 0:
        said.append("compiled nothing (torch.compile ran the steps eagerly?)")
    if said:
        result["errors"].append(f"{name}: " + "; ".join(said))


def release(steps_mode: str, dev: torch.device) -> None:
    """After a cell's (or a group's) :class:`Steps` is dropped: clear dynamo's cache entries of
    its compiled steps, then free the device memory."""
    if steps_mode == "compile":
        torch._dynamo.reset()
    free(dev)


@dataclass
class Run:
    """What every decode call of the check shares."""

    args: argparse.Namespace
    model: Any
    dev: torch.device
    vocab: int
    prompts: list[list[int]]

    def steps(self, mode: str) -> Steps:
        """A new :class:`Steps` in ``mode`` (its draft set by each call)."""
        backend, capture = self.args.compile_backend, not self.args.no_capture
        return Steps(self.model, None, mode, backend=backend, capture=capture)

    def ar(self, batch: list[list[int]], steps: Steps) -> BatchResult:
        n = self.args.max_new_tokens
        return ar_generate(self.model, batch, max_new_tokens=n, eos_ids=frozenset(), steps=steps)

    def oracle(
        self,
        batch: list[list[int]],
        known: list[list[int]],
        tree: TreeShape | Callable[[int], TreeShape],
        steps: Steps,
    ) -> BatchResult:
        """The oracle knowing ``known`` (a new one per call: it drops rows as they finish)."""
        seqs = [p + r for p, r in zip(batch, known, strict=True)]
        a = self.args
        oracle = OracleDraft(seqs, self.vocab, accept=a.oracle_accept, seed=a.seed).to(self.dev)
        return self.drafted(oracle, batch, tree, steps)

    def drafted(
        self,
        draft: Any,
        batch: list[list[int]],
        tree: TreeShape | Callable[[int], TreeShape],
        steps: Steps,
    ) -> BatchResult:
        n = self.args.max_new_tokens
        return generate(
            self.model, draft, batch, max_new_tokens=n, shape=tree, eos_ids=frozenset(),
            steps=steps,
        )  # fmt: skip


def fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def prep_s(r: dict[str, Any]) -> float | None:
    """Seconds capturing and compiling a cell's steps (outside its timed figures)."""
    if "capture_s" not in r:
        return None
    return float(r["capture_s"] + r["compile_s"])
