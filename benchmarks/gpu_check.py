"""GPU checks, one JSON each: draft training (issue 15, item 7) and decoding (issue 16, item 8).

``train`` measures, for each target shape (default: llama-3-8b, then smollm2-135m), a
random-weight target in bfloat16 (``workloads.models.target.random_config``, seeded initialisation
on the device) with :class:`~workloads.training.online_features.OnlineFeatures` (the target runs
inside each step)
and a 1-layer EAGLE draft trained by :func:`~workloads.training.loop.train_stage` in bf16 autocast
(float32 master weights, TF32 on) with EAGLE's feature noise on (``--feature-noise``, default
0.2, the recipe's ``train.feature_noise``; drawn on the device, see issue 22):

- training tokens/s over the measured steps (``--warmup`` steps first, not counted);
- the time split per step: target forward (``OnlineFeatures.hidden``, synchronised before and
  after) and draft step (loss, backward, clipping, AdamW: the rest of the step);
- MFU: model FLOPs per step (:func:`step_flops`) over the step time and the GPU's dense bf16
  peak (:data:`workloads.roofline.hardware.BUILTIN_PROFILES`, from the vendor's datasheet), and
  over a bf16 matrix product measured here (8192^3);
- peak GPU memory (``torch.cuda.max_memory_allocated``) and the hours 1B and 100B training
  tokens would take at the measured rate.

Rows are random token ids (``--seq-len`` 2048, ``--batch`` 8; halved on out-of-memory), one
document per row unless ``--doc-len`` cuts them into documents (block-diagonal masks).
``--budget-s`` bounds the whole run: measuring stops in time, and the JSON (rewritten after
every shape) says where. Without CUDA (or with ``--tiny``) a tiny LLaMA shape runs on the CPU
instead, so the script is tested where no GPU is.

``decode`` measures the decoding engine on a random-weight target (``--shape``, default
llama-3-8b, bf16) with the oracle draft (:class:`~workloads.engine.oracle_draft.OracleDraft`, each
proposal kept with probability ``--oracle-accept``, default 0.8), temperature 0, no EOS:

- HF ``generate`` greedy at b = 1;
- the engine's AR loop (:func:`~workloads.engine.ar_decode.ar_generate`) and speculative decoding
  (:func:`~workloads.engine.tree_decode.generate`, a chain of k - 1 proposals) in tokens/s over
  b in ``--batches`` (1, 8, 32, 64) x k in ``--ks`` (2, 4, ..., 64), with the per-cycle split
  (draft, verify, bookkeeping) and the acceptance length, in the steps of ``--compile`` (none);
- per b: the measured best k beside the roofline's k_opt for the shape on ``--hardware``
  (:func:`workloads.roofline.k_opt`, the numbers of ``orchestrator roofline --model llama-3-8b
  --hardware h200``, at the mean prefix the rows decode over), and ``auto`` (k re-chosen each
  cycle from the live batch size by that k_opt, as ``decode.num_draft_tokens: auto`` with
  ``k_law: roofline``) against the best fixed k;
- ``modes``: each step mode of ``--modes`` (none, graphs, compile on CUDA; none, compile on the
  CPU) at b = 1 and max(b) (compile: b = 1 only, an inductor compile of an 8B forward taking
  about a minute per shape): the AR loop, the oracle at k = 8 and a *trained-shape* draft (a
  seeded random-weight 1-layer :class:`~workloads.models.draft.DraftModel` of the target's
  shape, cast by ``DraftModel.cast_to``, its tree depth 4, topk 4, k 8), with tokens/s over
  the same mode's AR loop and over eager; the JSON's ``trained_draft`` says its float32
  buffers (RoPE) are still float32 after the cast (an error otherwise). Its acceptance length
  is meaningless (random weights); its draft ms per cycle and mismatches (counted, bf16 may
  flip near-ties) are not;
- the issue's GPU goals read off the result (``goals``): oracle b=1 >= 4x HF, bookkeeping
  <= 10% of a cycle at b=64, best k within one doubling of k_opt for b >= 8; and that every
  step was prepared outside the timers (no late shape, no capture or compile in a timed call).

Every cell keeps one :class:`~workloads.engine.steps.Steps` over its calls (the AR loop one per b;
the modes' oracle and trained-shape draft share one per mode and b), its KV caches reserved
(:func:`~workloads.engine.tree_decode.reserve`) before the first call. That first call is untimed:
it prepares the steps (graph capture, compilation: ``capture_s``, ``compile_s`` per cell,
outside the timed figures) and gives the oracle the cell's own greedy continuation; timed
calls follow until the cell's share of ``--budget-s`` is spent (default 450 s, so the check
ends inside 8 minutes on one H200). The main grid runs first and leaves the ``modes``
section its reserve (about 4 minutes at the defaults: at most 5 s of timed calls per cell,
180 s for the compile cells, which are skipped with a note when less than 150 s remain); each
grid cell gets an equal share of the rest.
``--attn`` (sdpa, eager) passes to the model, ``--compile-backend`` (inductor; ``eager`` in
the CPU tests) to ``torch.compile``, and ``--no-capture`` (tests) runs graphs on the CPU
through its static buffers without capturing. Without CUDA a tiny shape runs on the CPU (b 1,
4; k 2, 4, 8; budget 180 s).

The GPU machine has torch, transformers, numpy, safetensors and filelock but not pydantic, Ray,
MLflow, SQLAlchemy or Optuna: the script imports only the ``workloads`` modules it needs
(``target``, ``features``, ``online_features``, ``draft_model``, ``training``, ``roofline``,
``oracle_draft``, ``ar_decode``, ``tree_decode``, ``_steps``), none of which needs those packages
(``workloads/__init__.py`` imports nothing eagerly; a test runs the script with them blocked).

    python benchmarks/gpu_check.py train --out gpu_check.json
    python benchmarks/gpu_check.py decode --out gpu_check_decode.json
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import os
import platform
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NoReturn, cast

_T0 = time.perf_counter()  # the budget counts from here, torch's import included

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from transformers import LlamaConfig, PretrainedConfig  # noqa: E402

from workloads.data.packing import InMemoryRows, PackedRows  # noqa: E402
from workloads.engine.ar_decode import ar_generate  # noqa: E402
from workloads.engine.hf_baseline import hf_generate  # noqa: E402
from workloads.engine.oracle_draft import OracleDraft  # noqa: E402
from workloads.engine.steps import Steps, StepStats  # noqa: E402
from workloads.engine.tree_decode import BatchResult, TreeShape, generate, reserve  # noqa: E402
from workloads.files import atomic_json  # noqa: E402
from workloads.models.draft import DraftArch, DraftModel  # noqa: E402
from workloads.models.target import random_config, random_model  # noqa: E402
from workloads.roofline.costs import k_opt  # noqa: E402
from workloads.roofline.hardware import (  # noqa: E402
    BUILTIN_PROFILES,
    LOCAL_CPU,
    HardwareProfile,
    get_profile,
    measure_local_cpu,
    profile_names,
)
from workloads.roofline.models import ModelShape, load_model_shape  # noqa: E402
from workloads.training.features import FeatureSet  # noqa: E402
from workloads.training.loop import StageLog, StageSettings, make_optimizer, train_stage  # noqa: E402
from workloads.training.online_features import OnlineFeatures  # noqa: E402

GPU_SHAPES = ("llama-3-8b", "smollm2-135m")
"""target shapes measured on a GPU, in order (builtin shapes of workloads.roofline.models)"""

TINY = "tiny-llama"
"""the CPU stand-in: a 2-layer LLaMA of width 64 (see :func:`_config`)"""

FEATURE_NOISE = 0.2
"""EAGLE's feature noise the train check trains with: the recipe's default
(``workloads.config.TrainConfig.feature_noise``; pydantic is absent on the GPU machine)"""

RESERVE_S = 45.0
"""seconds kept for each shape still to come when a shape's measuring stops for the budget"""


class _Parser(argparse.ArgumentParser):
    """Errors in one line (``gpu_check: error: ...``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"gpu_check: error: {message}\n")


# --- FLOPs (pure) ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StepFlops:
    """Model FLOPs of one training step (not counting recomputation)."""

    target_forward: float
    """target body forward: 2 N_target + 4 l h T per token (PaLM, Chowdhery et al. 2022,
    Appendix B, forward third of 6N + 12 l h T)"""
    draft_fwd_bwd: float
    """draft forward and backward: 6 N_draft + 12 l_d h T per position"""
    lm_head_ce: float
    """EAGLE's classification loss through the frozen LM head: the draft's logits forward and
    backward to its input (2 h V + 2 h V) and the target's logits forward (2 h V), per position"""

    @property
    def total(self) -> float:
        """All three, FLOPs."""
        return self.target_forward + self.draft_fwd_bwd + self.lm_head_ce


def step_flops(
    *,
    rows: int,
    seq_len: int,
    n_target: int,
    target_layers: int,
    n_draft: int,
    draft_layers: int,
    attn_width: int,
    hidden: int,
    vocab: int,
) -> StepFlops:
    """FLOPs of one step of ``rows`` rows of ``seq_len`` tokens.

    ``n_target``: parameters of the target's body (decoder layers and final norm; no embedding,
    no LM head: online features stop at the last hidden state). ``n_draft``: the draft's
    trainable parameters. ``attn_width``: heads x head dim. The target sees ``seq_len`` tokens
    per row, the draft ``seq_len - 2`` positions (EAGLE's alignment). The attention term counts
    every query-key pair of the row (PaLM's convention, not halved for causality); a
    block-diagonal mask (``--doc-len``) does less work than counted.
    """
    t, p = rows * seq_len, rows * (seq_len - 2)
    return StepFlops(
        target_forward=float(t * (2 * n_target + 4 * target_layers * attn_width * seq_len)),
        draft_fwd_bwd=float(p * (6 * n_draft + 12 * draft_layers * attn_width * seq_len)),
        lm_head_ce=float(p * 6 * hidden * vocab),
    )


# --- what is measured ------------------------------------------------------------------------


class _Timed:
    """A :class:`FeatureSet` that times the reads of another (synchronising the device around
    the target's forward, so its time is the forward's alone)."""

    def __init__(self, inner: FeatureSet, dev: torch.device) -> None:
        self.inner, self.dev = inner, dev
        self.rows_s = self.target_s = 0.0

    def _sync(self) -> None:
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)

    @property
    def rows(self) -> int:
        return self.inner.rows

    @property
    def seq_len(self) -> int:
        return self.inner.seq_len

    @property
    def tokens(self) -> int:
        return self.inner.tokens

    def packed(self, idx: torch.Tensor) -> PackedRows:
        t0 = time.perf_counter()
        out = self.inner.packed(idx)
        self.rows_s += time.perf_counter() - t0
        return out

    def hidden(self, idx: torch.Tensor, packed: PackedRows | None = None) -> torch.Tensor:
        self._sync()
        t0 = time.perf_counter()
        out = self.inner.hidden(idx, packed)
        self._sync()
        self.target_s += time.perf_counter() - t0
        return out


def _config(shape: str) -> PretrainedConfig:
    if shape == TINY:
        return LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=4096,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
        )
    return random_config(shape)


def _rows(n: int, seq_len: int, vocab: int, doc_len: int, seed: int) -> InMemoryRows:
    """``n`` rows of random token ids; positions restart every ``doc_len`` tokens (0: never)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, seq_len), generator=gen)
    pos = torch.arange(seq_len)
    if doc_len:
        pos = pos % doc_len
    pos_rl = pos.expand(n, seq_len).contiguous()
    return InMemoryRows(PackedRows(ids, torch.ones_like(ids, dtype=torch.bool), pos_rl))


@dataclass(frozen=True)
class Peak:
    """The FLOP/s MFU is taken against."""

    flops: float
    """FLOP/s"""
    source: str


def _peak(dev: torch.device, override_tflops: float | None) -> Peak | None:
    """The dense bf16 peak of the device: ``--peak-tflops``, the datasheet profile of a known
    GPU, or this CPU measured (bf16 matrix products); None for an unknown GPU."""
    if override_tflops:
        return Peak(override_tflops * 1e12, "--peak-tflops")
    if dev.type == "cpu":
        prof = measure_local_cpu(dtype="bfloat16", threads=torch.get_num_threads(), seconds=1.0)
        return Peak(prof.peak_flops, prof.source)
    name = torch.cuda.get_device_name(dev).upper()
    for key in ("H200", "H100", "H800", "A100"):
        if key in name:
            prof = BUILTIN_PROFILES[key.lower()]
            return Peak(
                prof.peak_flops, f"workloads.roofline.hardware {key.lower()}: {prof.source}"
            )
    return None


def _matmul_tflops(dev: torch.device) -> float | None:
    """bf16 TFLOP/s of an 8192^3 matrix product on the GPU (mean of 10 after 3 warm-ups)."""
    if dev.type != "cuda":
        return None
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize(dev)
    dt = (time.perf_counter() - t0) / 10
    del a, b
    return 2 * n**3 / dt / 1e12


def _free(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _peak_memory(dev: torch.device) -> tuple[int, str]:
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev), "torch.cuda.max_memory_allocated"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return rss, "peak RSS of the process (ru_maxrss), all shapes so far"


def measure_shape(
    shape: str, args: argparse.Namespace, dev: torch.device, peak: Peak | None, deadline: float
) -> dict[str, Any]:
    """Load one random target, train a draft on online features; the measured numbers.

    Raises:
        torch.OutOfMemoryError: the batch does not fit (the caller halves it).
    """
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t_load = time.perf_counter()
    config = _config(shape)
    target = random_model(config, dtype=torch.bfloat16, device=dev, seed=args.seed)
    target.eval()
    target.requires_grad_(False)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    load_s = time.perf_counter() - t_load
    emb = target.get_input_embeddings().weight
    head = target.get_output_embeddings().weight
    assert isinstance(emb, torch.Tensor) and isinstance(head, torch.Tensor)
    torch.manual_seed(args.seed)
    arch = DraftArch.from_target(config, layers=args.draft_layers, output_norm=True)
    with dev:  # the draft's layers are allocated and initialised on the device
        draft = DraftModel(
            arch, embed_weight=emb, lm_head_weight=head, compute_dtype=torch.bfloat16
        )
    draft.to(dev)
    L, B = args.seq_len, args.batch
    total = args.warmup + args.steps
    vocab = int(config.vocab_size)
    rows = _rows(B * total, L, min(vocab, 49152), args.doc_len, args.seed)
    feats = _Timed(OnlineFeatures(rows, target, batch=B), dev)
    s = StageSettings(
        epochs=1,
        batch_size=B,
        lr=1e-4,
        warmup_steps=0,
        weight_decay=0.0,
        grad_clip=1.0,
        w_reg=1.0,
        w_cls=0.1,
        seed=args.seed,
        order="stream",
        precision="bf16",
        feature_noise=args.feature_noise,
    )
    opt = make_optimizer(draft, s)
    log = StageLog()
    steps: list[tuple[float, float, float]] = []  # (step, target forward, rows) seconds
    stopped = False
    for i in range(total):
        if i >= args.warmup and steps and time.perf_counter() > deadline:
            stopped = True
            break
        feats.rows_s = feats.target_s = 0.0
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        train_stage(draft, feats, s, opt=opt, log=log, start=i, stop=i + 1)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= args.warmup:
            steps.append((time.perf_counter() - t0, feats.target_s, feats.rows_s))
    if not steps:
        raise TimeoutError(f"{shape}: the budget ran out before a step was measured")
    body = cast(torch.nn.Module, target.model)
    n_body = sum(p.numel() for p in body.parameters()) - emb.numel()
    flops = step_flops(
        rows=B,
        seq_len=L,
        n_target=n_body,
        target_layers=int(config.num_hidden_layers),
        n_draft=draft.num_parameters(),
        draft_layers=args.draft_layers,
        attn_width=arch.num_attention_heads * arch.head_dim,
        hidden=arch.hidden_size,
        vocab=draft.vocab_size,
    )
    step_s = [x[0] for x in steps]
    mean_s = statistics.fmean(step_s)
    target_s = statistics.fmean(x[1] for x in steps)
    rows_s = statistics.fmean(x[2] for x in steps)
    draft_s = mean_s - target_s - rows_s
    tokens_per_s = B * L / mean_s
    memory, memory_kind = _peak_memory(dev)
    out: dict[str, Any] = {
        "shape": shape,
        "config": {
            "hidden": arch.hidden_size,
            "layers": int(config.num_hidden_layers),
            "heads": arch.num_attention_heads,
            "kv_heads": arch.num_key_value_heads,
            "vocab": vocab,
            "target_body_params": n_body,
            "target_params": sum(p.numel() for p in target.parameters()),
            "draft_trainable_params": draft.num_parameters(),
            "draft_layers": args.draft_layers,
        },
        "batch": B,
        "seq_len": L,
        "tokens_per_step": B * L,
        "warmup_steps": args.warmup,
        "measured_steps": len(steps),
        "stopped_by_budget": stopped,
        "load_s": load_s,
        "step_s": {
            "mean": mean_s,
            "median": statistics.median(step_s),
            "min": min(step_s),
            "max": max(step_s),
        },
        "target_forward_s": target_s,
        "draft_step_s": draft_s,
        "rows_s": rows_s,
        "split": {
            "target_forward": target_s / mean_s,
            "draft_step": draft_s / mean_s,
            "rows": rows_s / mean_s,
        },
        "tokens_per_s": tokens_per_s,
        "flops_per_step": asdict(flops) | {"total": flops.total},
        "achieved_tflops": flops.total / mean_s / 1e12,
        "mfu": flops.total / mean_s / peak.flops if peak else None,
        "peak_memory_bytes": memory,
        "peak_memory_kind": memory_kind,
        "hours_1b_tokens": 1e9 / tokens_per_s / 3600,
        "hours_100b_tokens": 1e11 / tokens_per_s / 3600,
        "losses": log.loss,
    }
    del draft, opt, target, feats
    _free(dev)
    return out


def _header(check: str, dev: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """The fields every check's JSON starts with: what ran, where, with which versions."""
    import transformers

    return {
        "check": check,
        "device": torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else platform.processor() or platform.machine(),
        "device_type": dev.type,
        "tiny": args.tiny,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cuda": torch.version.cuda if dev.type == "cuda" else None,
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "command")},
    }


def _write(result: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_json(out, result)


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every shape in turn; the JSON-able result (also written after each shape)."""
    t_start = _T0
    deadline = t_start + args.budget_s
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        torch.set_num_threads(args.threads)
    peak = _peak(dev, args.peak_tflops)
    matmul = _matmul_tflops(dev)

    result: dict[str, Any] = {
        **_header("train", dev, args),
        "precision": "target bf16; draft fp32 master weights, bf16 autocast"
        + ("; TF32 on" if dev.type == "cuda" else ""),
        "note": None
        if dev.type == "cuda"
        else "a CPU stand-in (tiny shape): the GPU numbers are pending a run on a GPU",
        "features": "online (the target runs inside each step)",
        "rows": "random token ids" + (f", documents of {args.doc_len}" if args.doc_len else ""),
        "peak_flops": peak.flops if peak else None,
        "peak_source": peak.source if peak else "unknown GPU: pass --peak-tflops for MFU",
        "measured_matmul_tflops": matmul,
        "mfu_definition": (
            "model FLOPs per step (target body forward 2N+4lhT per token, draft 6N+12lhT per "
            "position, LM head/CE 6hV per position; recomputation not counted) / mean step "
            "time / peak_flops"
        ),
        "device_memory_bytes": torch.cuda.get_device_properties(dev).total_memory
        if dev.type == "cuda"
        else None,
        "shapes": [],
        "errors": [],
        "tracebacks": [],
    }
    _write(result, args.out)
    for k, shape in enumerate(args.shapes):
        shape_deadline = deadline - RESERVE_S * (len(args.shapes) - k - 1)
        if time.perf_counter() > shape_deadline:
            result["errors"].append(f"{shape}: not measured, the budget was spent")
            continue
        batch = args.batch
        while True:
            sub = argparse.Namespace(**{**vars(args), "batch": batch})
            oom = False
            try:
                got = measure_shape(shape, sub, dev, peak, shape_deadline)
            except torch.OutOfMemoryError:
                oom = True  # handled below, once the failed step's tensors are released
            except TimeoutError as e:
                result["errors"].append(str(e))
                break
            except Exception as e:  # noqa: BLE001 - recorded in the JSON; the next shape runs
                result["errors"].append(f"{shape}: {type(e).__name__}: {e}")
                result["tracebacks"].append(traceback.format_exc())
                break
            if oom:
                _free(dev)
                result["errors"].append(f"{shape}: out of memory at batch {batch}")
                if batch == 1:
                    break
                batch //= 2
                continue
            if matmul is not None:
                got["mfu_vs_measured_matmul"] = got["achieved_tflops"] / matmul
            result["shapes"].append(got)
            break
        result["elapsed_s"] = time.perf_counter() - t_start
        _write(result, args.out)
    return result


def _report(result: dict[str, Any]) -> None:
    print(
        f"gpu_check train on {result['device']} (torch {result['versions']['torch']}, "
        f"transformers {result['versions']['transformers']}); peak {result['peak_source']}"
    )
    print(
        f"{'shape':>14} {'batch':>5} {'tok/s':>10} {'MFU':>6} {'target fwd':>10} "
        f"{'draft step':>10} {'peak GiB':>8} {'h/1B':>8} {'h/100B':>9}"
    )
    for s in result["shapes"]:
        mfu = f"{100 * s['mfu']:5.1f}%" if s["mfu"] is not None else "   n/a"
        print(
            f"{s['shape']:>14} {s['batch']:5d} {s['tokens_per_s']:10.0f} {mfu} "
            f"{100 * s['split']['target_forward']:9.0f}% {100 * s['split']['draft_step']:9.0f}% "
            f"{s['peak_memory_bytes'] / 2**30:8.2f} {s['hours_1b_tokens']:8.2f} "
            f"{s['hours_100b_tokens']:9.1f}"
        )
    for e in result["errors"]:
        print(f"  note: {e}")


# --- decode check (issue 16, item 8) ---------------------------------------------------------

DECODE_SHAPE = "llama-3-8b"
"""the target shape of the decode check on a GPU"""

DECODE_BATCHES, DECODE_KS = (1, 8, 32, 64), (2, 4, 8, 16, 32, 64)
"""batch sizes b and verified tokens k (a chain of k - 1 drafted tokens) measured on a GPU"""

TINY_BATCHES, TINY_KS = (1, 4), (2, 4, 8)
"""the same on the CPU stand-in"""

MAX_CALLS = 20
"""timed calls of one cell at most by default (``--calls``; a cell stops earlier when its share
of the budget is spent)"""

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
"""(tiny, inductor) -> seconds that must be left to start the ``compile`` cells: an inductor
compile of an 8B forward takes about a minute per shape (dynamo's tracing alone, for the
``eager`` backend, a fraction of that)"""

COMPILE_RESERVE_S = {
    (True, True): 120.0, (True, False): 20.0, (False, True): 180.0, (False, False): 90.0,
}  # fmt: skip
"""(tiny, inductor) -> seconds the main grid leaves for the ``compile`` cells (three at b = 1:
the AR loop's verify, the [1, 8] verify and the trained-shape draft's two steps)"""


def _tiny_shape() -> ModelShape:
    """The roofline sizes of :data:`TINY` (see :func:`_config`)."""
    return ModelShape(
        name=TINY, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, mlp_inner=128,
        vocab=4096,
    )  # fmt: skip


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


def _chain(k: int) -> TreeShape:
    """k verified tokens per row: the root and a chain of k - 1 oracle proposals."""
    return TreeShape(depth=k - 1, topk=1, num_draft_tokens=k)


def _random_prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``n`` prompts of random ids, lengths spread over [3/4 length, length] (ragged rows)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, 3 * length // 4), length + 1, (n,), generator=gen)
    return [torch.randint(0, vocab, (int(m),), generator=gen).tolist() for m in lengths]


class _Clock:
    """The decode check's budget: each cell gets an equal share of what is left."""

    def __init__(self, deadline: float, cells: int) -> None:
        self.deadline, self.left = deadline, cells

    def cell_budget(self) -> float:
        """Seconds for the next cell (0 when the budget is spent); counts the cell."""
        remaining = self.deadline - time.perf_counter()
        share = remaining / max(self.left, 1)
        self.left -= 1
        return max(share, 0.0)


def _timed(
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


def _cell(
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
    cell = _timed(then(r0), r0.tokens if refs is None else refs, left, max_calls)
    return cell.row() | _prep(before, warm, steps.stats), r0


def _again(call: Callable[[], BatchResult]) -> Callable[[BatchResult], Callable[[], BatchResult]]:
    """A cell's ``then`` when its timed calls repeat its first call."""
    return lambda _: call


def _faults(result: dict[str, Any], name: str, row: dict[str, Any], mode: str) -> None:
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


def _release(steps_mode: str, dev: torch.device) -> None:
    """After a cell's (or a group's) :class:`Steps` is dropped: dynamo's cache entries of its
    compiled steps go too (each new Steps compiles its own, and dynamo counts recompiles per
    code object), then the device memory."""
    if steps_mode == "compile":
        torch._dynamo.reset()
    _free(dev)


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


def _trained_draft(
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


@dataclass
class _Run:
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
        when it is skipped (0 s), why. The oracle's cell compiles the [1, 8] verify (about what
        the AR loop's [1, 1] verify took), the trained draft's its two one-layer steps."""
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


def _modes(
    run: _Run,
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
        _release(mode, run.dev)
        _mode_ratios(result["modes"], mode, b)
        result["elapsed_s"] = time.perf_counter() - _T0
        _write(result, args.out)


def _mode_group(
    run: _Run,
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
    :data:`TRAINED_TREE` (one Steps for both drafts, its caches reserved for both trees: the
    target's verify is prepared once, the draft's steps when it is set). A cell of the main
    grid's mode, b and k is the grid's (``from_grid``)."""
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
        entry["ar"], r0 = _cell(
            ar_steps, call, _again(call), None, budget, args.calls, first_counts=False
        )
        del ar_steps, call
        _release(mode, run.dev)
        refs = r0.tokens
        _faults(result, f"{tag} ar", entry["ar"], mode)
    refs_of[mode, b] = refs
    none_refs = refs_of.get(("none", b))
    if mode != "none" and none_refs is not None:
        entry["ar"]["mismatches_vs_none"] = sum(
            o != r for o, r in zip(refs, none_refs, strict=True)
        )
    ar_compile_s = entry["ar"]["compile_s"]
    steps = run.steps(mode)
    for tree in (_chain(MODE_K), TRAINED_TREE):  # both drafts' calls reuse these caches
        reserve(steps, b, longest, n, tree, vocab=run.vocab)
    grid_k = _grid_row(result, b)["spec"].get(str(MODE_K)) if b in grid_refs else None
    if _reused(args, mode, "oracle") and grid_k is not None:
        entry["oracle"] = {**grid_k, "from_grid": True}
    elif (budget := share("oracle", ar_compile_s)) > 0:

        def known(k: list[list[int]]) -> Callable[[], BatchResult]:
            return functools.partial(run.oracle, batch, k, _chain(MODE_K), steps)

        entry["oracle"], _ = _cell(
            steps, known(refs), lambda r: known(r.tokens), refs, budget, args.calls,
            first_counts=False,
        )  # fmt: skip
        _faults(result, f"{tag} oracle", entry["oracle"], mode)
    elif mode == "compile":  # the trained draft's cell would compile the verify too
        if draft is not None:
            errors.append(f"{tag} trained: skipped with the oracle's cell")
        return
    if draft is not None and (budget := share("trained", ar_compile_s)) > 0:
        call = functools.partial(run.drafted, draft, batch, TRAINED_TREE, steps)
        entry["trained"], _ = _cell(
            steps, call, _again(call), refs, budget, args.calls, first_counts=False
        )
        _faults(result, f"{tag} trained", entry["trained"], mode)


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


def decode(args: argparse.Namespace) -> dict[str, Any]:
    """The decode check: HF ``generate`` at b=1, the engine's AR loop and the oracle at each
    (b, k), ``auto`` k per b, then the ``modes`` section (none / graphs / compile, with the
    oracle and a trained-shape bf16 draft); the JSON-able result (also written after each
    batch size and each mode's group)."""
    t_start = _T0
    deadline = t_start + args.budget_s - 5.0  # kept for the report
    dev = torch.device(args.device)
    if dev.type == "cpu":
        torch.set_num_threads(args.threads)
    dtype = args.dtype

    result: dict[str, Any] = {
        **_header("decode", dev, args),
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
    _write(result, args.out)
    config = _config(args.shape)
    try:
        model = random_model(config, dtype=getattr(torch, dtype), device=dev, seed=args.seed)
        model.requires_grad_(False)
        if args.attn != "sdpa":
            model.set_attn_implementation(args.attn)
        model.generation_config.eos_token_id = None  # no row stops early
        hw = _decode_hardware(args, dev, dtype)
    except Exception as e:  # noqa: BLE001 - recorded in the JSON, which says what failed
        result["errors"].append(f"set-up: {type(e).__name__}: {e}")
        result["tracebacks"].append(traceback.format_exc())
        _write(result, args.out)
        return result
    draft: DraftModel | None = None
    if args.modes:
        try:
            draft, result["trained_draft"], fault = _trained_draft(model, dev, args.seed)
            if fault:
                result["errors"].append(fault)
        except Exception as e:  # noqa: BLE001 - recorded; the modes run without it
            result["errors"].append(f"trained-shape draft: {type(e).__name__}: {e}")
            result["tracebacks"].append(traceback.format_exc())
    vocab = int(config.vocab_size)
    shape = _tiny_shape() if args.shape == TINY else load_model_shape(args.shape)
    s = (3 * args.prompt_len // 4 + args.prompt_len) // 2 + args.max_new_tokens // 2
    law = _k_law(shape, hw, s, args.ks)
    result["config"] = {"hidden": shape.hidden, "layers": shape.layers, "vocab": vocab}
    result["hardware"] = {"name": hw.name, "i_crit": hw.i_crit, "source": hw.source}
    result["roofline_prefix_s"] = s
    result["roofline_k_opt"] = {
        str(b): asdict(k_opt(shape, hw, b, s, k_max=max(args.ks))) for b in args.batches
    }
    prompts = _random_prompts(max(args.batches), args.prompt_len, vocab, args.seed)
    run = _Run(args, model, dev, vocab, prompts)
    n = args.max_new_tokens

    # the modes section's share, kept from the main grid (which runs first)
    groups = _mode_groups(args)
    inductor = args.compile_backend == "inductor"
    plain = _plain_cells(args, groups, draft is not None)
    compiles = any(m == "compile" for m, _ in groups)
    modes_s = plain * MODE_CELL_S[args.tiny] * 1.3
    modes_s += COMPILE_RESERVE_S[args.tiny, inductor] if compiles else 0.0
    modes_s = min(modes_s, 0.6 * (deadline - time.perf_counter()))
    result["modes"] = {
        "modes": [m for m in MODES if m in args.modes],
        "groups": [{"mode": m, "b": b} for m, b in groups],
        "oracle_tree": asdict(_chain(MODE_K)),
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
    clock = _Clock(deadline - modes_s, 1 + len(args.batches) * (len(args.ks) + 2))

    # HF generate at b=1 (the first prompts in turn, one warm-up)
    budget = clock.cell_budget()
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
    grid_refs: dict[int, list[list[int]]] = {}
    mode = args.compile
    for b in args.batches:
        batch = prompts[:b]
        longest = max(map(len, batch))
        entry: dict[str, Any] = {"b": b, "ar": None, "spec": {}, "auto": None}
        result["batches"].append(entry)
        budget = clock.cell_budget()
        if budget <= 0:
            clock.left -= len(args.ks) + 1
            result["errors"].append(f"b={b}: not measured, the budget was spent")
            continue
        try:
            ar_steps = run.steps(mode)
            ar_steps.caches(b, longest + n, 0)  # the AR loop stages one slot a step
            call = functools.partial(run.ar, batch, ar_steps)
            entry["ar"], r0 = _cell(ar_steps, call, _again(call), None, budget, args.calls)
            del ar_steps, call
            _release(mode, dev)
            refs = grid_refs[b] = r0.tokens  # the first call's outputs: the references
            entry["ar"]["ratio_over_ar"] = 1.0
            _faults(result, f"b={b} AR", entry["ar"], mode)
            if b == 1:
                entry["ar"]["mismatches_vs_hf"] = sum(
                    o != r for o, r in zip(refs, hf_refs[:1], strict=False)
                )
            base = entry["ar"]["tokens_per_s"]
            cases: list[int | None] = [*args.ks, None]
            for k in cases:
                name = "auto" if k is None else str(k)
                budget = clock.cell_budget()
                if budget <= 0:
                    result["errors"].append(f"b={b} k={name}: not measured, the budget was spent")
                    continue
                tree = _chain(k) if k is not None else (lambda rows: _chain(law(rows)))
                try:
                    row = _grid_cell(run, batch, refs, tree, mode, budget)
                except torch.OutOfMemoryError:
                    _release(mode, dev)
                    result["errors"].append(f"b={b} k={name}: out of memory")
                    continue
                _release(mode, dev)
                _faults(result, f"b={b} k={name}", row, mode)
                row["ratio_over_ar"] = row["tokens_per_s"] / base if base else None
                if k is None:
                    row["k_at_b"] = law(b)  # fewer rows, as they finish, may take other k
                    entry["auto"] = row
                else:
                    entry["spec"][name] = row
        except Exception as e:  # noqa: BLE001 - recorded in the JSON; the next b runs
            result["errors"].append(f"b={b}: {type(e).__name__}: {e}")
            result["tracebacks"].append(traceback.format_exc())
            _release(mode, dev)
        _summarise(entry, result["roofline_k_opt"].get(str(b)))
        result["elapsed_s"] = time.perf_counter() - t_start
        _write(result, args.out)
    _modes(run, draft, result, grid_refs, deadline)
    result["goals"] = _goals(result)
    result["elapsed_s"] = time.perf_counter() - t_start
    _write(result, args.out)
    return result


def _grid_cell(
    run: _Run,
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

    row, _ = _cell(steps, known(refs), lambda r: known(r.tokens), refs, budget, run.args.calls)
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


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _prep_s(r: dict[str, Any]) -> float | None:
    """Seconds capturing and compiling a cell's steps (outside its timed figures)."""
    if "capture_s" not in r:
        return None
    return float(r["capture_s"] + r["compile_s"])


def _report_decode(result: dict[str, Any]) -> None:
    hw = result.get("hardware", {})
    print(
        f"gpu_check decode on {result['device']} (torch {result['versions']['torch']}, "
        f"transformers {result['versions']['transformers']}); shape {result['shape']}, "
        f"roofline {hw.get('name')} (I_crit {_fmt(hw.get('i_crit'), '.0f')} FLOP/byte, "
        f"prefix s={result.get('roofline_prefix_s')}), steps {result['settings']['compile']}"
    )
    hf = result.get("hf_generate_b1") or {}
    print(f"HF generate b=1: {_fmt(hf.get('tokens_per_s'), '.1f')} tok/s")
    head = f"{'b':>3} {'method':>10} {'tok/s':>9} {'x AR':>6} {'tau':>5} {'ms/cyc':>7}"
    print(
        head + f" {'draft':>6} {'verify':>6} {'book':>6} {'calls':>5} {'mism':>4} "
        f"{'prep s':>6} {'late':>4}"
    )
    for e in result["batches"]:
        rows = [("AR", e["ar"])] + [(f"k={k}", r) for k, r in e["spec"].items()]
        if e.get("auto"):
            rows.append((f"auto~{_fmt(e['auto'].get('mean_k'), '.0f')}", e["auto"]))
        for name, r in rows:
            if not r:
                continue
            print(
                f"{e['b']:>3} {name:>10} {_fmt(r['tokens_per_s'], '.1f'):>9} "
                f"{_fmt(r.get('ratio_over_ar'), '.2f'):>6} "
                f"{_fmt(r['acceptance_length'], '.2f'):>5} {_fmt(r['ms_per_cycle'], '.1f'):>7} "
                f"{_fmt(r['draft_share'], '.0%'):>6} {_fmt(r['verify_share'], '.0%'):>6} "
                f"{_fmt(r['bookkeeping_share'], '.0%'):>6} {r['calls']:>5} {r['mismatches']:>4} "
                f"{_fmt(_prep_s(r), '.1f'):>6} {r.get('late', 'n/a'):>4}"
            )
        if "best_k" in e:
            above = e.get("k_opt") is not None and e.get("best_k_within_one_doubling") is None
            print(
                f"    b={e['b']}: best fixed k={e['best_k']} "
                f"({_fmt(e['best_ratio_over_ar'], '.2f')}x AR), roofline k_opt="
                f"{e.get('k_opt', 'n/a')}{' (not reached: above the k scanned)' if above else ''}"
                f", auto/best {_fmt(e.get('auto_over_best'), '.2f')}"
            )
    _report_modes(result)
    for key, value in result.get("goals", {}).items():
        print(f"  goal {key}: {value}")
    if result.get("note"):
        print(f"  note: {result['note']}")
    for err in result["errors"]:
        print(f"  note: {err}")


def _report_modes(result: dict[str, Any]) -> None:
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
                    f"{mode:>7} {b:>3} {name:>7} {_fmt(r['tokens_per_s'], '.1f'):>9} "
                    f"{_fmt(r.get('ratio_over_ar'), '.2f'):>6} "
                    f"{_fmt(r.get('ratio_over_none'), '.2f'):>6} "
                    f"{_fmt(r['acceptance_length'], '.2f'):>5} "
                    f"{_fmt(r['ms_per_cycle'], '.1f'):>7} "
                    f"{_fmt(r.get('draft_ms_per_cycle'), '.2f'):>8} {r['captures']:>4} "
                    f"{r['compiles']:>4} {_fmt(_prep_s(r), '.1f'):>6} {r['fallbacks']:>3} "
                    f"{r['late']:>4} {r['mismatches']:>4}"
                )
    print("  (* the main grid's cell)")


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


def _args(argv: list[str]) -> argparse.Namespace:
    ap = _Parser(description=__doc__.split("\n\n")[0])
    common = _Parser(add_help=False)
    common.add_argument("--out", type=Path, help="the JSON (default $OUT/gpu_check.json if $OUT)")
    common.add_argument("--tiny", action="store_true", help="a tiny shape (implied without CUDA)")
    common.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    common.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    common.add_argument("--seed", type=int, default=0)
    sub = ap.add_subparsers(dest="command", required=True, metavar="command")
    tr = sub.add_parser(
        "train", parents=[common], help="train: draft training throughput, MFU, memory, time split"
    )
    tr.add_argument("--shapes", nargs="+", help=f"target shapes (default {' '.join(GPU_SHAPES)})")
    tr.add_argument("--seq-len", type=int, help="tokens per row (2048; tiny 64)")
    tr.add_argument("--batch", type=int, help="rows per step (8; tiny 2); halved on OOM")
    tr.add_argument("--warmup", type=int, help="steps not counted (3; tiny 1)")
    tr.add_argument("--steps", type=int, help="steps measured (10; tiny 3)")
    tr.add_argument("--draft-layers", type=int, default=1)
    tr.add_argument("--doc-len", type=int, default=0, help="tokens per document (0: one a row)")
    tr.add_argument("--budget-s", type=float, default=420.0, help="stop measuring in time")
    tr.add_argument("--peak-tflops", type=float, help="the peak for MFU (default: datasheet)")
    tr.add_argument(
        "--feature-noise", type=float, default=FEATURE_NOISE, help="EAGLE's noise (0: off)"
    )
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
    args = ap.parse_args(argv)

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA GPU. Fix: --device auto")
    args.tiny = args.tiny or args.device == "cpu"
    if args.out is None and os.environ.get("OUT"):
        args.out = Path(os.environ["OUT"]) / "gpu_check.json"
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    if args.command == "decode":
        _check_decode(ap, args)
        return args
    tiny = args.tiny
    args.shapes = args.shapes or ([TINY] if tiny else list(GPU_SHAPES))
    defaults = {"seq_len": (64, 2048), "batch": (2, 8), "warmup": (1, 3), "steps": (3, 10)}
    for name, (small, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    for shape in args.shapes:
        if shape != TINY:
            try:
                random_config(shape)
            except ValueError as e:
                ap.error(f"--shapes {shape}: {e}")
    if args.seq_len < 8 or args.batch < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--seq-len must be >= 8, --batch and --steps >= 1, --warmup >= 0")
    if args.draft_layers < 1 or args.doc_len < 0:
        ap.error("--draft-layers must be >= 1, --doc-len >= 0")
    if args.doc_len and args.doc_len < 3:
        ap.error("--doc-len must be 0 (one document a row) or >= 3")
    if not args.budget_s > 0 or (args.peak_tflops is not None and not args.peak_tflops > 0):
        ap.error("--budget-s and --peak-tflops must be > 0")
    if not math.isfinite(args.budget_s):
        ap.error("--budget-s must be finite")
    if not 0 <= args.feature_noise <= 10:
        ap.error(f"--feature-noise {args.feature_noise}: must be in [0, 10] (default 0.2)")
    return args


def _check_decode(ap: _Parser, args: argparse.Namespace) -> None:
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


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    if args.command == "decode":
        result = decode(args)
        _report_decode(result)
        goals = result.get("goals", {})
        ok = (
            any(e.get("best_k") for e in result["batches"])
            and not result["tracebacks"]
            and goals.get("steps_prepared_outside_timers") is not False
            and goals.get("trained_draft_fp32_buffers_kept") is not False
        )
    else:
        result = train(args)
        _report(result)
        ok = bool(result["shapes"]) and not result["tracebacks"]
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
