"""The ``modes`` section of the decode check (``benchmarks/gpu_check.py decode``): each step mode
of ``--modes`` (none, graphs, compile) at b = 1 and max(b) (compile: b = 1 only), the AR loop,
the oracle's chain at k = :data:`MODE_K` and a trained-shape draft (:func:`trained_draft`), with
tokens/s over the same mode's AR loop and over eager, in the budget the main grid leaves it."""

from __future__ import annotations

import argparse
import functools
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from benchmarks.gpu.cells import Run, again, chain, faults, fmt, measure_cell, prep_s, release
from benchmarks.gpu.common import T0, write
from workloads.engine.tree_decode import BatchResult, TreeShape, reserve
from workloads.models.draft import DraftArch, DraftModel

__all__ = [
    "COMPILE_FLOOR_S",
    "COMPILE_RESERVE_S",
    "MODES",
    "MODE_CELL_S",
    "MODE_K",
    "TRAINED_TREE",
    "modes_section",
    "report_modes",
    "run_modes",
    "trained_draft",
]


MODES = ("none", "graphs", "compile")
"""the engine's step modes the ``modes`` section measures, in this order (``--modes``)"""

MODE_K = 8
"""k of the oracle's chain in the ``modes`` section (7 proposals per cycle)"""

TRAINED_TREE = TreeShape(depth=4, topk=4, num_draft_tokens=8)
"""the trained-shape draft's tree in the ``modes`` section: EAGLE-2's small tree (depth 4,
topk 4), 8 verified tokens (the oracle's k, so both verify the same [b, 8] shape)"""

MODE_CELL_S = {True: 2.0, False: 5.0}
"""timed seconds of one ``modes`` cell at most (tiny, GPU); its untimed first call apart"""

COMPILE_FLOOR_S = {
    (True, True): 90.0, (True, False): 10.0, (False, True): 150.0, (False, False): 60.0,
}  # fmt: skip
"""(tiny, inductor) -> seconds that must be left to start the ``compile`` cells"""

COMPILE_RESERVE_S = {
    (True, True): 120.0, (True, False): 20.0, (False, True): 180.0, (False, False): 90.0,
}  # fmt: skip
"""(tiny, inductor) -> seconds the main grid leaves for the ``compile`` cells (three at b = 1:
the AR loop's verify, the [1, 8] verify and the trained-shape draft's two steps)"""


def _float_buffers(draft: DraftModel) -> dict[str, str]:
    """The draft's float buffers other than the target's frozen weights: name -> dtype."""
    return {
        name: str(buf.dtype)
        for name, buf in draft.named_buffers()
        if buf.is_floating_point() and name not in DraftModel.FROZEN_WEIGHTS
    }


def _buffer_fault(buffers: dict[str, str], dtype: torch.dtype) -> str | None:
    """A message if a buffer of :func:`_float_buffers` is not float32 after the cast."""
    bad = {k: v for k, v in buffers.items() if v != str(torch.float32)}
    if not bad and buffers:
        return None
    return (
        f"trained-shape draft: buffers not float32 after DraftModel.cast_to({dtype}): "
        f"{bad or 'none found (no RoPE table?)'} (a bf16 inv_freq rounds the rotation angles)"
    )


def trained_draft(
    model: Any, dev: torch.device, seed: int
) -> tuple[DraftModel, dict[str, Any], str | None]:
    """A seeded random-weight 1-layer draft of the target's shape (embedding and LM head: the
    target's), cast for the target with :meth:`DraftModel.cast_to`; what the JSON says of it,
    and a fault if its float32 buffers did not stay float32."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    torch.manual_seed(seed)
    arch = DraftArch.from_target(model.config, layers=1, output_norm=True)
    with dev:  # its layer is allocated and initialised on the device
        draft = DraftModel(arch, embed_weight=emb, lm_head_weight=head, compute_dtype=model.dtype)
    draft.cast_to(model.dtype, device=dev)
    draft.requires_grad_(False)
    draft.eval()
    buffers = _float_buffers(draft)
    fault = _buffer_fault(buffers, model.dtype)
    info = {
        "arch": asdict(arch),
        "trainable_params": draft.num_parameters(),
        "param_dtype": str(next(draft.parameters()).dtype),
        "frozen_weights_dtype": str(draft.compute_dtype),
        "cast": f"DraftModel.cast_to({model.dtype}, device={dev})",
        "fp32_buffers": buffers,
        "fp32_buffers_ok": fault is None,
        "note": (
            "random weights, seeded: its acceptance length is meaningless (about 1); it "
            "measures the draft's cost per cycle and its dtype path beside a "
            f"{str(model.dtype).removeprefix('torch.')} target. Mismatches against the AR "
            "references are counted, not failed (near-ties may flip in low precision)"
        ),
    }
    return draft, info, fault


def _share(deadline: float, reserve: float, cells: int, cap: float) -> float:
    """Timed seconds for the next of ``cells`` cells: an equal share of what is left before
    ``deadline`` after ``reserve``, at most ``cap`` and (while time is left) at least a quarter
    of it; 0 when the budget is spent."""
    left = deadline - time.perf_counter()
    if left <= 1.0:
        return 0.0
    return max(min(cap, (left - reserve) / max(cells, 1)), min(cap / 4, left / 2))


def _mode_groups(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(mode, b) of the ``modes`` section: b = 1 and max(--batches) (compile: b = 1 only)."""
    bmax = max(args.batches)
    return [
        (m, b)
        for m in MODES
        if m in args.modes
        for b in ((1,) if m == "compile" else sorted({1, bmax}))
    ]


def _reused(args: argparse.Namespace, mode: str, method: str) -> bool:
    """Whether a ``modes`` cell is the main grid's (same mode, b, k): measured once."""
    if mode != args.compile:
        return False
    return method == "ar" or (method == "oracle" and MODE_K in args.ks)


def _plain_cells(args: argparse.Namespace, groups: list[tuple[str, int]], draft: bool) -> int:
    """Cells of the ``none`` and ``graphs`` groups the ``modes`` section measures itself."""
    methods = ("ar", "oracle", "trained") if draft else ("ar", "oracle")
    return sum(
        not _reused(args, m, method) for m, _ in groups if m != "compile" for method in methods
    )


def modes_section(args: argparse.Namespace, draft: bool, deadline: float) -> dict[str, Any]:
    """The ``modes`` section before it runs: its groups, settings and ``reserved_s``, the
    seconds the main grid (which runs first) leaves it before ``deadline`` (``draft``: the
    trained-shape draft was made)."""
    groups = _mode_groups(args)
    inductor = args.compile_backend == "inductor"
    plain = _plain_cells(args, groups, draft)
    compiles = any(m == "compile" for m, _ in groups)
    modes_s = plain * MODE_CELL_S[args.tiny] * 1.3
    modes_s += COMPILE_RESERVE_S[args.tiny, inductor] if compiles else 0.0
    modes_s = min(modes_s, 0.6 * (deadline - time.perf_counter()))
    return {
        "modes": [m for m in MODES if m in args.modes],
        "groups": [{"mode": m, "b": b} for m, b in groups],
        "oracle_tree": asdict(chain(MODE_K)),
        "trained_tree": asdict(TRAINED_TREE),
        "compile_backend": args.compile_backend,
        "graphs_captured": not args.no_capture,
        "reserved_s": modes_s,
        "cell_timed_s_max": MODE_CELL_S[args.tiny],
        "compile_floor_s": COMPILE_FLOOR_S[args.tiny, inductor],
        "note": (
            "per mode and b: the AR loop (its own Steps), the oracle's chain at k = "
            f"{MODE_K} and the trained-shape draft's tree (one Steps for both: the verify is "
            "prepared once, the draft's steps when it is set); ratio_over_ar is over the same "
            "mode's AR loop, ratio_over_none over the same method eager; cells of the main "
            "grid's mode are the grid's own (from_grid)"
        ),
        "by_mode": {},
    }


class _ModeClock:
    """The ``modes`` section's budget: each ``none``/``graphs`` cell an equal share of what is
    left after the ``compile`` cells' reserve (at most :data:`MODE_CELL_S`), and the
    ``compile`` cells started only while their compiles fit (estimated from the AR loop's)."""

    def __init__(
        self, args: argparse.Namespace, deadline: float, groups: list[tuple[str, int]], draft: bool
    ) -> None:
        inductor = args.compile_backend == "inductor"
        self.floor = COMPILE_FLOOR_S[args.tiny, inductor]
        self.reserve = COMPILE_RESERVE_S[args.tiny, inductor]
        self.cap = MODE_CELL_S[args.tiny]
        self.deadline = deadline
        self.plain_left = _plain_cells(args, groups, draft)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def plain(self, compile_later: bool) -> float:
        """Timed seconds of the next ``none``/``graphs`` cell (0: the budget is spent)."""
        self.plain_left -= 1
        keep = self.reserve if compile_later else 0.0
        return _share(self.deadline, keep, self.plain_left + 1, self.cap)

    def compiled(self, method: str, ar_compile_s: float | None) -> tuple[float, str | None]:
        """Timed seconds of the next ``compile`` cell (ar, oracle, trained, in this order) and,
        when it is skipped (0 s), why."""
        est = ar_compile_s if ar_compile_s is not None else self.floor / 3
        need = {"ar": 0.0, "oracle": est, "trained": 0.6 * est}[method]
        after = {"ar": 1.6 * est, "oracle": 0.6 * est, "trained": 0.0}[method]
        left = self.left()
        if method != "ar" and left < need + 1.0:
            why = (
                f"skipped, {left:.0f} s left and its compiles take about {need:.0f} s (the AR "
                f"loop's took {est:.0f} s)"
            )
            return 0.0, why
        return _share(self.deadline - need, after, 1, self.cap), None


def run_modes(
    run: Run,
    draft: DraftModel | None,
    result: dict[str, Any],
    grid_refs: dict[int, list[list[int]]],
    deadline: float,
) -> None:
    """The ``modes`` section, group by group of :func:`_mode_groups` (see :func:`_mode_group`);
    a ``compile`` group is skipped, said in ``errors``, when less than its floor is left."""
    args = run.args
    groups = _mode_groups(args)
    clock = _ModeClock(args, deadline, groups, draft is not None)
    refs_of: dict[tuple[str, int], list[list[int]]] = {}
    for gi, (mode, b) in enumerate(groups):
        tag = f"modes {mode} b={b}"
        result["modes"]["by_mode"].setdefault(mode, {})[str(b)] = {
            "ar": None, "oracle": None, "trained": None,
        }  # fmt: skip
        if mode == "compile" and (left := clock.left()) < clock.floor:
            what = "about a minute per shape of the target" if clock.floor > 100 else "tracing"
            result["errors"].append(
                f"{tag}: skipped, {left:.0f} s of the budget left and the compile cells need "
                f"about {clock.floor:.0f} s (--compile-backend {args.compile_backend}: {what}). "
                f"Fix: --budget-s {args.budget_s + clock.floor - left + 10:.0f}, or fewer "
                "--batches / --ks"
            )
            continue
        compile_later = any(m == "compile" for m, _ in groups[gi + 1 :])
        try:
            _mode_group(run, draft, result, clock, mode, b, compile_later, grid_refs, refs_of)
        except torch.OutOfMemoryError:
            result["errors"].append(f"{tag}: out of memory")
        except Exception as e:  # noqa: BLE001 - recorded in the JSON; the next group runs
            result["errors"].append(f"{tag}: {type(e).__name__}: {e}")
            result["tracebacks"].append(traceback.format_exc())
        release(mode, run.dev)
        _mode_ratios(result["modes"], mode, b)
        result["elapsed_s"] = time.perf_counter() - T0
        write(result, args.out)


def _mode_group(
    run: Run,
    draft: DraftModel | None,
    result: dict[str, Any],
    clock: _ModeClock,
    mode: str,
    b: int,
    compile_later: bool,
    grid_refs: dict[int, list[list[int]]],
    refs_of: dict[tuple[str, int], list[list[int]]],
) -> None:
    """One (mode, b) of the ``modes`` section: the AR loop (its own Steps; its outputs are the
    references), the oracle's chain at k = :data:`MODE_K`, the trained-shape draft's
    :data:`TRAINED_TREE` (one Steps for both drafts, caches reserved for both trees). A cell of
    the main grid's mode, b and k is the grid's (``from_grid``)."""
    args, errors = run.args, result["errors"]
    tag = f"modes {mode} b={b}"
    entry = result["modes"]["by_mode"][mode][str(b)]
    batch = run.prompts[:b]
    longest, n = max(map(len, batch)), args.max_new_tokens

    def share(method: str, ar_compile_s: float | None = None) -> float:
        if mode == "compile":
            got, why = clock.compiled(method, ar_compile_s)
        else:
            got = clock.plain(compile_later)
            why = None if got > 0 else "not measured, the budget was spent"
        if why:
            errors.append(f"{tag} {method}: {why}")
        return got

    if _reused(args, mode, "ar") and b in grid_refs:
        entry["ar"] = {**_grid_row(result, b)["ar"], "from_grid": True}
        refs = grid_refs[b]
    else:
        if (budget := share("ar")) <= 0:
            return
        ar_steps = run.steps(mode)
        ar_steps.caches(b, longest + n, 0)
        call = functools.partial(run.ar, batch, ar_steps)
        entry["ar"], r0 = measure_cell(
            ar_steps, call, again(call), None, budget, args.calls, first_counts=False
        )
        del ar_steps, call
        release(mode, run.dev)
        refs = r0.tokens
        faults(result, f"{tag} ar", entry["ar"], mode)
    refs_of[mode, b] = refs
    none_refs = refs_of.get(("none", b))
    if mode != "none" and none_refs is not None:
        entry["ar"]["mismatches_vs_none"] = sum(
            o != r for o, r in zip(refs, none_refs, strict=True)
        )
    ar_compile_s = entry["ar"]["compile_s"]
    steps = run.steps(mode)
    for tree in (chain(MODE_K), TRAINED_TREE):  # both drafts' calls reuse these caches
        reserve(steps, b, longest, n, tree, vocab=run.vocab)
    grid_k = _grid_row(result, b)["spec"].get(str(MODE_K)) if b in grid_refs else None
    if _reused(args, mode, "oracle") and grid_k is not None:
        entry["oracle"] = {**grid_k, "from_grid": True}
    elif (budget := share("oracle", ar_compile_s)) > 0:

        def known(k: list[list[int]]) -> Callable[[], BatchResult]:
            return functools.partial(run.oracle, batch, k, chain(MODE_K), steps)

        entry["oracle"], _ = measure_cell(
            steps, known(refs), lambda r: known(r.tokens), refs, budget, args.calls,
            first_counts=False,
        )  # fmt: skip
        faults(result, f"{tag} oracle", entry["oracle"], mode)
    elif mode == "compile":  # the trained draft's cell would compile the verify too
        if draft is not None:
            errors.append(f"{tag} trained: skipped with the oracle's cell")
        return
    if draft is not None and (budget := share("trained", ar_compile_s)) > 0:
        call = functools.partial(run.drafted, draft, batch, TRAINED_TREE, steps)
        entry["trained"], _ = measure_cell(
            steps, call, again(call), refs, budget, args.calls, first_counts=False
        )
        faults(result, f"{tag} trained", entry["trained"], mode)


def _grid_row(result: dict[str, Any], b: int) -> dict[str, Any]:
    """The main grid's entry of batch size ``b``."""
    entry: dict[str, Any] = next(e for e in result["batches"] if e["b"] == b)
    return entry


def _mode_ratios(section: dict[str, Any], mode: str, b: int) -> None:
    """Each cell of a (mode, b) over the same mode's AR loop and over the same method in
    ``none`` at the same b."""
    entry = section["by_mode"][mode][str(b)]
    none = section["by_mode"].get("none", {}).get(str(b), {})
    ar = (entry.get("ar") or {}).get("tokens_per_s")
    for method, row in entry.items():
        if not row:
            continue
        tps = row.get("tokens_per_s")
        row["ratio_over_ar"] = tps / ar if tps and ar else None
        base = (none.get(method) or {}).get("tokens_per_s")
        row["ratio_over_none"] = tps / base if tps and base and mode != "none" else None


def report_modes(result: dict[str, Any]) -> None:
    """The ``modes`` table: per mode, b and method, tokens/s over the same mode's AR loop and
    over eager, and what capturing and compiling cost (seconds outside the timed figures)."""
    section = result.get("modes") or {}
    td = result.get("trained_draft")
    if td:
        print(
            f"trained-shape draft: {td['arch']['layers']} layer, params {td['param_dtype']}, "
            f"{td['cast']}; float buffers {td['fp32_buffers']} "
            f"({'float32 kept' if td['fp32_buffers_ok'] else 'NOT float32'})"
        )
    if not section.get("by_mode"):
        return
    tree = section["trained_tree"]
    print(
        f"modes (oracle: a chain, k={MODE_K}; trained: depth {tree['depth']} topk "
        f"{tree['topk']} k={tree['num_draft_tokens']}, random weights; backend "
        f"{section['compile_backend']}; prep s = capture + compile, outside the timers)"
    )
    print(
        f"{'mode':>7} {'b':>3} {'method':>7} {'tok/s':>9} {'x AR':>6} {'x none':>6} {'tau':>5} "
        f"{'ms/cyc':>7} {'draft ms':>8} {'capt':>4} {'comp':>4} {'prep s':>6} {'fb':>3} "
        f"{'late':>4} {'mism':>4}"
    )
    for mode, by_b in section["by_mode"].items():
        for b, entry in by_b.items():
            for method, r in entry.items():
                if not r:
                    continue
                name = method + ("*" if r.get("from_grid") else "")
                print(
                    f"{mode:>7} {b:>3} {name:>7} {fmt(r['tokens_per_s'], '.1f'):>9} "
                    f"{fmt(r.get('ratio_over_ar'), '.2f'):>6} "
                    f"{fmt(r.get('ratio_over_none'), '.2f'):>6} "
                    f"{fmt(r['acceptance_length'], '.2f'):>5} "
                    f"{fmt(r['ms_per_cycle'], '.1f'):>7} "
                    f"{fmt(r.get('draft_ms_per_cycle'), '.2f'):>8} {r['captures']:>4} "
                    f"{r['compiles']:>4} {fmt(prep_s(r), '.1f'):>6} {r['fallbacks']:>3} "
                    f"{r['late']:>4} {r['mismatches']:>4}"
                )
    print("  (* the main grid's cell)")
