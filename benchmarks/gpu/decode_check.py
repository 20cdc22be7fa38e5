"""The ``decode`` check of ``benchmarks/gpu_check.py``: one JSON and a printed table.

It measures the decoding engine on a random-weight target (``--shape``, default llama-3-8b,
bf16) with the oracle draft (:class:`~workloads.engine.oracle_draft.OracleDraft`, each proposal
kept with probability ``--oracle-accept``, default 0.8), temperature 0, no EOS:

- HF ``generate`` greedy at b = 1;
- the engine's AR loop and speculative decoding (a chain of k - 1 proposals) in tokens/s over
  b in ``--batches`` (1, 8, 32, 64) x k in ``--ks`` (2, 4, ..., 64), with the per-cycle split
  (draft, verify, bookkeeping) and the acceptance length, in the steps of ``--compile`` (none);
- per b: the measured best k beside the roofline's k_opt for the shape on ``--hardware``
  (:func:`workloads.roofline.k_opt`, at the mean prefix the rows decode over), and ``auto`` (k
  re-chosen each cycle by that k_opt, as ``k_law: roofline``) against the best fixed k;
- ``modes`` (:mod:`benchmarks.gpu.modes`): each step mode of ``--modes`` at b = 1 and max(b)
  (compile: b = 1 only): the AR loop, the oracle at k = 8 and a random-weight trained-shape
  draft (depth 4, topk 4, k 8), tokens/s over the same mode's AR loop and over eager;
  ``trained_draft`` says whether its float32 buffers stayed float32 after the cast;
- ``goals``: oracle b=1 >= 4x HF, bookkeeping <= 10% of a cycle at b=64, best k within one
  doubling of k_opt for b >= 8, and no step prepared inside a timer (no late shape, capture or
  compile in a timed call).

Each cell's first call is untimed (it prepares the steps: ``capture_s``, ``compile_s``); timed
calls follow until the cell's share of ``--budget-s`` (450 s) is spent. The main grid runs
first and leaves the ``modes`` section its reserve; compile cells are skipped with a note when
less than 150 s remain. ``--attn`` (sdpa, eager) passes to the model, ``--compile-backend``
(inductor) to ``torch.compile``, ``--no-capture`` (tests) runs graphs on the CPU without
capturing. Without CUDA a tiny shape runs on the CPU (b 1, 4; k 2, 4, 8; budget 180 s). The
cells' machinery is :mod:`benchmarks.gpu.cells`.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from benchmarks.gpu.cells import (
    MAX_CALLS,
    Cell,
    GridClock,
    Run,
    again,
    chain,
    faults,
    fmt,
    measure_cell,
    prep_s,
    random_prompts,
    release,
)
from benchmarks.gpu.common import T0, TINY, header, target_config, write
from benchmarks.gpu.modes import MODES, modes_section, report_modes, run_modes, trained_draft
from workloads.engine.hf_baseline import hf_generate
from workloads.engine.tree_decode import BatchResult, TreeShape, reserve
from workloads.models.draft import DraftModel
from workloads.models.target import random_config, random_model
from workloads.roofline.costs import k_opt
from workloads.roofline.hardware import (
    LOCAL_CPU,
    HardwareProfile,
    get_profile,
    measure_local_cpu,
    profile_names,
)
from workloads.roofline.models import ModelShape, load_model_shape

__all__ = ["add_arguments", "check_args", "decode", "report"]


DECODE_SHAPE = "llama-3-8b"
"""the target shape of the decode check on a GPU"""

DECODE_BATCHES, DECODE_KS = (1, 8, 32, 64), (2, 4, 8, 16, 32, 64)
"""batch sizes b and verified tokens k (a chain of k - 1 drafted tokens) measured on a GPU"""

TINY_BATCHES, TINY_KS = (1, 4), (2, 4, 8)
"""the same on the CPU stand-in"""


def _tiny_shape() -> ModelShape:
    """The roofline sizes of :data:`TINY` (see :func:`target_config`)."""
    return ModelShape(
        name=TINY, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, mlp_inner=128,
        vocab=4096,
    )  # fmt: skip


def _k_law(shape: ModelShape, hw: HardwareProfile, s: int, ks: list[int]) -> Callable[[int], int]:
    """b -> the roofline's k_opt(b) at prefix ``s``, clamped to [2, max(ks)], cached per b
    (``decode.num_draft_tokens: auto`` with ``k_law: roofline``)."""
    cache: dict[int, int] = {}

    def law(b: int) -> int:
        if b not in cache:
            k = k_opt(shape, hw, b, s, k_max=max(ks)).k
            cache[b] = min(max(k, 2), max(ks))
        return cache[b]

    return law


def _decode_hardware(args: argparse.Namespace, dev: torch.device, dtype: str) -> HardwareProfile:
    """``--hardware``: a named profile, or ``auto``: the datasheet profile of this GPU (bf16),
    this CPU measured (1 s) on a CPU. Raises ``ValueError`` for an unknown GPU with ``auto``."""
    if args.hardware != "auto":
        return get_profile(args.hardware, dtype=dtype, threads=args.threads)
    if dev.type == "cpu":
        return measure_local_cpu(dtype=dtype, threads=args.threads, seconds=1.0)
    name = torch.cuda.get_device_name(dev).upper()
    for key in ("H200", "H100", "H800", "A100"):
        if key in name:
            return get_profile(key.lower(), dtype=dtype)
    raise ValueError(f"no datasheet profile for {name}. Fix: --hardware h200 (or another)")


def decode(args: argparse.Namespace) -> dict[str, Any]:
    """The decode check: HF ``generate`` at b=1, the engine's AR loop and the oracle at each
    (b, k), ``auto`` k per b, then the ``modes`` section (none / graphs / compile, with the
    oracle and a trained-shape bf16 draft); the JSON-able result (also written after each
    batch size and each mode's group)."""
    deadline = T0 + args.budget_s - 5.0  # kept for the report
    dev = torch.device(args.device)
    if dev.type == "cpu":
        torch.set_num_threads(args.threads)
    # 1. the target (and the roofline's hardware); a failure ends the check, said in the JSON
    result = _start(args, dev)
    write(result, args.out)
    config = target_config(args.shape)
    try:
        model = random_model(config, dtype=getattr(torch, args.dtype), device=dev, seed=args.seed)
        model.requires_grad_(False)
        if args.attn != "sdpa":
            model.set_attn_implementation(args.attn)
        model.generation_config.eos_token_id = None  # no row stops early
        hw = _decode_hardware(args, dev, args.dtype)
    except Exception as e:  # noqa: BLE001 - recorded in the JSON, which says what failed
        result["errors"].append(f"set-up: {type(e).__name__}: {e}")
        result["tracebacks"].append(traceback.format_exc())
        write(result, args.out)
        return result
    # 2. the trained-shape draft of the modes section, the roofline's k_opt, the prompts
    draft = _modes_draft(args, model, dev, result)
    vocab = int(config.vocab_size)
    law = _roofline(args, hw, vocab, result)
    prompts = random_prompts(max(args.batches), args.prompt_len, vocab, args.seed)
    run = Run(args, model, dev, vocab, prompts)
    # 3. the main grid in what the modes section leaves it: HF generate, then b by b
    result["modes"] = modes_section(args, draft is not None, deadline)
    modes_s = result["modes"]["reserved_s"]
    clock = GridClock(deadline - modes_s, 1 + len(args.batches) * (len(args.ks) + 2))
    hf_refs = _hf_generate(run, clock.cell_budget(), result)
    grid_refs: dict[int, list[list[int]]] = {}
    for b in args.batches:
        if not _grid_batch(run, b, clock, law, hf_refs, grid_refs, result):
            continue
        result["elapsed_s"] = time.perf_counter() - T0
        write(result, args.out)
    # 4. the modes section, then the goals read off the result
    run_modes(run, draft, result, grid_refs, deadline)
    result["goals"] = _goals(result)
    result["elapsed_s"] = time.perf_counter() - T0
    write(result, args.out)
    return result


def _start(args: argparse.Namespace, dev: torch.device) -> dict[str, Any]:
    """The decode check's JSON before anything is measured."""
    return {
        **header("decode", dev, args),
        "note": None
        if dev.type == "cuda"
        else "a CPU stand-in (tiny shape): the GPU numbers are pending a run on a GPU",
        "method": (
            "random-weight target, temperature 0, no EOS (every row decodes max_new_tokens). "
            "Oracle draft: a chain of k-1 proposals per cycle (so k-1 draft steps, where the "
            "roofline counts 5), each kept with probability oracle_accept, else a wrong token; "
            "it knows the continuation from a first, untimed call of the same cell (so that "
            "rounding differences between batched and one-token forwards do not turn the "
            "oracle wrong). Each cell keeps one workloads.engine.steps.Steps over all its calls "
            "(the AR loop one per b; in the modes section the oracle and the trained-shape draft "
            "share one per mode and b), its KV caches reserved before the first call: under "
            "graphs or compile every step shape is captured or compiled in the first call's "
            "preparation, so capture_s and compile_s (per cell) are outside the timed figures, "
            "and the timed calls capture and compile nothing (timed_captures, timed_compiles "
            "and late must be 0). tokens/s = generated tokens of the batch / wall seconds of "
            "the whole call (prefill included); shares are of the time after the prefill."
        ),
        "shape": args.shape,
        "batches": [],
        "errors": [],
        "tracebacks": [],
    }


def _modes_draft(
    args: argparse.Namespace, model: Any, dev: torch.device, result: dict[str, Any]
) -> DraftModel | None:
    """The modes section's trained-shape draft (:func:`benchmarks.gpu.modes.trained_draft`),
    said in ``trained_draft``; None without ``--modes`` or when it cannot be made (said in
    ``errors``)."""
    draft: DraftModel | None = None
    if args.modes:
        try:
            draft, result["trained_draft"], fault = trained_draft(model, dev, args.seed)
            if fault:
                result["errors"].append(fault)
        except Exception as e:  # noqa: BLE001 - recorded; the modes run without it
            result["errors"].append(f"trained-shape draft: {type(e).__name__}: {e}")
            result["tracebacks"].append(traceback.format_exc())
    return draft


def _roofline(
    args: argparse.Namespace, hw: HardwareProfile, vocab: int, result: dict[str, Any]
) -> Callable[[int], int]:
    """The ``auto`` k law (:func:`_k_law`) at the mean prefix the rows decode over; the shape,
    hardware and k_opt per b it rests on go into ``result``."""
    shape = _tiny_shape() if args.shape == TINY else load_model_shape(args.shape)
    s = (3 * args.prompt_len // 4 + args.prompt_len) // 2 + args.max_new_tokens // 2
    law = _k_law(shape, hw, s, args.ks)
    result["config"] = {"hidden": shape.hidden, "layers": shape.layers, "vocab": vocab}
    result["hardware"] = {"name": hw.name, "i_crit": hw.i_crit, "source": hw.source}
    result["roofline_prefix_s"] = s
    result["roofline_k_opt"] = {
        str(b): asdict(k_opt(shape, hw, b, s, k_max=max(args.ks))) for b in args.batches
    }
    return law


def _hf_generate(run: Run, budget: float, result: dict[str, Any]) -> list[list[int]]:
    """HF ``generate`` at b=1 (the first prompts in turn, one warm-up) for ``budget`` seconds,
    in ``hf_generate_b1``; its outputs."""
    model, prompts, n = run.model, run.prompts, run.args.max_new_tokens
    hf, hf_refs = Cell(), []
    t0 = time.perf_counter()
    try:
        hf_generate(model, prompts[0][:8], 2)
        for p in prompts:
            toks, sec = hf_generate(model, p, n)
            hf_refs.append(toks)
            hf.calls, hf.tokens = hf.calls + 1, hf.tokens + len(toks)
            hf.total_s += sec
            if time.perf_counter() - t0 + sec > budget:
                break
    except Exception as e:  # noqa: BLE001 - recorded in the JSON; the engine still runs
        result["errors"].append(f"HF generate: {type(e).__name__}: {e}")
        result["tracebacks"].append(traceback.format_exc())
    result["hf_generate_b1"] = hf.row() | {"mismatches": None}
    return hf_refs


def _grid_batch(
    run: Run,
    b: int,
    clock: GridClock,
    law: Callable[[int], int],
    hf_refs: list[list[int]],
    grid_refs: dict[int, list[list[int]]],
    result: dict[str, Any],
) -> bool:
    """Batch size ``b`` of the main grid: the AR loop (its outputs, the references, go into
    ``grid_refs``), then the oracle at each k and ``auto`` (:func:`_grid_k`), summarised;
    False when the budget was spent before it (said in ``errors``)."""
    args, dev = run.args, run.dev
    mode = args.compile
    batch = run.prompts[:b]
    longest, n = max(map(len, batch)), args.max_new_tokens
    entry: dict[str, Any] = {"b": b, "ar": None, "spec": {}, "auto": None}
    result["batches"].append(entry)
    budget = clock.cell_budget()
    if budget <= 0:
        clock.left -= len(args.ks) + 1
        result["errors"].append(f"b={b}: not measured, the budget was spent")
        return False
    try:
        ar_steps = run.steps(mode)
        ar_steps.caches(b, longest + n, 0)  # the AR loop stages one slot a step
        call = functools.partial(run.ar, batch, ar_steps)
        entry["ar"], r0 = measure_cell(ar_steps, call, again(call), None, budget, args.calls)
        del ar_steps, call
        release(mode, dev)
        refs = grid_refs[b] = r0.tokens  # the first call's outputs: the references
        entry["ar"]["ratio_over_ar"] = 1.0
        faults(result, f"b={b} AR", entry["ar"], mode)
        if b == 1:
            entry["ar"]["mismatches_vs_hf"] = sum(
                o != r for o, r in zip(refs, hf_refs[:1], strict=False)
            )
        for k in [*args.ks, None]:
            _grid_k(run, batch, refs, k, law, clock, entry, result)
    except Exception as e:  # noqa: BLE001 - recorded in the JSON; the next b runs
        result["errors"].append(f"b={b}: {type(e).__name__}: {e}")
        result["tracebacks"].append(traceback.format_exc())
        release(mode, dev)
    _summarise(entry, result["roofline_k_opt"].get(str(b)))
    return True


def _grid_k(
    run: Run,
    batch: list[list[int]],
    refs: list[list[int]],
    k: int | None,
    law: Callable[[int], int],
    clock: GridClock,
    entry: dict[str, Any],
    result: dict[str, Any],
) -> None:
    """The oracle's cell of one k (None: ``auto``, k re-chosen by ``law`` from the live batch
    size) at this batch size, into ``entry``; out of memory or the budget spent is said in
    ``errors``."""
    b, mode, dev = len(batch), run.args.compile, run.dev
    name = "auto" if k is None else str(k)
    budget = clock.cell_budget()
    if budget <= 0:
        result["errors"].append(f"b={b} k={name}: not measured, the budget was spent")
        return
    tree = chain(k) if k is not None else (lambda rows: chain(law(rows)))
    try:
        row = _grid_cell(run, batch, refs, tree, mode, budget)
    except torch.OutOfMemoryError:
        release(mode, dev)
        result["errors"].append(f"b={b} k={name}: out of memory")
        return
    release(mode, dev)
    faults(result, f"b={b} k={name}", row, mode)
    base = entry["ar"]["tokens_per_s"]
    row["ratio_over_ar"] = row["tokens_per_s"] / base if base else None
    if k is None:
        row["k_at_b"] = law(b)  # fewer rows, as they finish, may take other k
        entry["auto"] = row
    else:
        entry["spec"][name] = row


def _grid_cell(
    run: Run,
    batch: list[list[int]],
    refs: list[list[int]],
    tree: TreeShape | Callable[[int], TreeShape],
    mode: str,
    budget: float,
) -> dict[str, Any]:
    """One (b, k) cell of the main grid on a Steps of its own (dropped on return)."""
    steps = run.steps(mode)
    longest = max(map(len, batch))
    reserve(steps, len(batch), longest, run.args.max_new_tokens, tree, vocab=run.vocab)

    def known(k: list[list[int]]) -> Callable[[], BatchResult]:
        return functools.partial(run.oracle, batch, k, tree, steps)

    row, _ = measure_cell(
        steps, known(refs), lambda r: known(r.tokens), refs, budget, run.args.calls
    )
    return row


def _summarise(entry: dict[str, Any], kopt: dict[str, Any] | None) -> None:
    """Best fixed k of one batch size, beside the roofline's k_opt and ``auto``."""
    measured = {int(k): r["tokens_per_s"] for k, r in entry["spec"].items() if r["tokens_per_s"]}
    if not measured:
        return
    best = max(measured, key=lambda k: measured[k])
    entry["best_k"] = best
    entry["best_tokens_per_s"] = measured[best]
    ar = (entry.get("ar") or {}).get("tokens_per_s")
    entry["best_ratio_over_ar"] = measured[best] / ar if ar else None
    if kopt is not None:
        entry["k_opt"] = kopt["k"]
        # k_opt not reached within the k scanned: no k to compare with (None, not a verdict)
        reached = kopt.get("reached", True)
        within = kopt["k"] / 2 <= best <= 2 * kopt["k"]
        entry["best_k_within_one_doubling"] = within if reached else None
    auto = (entry.get("auto") or {}).get("tokens_per_s")
    entry["auto_over_best"] = auto / measured[best] if auto else None


def _cells(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every measured engine cell (name, row): the main grid's, then the ``modes`` section's
    own (those taken from the grid are not counted twice)."""
    out = []
    for e in result["batches"]:
        rows = [("AR", e["ar"]), *((f"k={k}", r) for k, r in e["spec"].items())]
        out += [(f"b={e['b']} {name}", r) for name, r in [*rows, ("auto", e["auto"])] if r]
    for mode, by_b in (result.get("modes") or {}).get("by_mode", {}).items():
        for b, entry in by_b.items():
            out += [
                (f"modes {mode} b={b} {m}", r)
                for m, r in entry.items()
                if r and not r.get("from_grid")
            ]
    return out


def _goals(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's GPU goals, read off the result (None where not measured), and whether every
    step was prepared outside the timers."""
    by_b = {e["b"]: e for e in result["batches"]}
    hf = (result.get("hf_generate_b1") or {}).get("tokens_per_s")
    b1 = by_b.get(1, {}).get("best_tokens_per_s")
    big = by_b.get(max(by_b)) if by_b else None
    book = None
    if big and big.get("best_k") is not None:
        book = big["spec"][str(big["best_k"])]["bookkeeping_share"]
    within = {str(b): e.get("best_k_within_one_doubling") for b, e in by_b.items() if b >= 8}
    cells = [r for _, r in _cells(result)]
    late = sum(r.get("late", 0) for r in cells)
    timed = sum(r.get("timed_captures", 0) + r.get("timed_compiles", 0) for r in cells)
    return {
        "b1_best_over_hf_generate": b1 / hf if b1 and hf else None,
        "b1_goal": ">= 4",
        f"bookkeeping_share_at_b{max(by_b) if by_b else 0}_best_k": book,
        "bookkeeping_goal": "<= 0.10",
        "best_k_within_one_doubling_of_k_opt": within or "n/a: no b >= 8 measured",
        "steps_prepared_outside_timers": (late == 0 and timed == 0) if cells else None,
        "late_step_shapes": late,
        "timed_captures_and_compiles": timed,
        "capture_fallbacks": sum(r.get("fallbacks", 0) for r in cells),
        "trained_draft_fp32_buffers_kept": (result.get("trained_draft") or {}).get(
            "fp32_buffers_ok"
        ),
    }


def report(result: dict[str, Any]) -> None:
    hw = result.get("hardware", {})
    print(
        f"gpu_check decode on {result['device']} (torch {result['versions']['torch']}, "
        f"transformers {result['versions']['transformers']}); shape {result['shape']}, "
        f"roofline {hw.get('name')} (I_crit {fmt(hw.get('i_crit'), '.0f')} FLOP/byte, "
        f"prefix s={result.get('roofline_prefix_s')}), steps {result['settings']['compile']}"
    )
    hf = result.get("hf_generate_b1") or {}
    print(f"HF generate b=1: {fmt(hf.get('tokens_per_s'), '.1f')} tok/s")
    head = f"{'b':>3} {'method':>10} {'tok/s':>9} {'x AR':>6} {'tau':>5} {'ms/cyc':>7}"
    print(
        head + f" {'draft':>6} {'verify':>6} {'book':>6} {'calls':>5} {'mism':>4} "
        f"{'prep s':>6} {'late':>4}"
    )
    for e in result["batches"]:
        rows = [("AR", e["ar"])] + [(f"k={k}", r) for k, r in e["spec"].items()]
        if e.get("auto"):
            rows.append((f"auto~{fmt(e['auto'].get('mean_k'), '.0f')}", e["auto"]))
        for name, r in rows:
            if not r:
                continue
            print(
                f"{e['b']:>3} {name:>10} {fmt(r['tokens_per_s'], '.1f'):>9} "
                f"{fmt(r.get('ratio_over_ar'), '.2f'):>6} "
                f"{fmt(r['acceptance_length'], '.2f'):>5} {fmt(r['ms_per_cycle'], '.1f'):>7} "
                f"{fmt(r['draft_share'], '.0%'):>6} {fmt(r['verify_share'], '.0%'):>6} "
                f"{fmt(r['bookkeeping_share'], '.0%'):>6} {r['calls']:>5} {r['mismatches']:>4} "
                f"{fmt(prep_s(r), '.1f'):>6} {r.get('late', 'n/a'):>4}"
            )
        if "best_k" in e:
            above = e.get("k_opt") is not None and e.get("best_k_within_one_doubling") is None
            print(
                f"    b={e['b']}: best fixed k={e['best_k']} "
                f"({fmt(e['best_ratio_over_ar'], '.2f')}x AR), roofline k_opt="
                f"{e.get('k_opt', 'n/a')}{' (not reached: above the k scanned)' if above else ''}"
                f", auto/best {fmt(e.get('auto_over_best'), '.2f')}"
            )
    report_modes(result)
    for key, value in result.get("goals", {}).items():
        print(f"  goal {key}: {value}")
    if result.get("note"):
        print(f"  note: {result['note']}")
    for err in result["errors"]:
        print(f"  note: {err}")


# --- arguments -------------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers") from None
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} holds no integer")
    return values


def _mode_list(text: str) -> list[str]:
    modes = [x.strip() for x in text.split(",") if x.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"{','.join(bad)}: not a mode (none, graphs, compile)")
    return [m for m in MODES if m in modes]


def add_arguments(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The ``decode`` sub-command and its options (``common``: the options every check takes)."""
    de = sub.add_parser(
        "decode",
        parents=[common],
        help="decode: engine AR and speculative tok/s over b x k, best k vs the roofline's k_opt",
    )
    de.add_argument("--shape", help=f"target shape ({DECODE_SHAPE}; tiny {TINY})")
    de.add_argument("--batches", type=_int_list, help="batch sizes b (1,8,32,64; tiny 1,4)")
    de.add_argument("--ks", type=_int_list, help="verified tokens k >= 2 (2,...,64; tiny 2,4,8)")
    de.add_argument("--oracle-accept", type=float, default=0.8, help="P(a proposal is kept)")
    de.add_argument("--prompt-len", type=int, help="longest prompt, tokens (256; tiny 16)")
    de.add_argument("--max-new-tokens", type=int, help="tokens per row (64; tiny 16)")
    de.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                    help="target dtype (bfloat16; float32 on the CPU)")  # fmt: skip
    de.add_argument(
        "--hardware", default="auto", help="roofline profile: auto (this GPU / CPU) or a name"
    )
    de.add_argument("--compile", choices=["none", "graphs", "compile"], default="none")
    de.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    de.add_argument(
        "--modes",
        type=_mode_list,
        help="step modes of the modes section, a comma list (none,graphs,compile on CUDA; "
        "none,compile on the CPU; '' for none)",
    )
    de.add_argument(
        "--compile-backend",
        choices=["inductor", "aot_eager", "eager"],
        default="inductor",
        help="torch.compile backend of compile (eager: dynamo traces and counts graphs, no code "
        "generated; the CPU tests use it)",
    )
    de.add_argument(
        "--no-capture",
        action="store_true",
        help="tests on a CPU: graphs without CUDA graphs (its static buffers, eager calls)",
    )
    de.add_argument("--budget-s", type=float, help="stop measuring in time (450; tiny 180)")
    de.add_argument("--calls", type=int, default=MAX_CALLS, help="timed calls per cell at most")


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill the decode check's defaults (GPU or tiny) and check its arguments."""
    tiny = args.tiny
    defaults: dict[str, tuple[Any, Any]] = {
        "shape": (TINY, DECODE_SHAPE),
        "batches": (list(TINY_BATCHES), list(DECODE_BATCHES)),
        "ks": (list(TINY_KS), list(DECODE_KS)),
        "prompt_len": (16, 256),
        "max_new_tokens": (16, 64),
        "budget_s": (180.0, 450.0),
        "dtype": ("float32", "bfloat16"),
    }
    for name, (small, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    if args.shape != TINY:
        try:
            random_config(args.shape)
        except ValueError as e:
            ap.error(f"--shape {args.shape}: {e}")
    if min(args.batches) < 1 or min(args.ks) < 2:
        ap.error(
            f"--batches must be >= 1 and --ks >= 2 (a root and one drafted token); got "
            f"{','.join(map(str, args.batches))} and {','.join(map(str, args.ks))}"
        )
    if not 0.0 <= args.oracle_accept <= 1.0:
        ap.error(f"--oracle-accept {args.oracle_accept} must be in [0, 1]. Example: 0.8")
    if args.prompt_len < 4 or args.max_new_tokens < 1 or args.calls < 1:
        ap.error("--prompt-len must be >= 4, --max-new-tokens and --calls >= 1")
    if not (args.budget_s > 0 and math.isfinite(args.budget_s)):
        ap.error("--budget-s must be > 0 and finite")
    if args.modes is None:
        args.modes = list(MODES) if args.device == "cuda" else ["none", "compile"]
    if args.device != "cuda" and not args.no_capture:
        if args.compile == "graphs":
            ap.error(
                "--compile graphs captures CUDA graphs and this run is on the CPU. "
                "Fix: --compile compile (torch.compile) or --compile none"
            )
        if "graphs" in args.modes:
            ap.error(
                "--modes graphs captures CUDA graphs and this run is on the CPU. "
                "Fix: --modes none,compile"
            )
    if args.hardware != "auto":
        names = profile_names()
        if args.hardware.lower() not in names:
            ap.error(f"--hardware {args.hardware}: unknown. Fix: auto or one of {', '.join(names)}")
        if args.hardware.lower() != LOCAL_CPU and args.dtype == "float32":
            ap.error(
                f"--hardware {args.hardware} is a bf16 datasheet profile and --dtype is float32. "
                "Fix: --dtype bfloat16, or --hardware local-cpu"
            )
