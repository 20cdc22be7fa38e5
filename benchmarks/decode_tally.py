"""How :mod:`benchmarks.decode_bench` counts a decoding method: :class:`Tally` (tokens,
seconds, the cycle split, what compiling cost, outputs against HF greedy) and :func:`print_rows`
(one part's table).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from workloads.engine.steps import Steps
from workloads.engine.tree_decode import BatchResult

__all__ = ["Tally", "print_rows"]


class Tally:
    """Generated tokens and seconds of one method, plus its cycle split and what compiling its
    steps cost (outside the timers)."""

    def __init__(self) -> None:
        self.tokens = self.cycles = 0
        self.seconds = self.draft_s = self.verify_s = self.book_s = self.prefill_s = 0.0
        self.accepted = self.row_cycles = 0
        self.mismatches = 0
        self.compile_s = self.warmup_s = 0.0
        self.compiles = self.late = self.recompiles = 0

    def add(self, r: BatchResult, refs: list[list[int]] | None = None) -> None:
        self.tokens += r.generated
        self.seconds += r.total_s
        self.cycles += r.cycles
        self.draft_s += r.draft_s
        self.verify_s += r.verify_s
        self.book_s += r.bookkeeping_s
        self.prefill_s += r.prefill_s
        self.accepted += sum(sum(a) for a in r.accept_lengths)
        self.row_cycles += sum(len(a) for a in r.accept_lengths)
        if refs is not None:
            self.mismatches += sum(o != ref for o, ref in zip(r.tokens, refs, strict=True))

    def call(
        self,
        refs: list[list[int]] | None,
        timed: bool,
        fn: Callable[..., BatchResult],
        *args: Any,
        steps: Steps,
        **kw: Any,
    ) -> BatchResult:
        """``fn(*args, steps=steps, **kw)``: count what it compiled and any late shape, and,
        when ``timed``, its tokens and seconds (an untimed warm-up: its wall seconds, in
        ``warmup_s``). Outputs are checked against ``refs``."""
        st = steps.stats
        before = (st.compile_s, st.compiles, st.late)
        t0 = time.perf_counter()
        r = fn(*args, steps=steps, **kw)
        wall = time.perf_counter() - t0
        self.compile_s += st.compile_s - before[0]
        self.compiles += st.compiles - before[1]
        self.late += st.late - before[2]
        if timed:  # after the warm-up every shape is compiled: nothing more to compile
            self.recompiles += st.compiles - before[1]
            self.add(r, refs)
            return r
        self.warmup_s += wall
        if refs is not None:  # a warm-up's output is checked too
            pairs = zip(r.tokens, refs, strict=True)
            self.mismatches += sum(o != ref[: len(o)] for o, ref in pairs)
        return r

    def row(self) -> dict[str, float]:
        """tokens/s, acceptance length, ms per cycle, the cycle split, mismatches (NaN for what
        nothing was measured for) and compiling: seconds, graphs, late shapes."""
        cyc = self.seconds - self.prefill_s
        nan = math.nan
        return {
            "tokens_per_s": self.tokens / self.seconds if self.seconds else nan,
            "acceptance_length": self.accepted / self.row_cycles if self.row_cycles else nan,
            "ms_per_cycle": 1000 * cyc / self.cycles if self.cycles else nan,
            "draft_share": self.draft_s / cyc if cyc else nan,
            "verify_share": self.verify_s / cyc if cyc else nan,
            "bookkeeping_share": self.book_s / cyc if cyc else nan,
            "draft_ms_per_cycle": 1000 * self.draft_s / self.cycles if self.cycles else nan,
            "verify_ms_per_cycle": 1000 * self.verify_s / self.cycles if self.cycles else nan,
            "bookkeeping_ms_per_cycle": 1000 * self.book_s / self.cycles if self.cycles else nan,
            "prefill_s": self.prefill_s,
            "mismatches": float(self.mismatches),
            "compile_s": self.compile_s,
            "compiles": float(self.compiles),
            "late": float(self.late),
            "compiles_after_warmup": float(self.recompiles),
            "warmup_s": self.warmup_s,
        }


def print_rows(
    title: str, rows: dict[str, dict[str, float]], base: str, base2: str | None = None
) -> None:
    print(f"\n{title}")
    second = f"{'  x ' + base2:>22}" if base2 else ""
    print(
        f"{'method':<25}{'tok/s':>8}{'  x ' + base:>20}{second}{'tau':>6}{'ms/cyc':>8}"
        f"{'draft':>6}{'verify':>7}{'book':>6}{'mism':>5}{'compile s':>10}{'warm-up s':>10}"
        f"{'late':>5}"
    )
    ref = rows[base]["tokens_per_s"]
    ref2 = rows[base2]["tokens_per_s"] if base2 else math.nan
    for name, r in rows.items():
        tps = r["tokens_per_s"]
        print(
            f"{name:<25}{tps:>8.2f}{tps / ref:>20.2f}"
            + (f"{tps / ref2:>22.2f}" if base2 else "")
            + f"{r['acceptance_length']:>6.2f}{r['ms_per_cycle']:>8.1f}{r['draft_share']:>6.0%}"
            f"{r['verify_share']:>7.0%}{r['bookkeeping_share']:>6.0%}{r['mismatches']:>5.0f}"
            f"{r.get('compile_s', math.nan):>10.1f}{r.get('warmup_s', math.nan):>10.1f}"
            f"{r.get('late', math.nan):>5.0f}"
        )
