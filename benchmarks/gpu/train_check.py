"""The ``train`` check of ``benchmarks/gpu_check.py``: one JSON.

For each target shape (default: llama-3-8b, then smollm2-135m), a random-weight target in
bfloat16 (``workloads.models.target.random_config``) with
:class:`~workloads.training.online_features.OnlineFeatures` and a 1-layer EAGLE draft trained by
:func:`~workloads.training.loop.train_stage` in bf16 autocast (float32 master weights, TF32 on),
EAGLE's feature noise ``--feature-noise`` (default 0.2) drawn on the device. It measures:

- training tokens/s over the measured steps (after ``--warmup`` steps);
- the time split per step: target forward (``OnlineFeatures.hidden``, synchronised) and draft
  step (loss, backward, clipping, AdamW);
- MFU: model FLOPs per step (:func:`step_flops`) over the step time and the GPU's dense bf16
  peak (:data:`workloads.roofline.hardware.BUILTIN_PROFILES`, vendor datasheet), and over a
  bf16 8192^3 matrix product measured here;
- peak GPU memory (``torch.cuda.max_memory_allocated``) and the hours for 1B and 100B tokens.

Rows are random token ids (``--seq-len`` 2048, ``--batch`` 8; halved on out-of-memory), one
document per row unless ``--doc-len`` cuts them (block-diagonal masks). ``--budget-s`` bounds
the run; the JSON (rewritten after every shape) says where measuring stopped. Without CUDA (or
with ``--tiny``) a tiny LLaMA shape runs on the CPU.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, cast

import torch

from benchmarks.gpu.common import T0, TINY, free, header, target_config, write
from workloads.data.packing import InMemoryRows, PackedRows
from workloads.models.draft import DraftArch, DraftModel
from workloads.models.target import random_config, random_model
from workloads.roofline.hardware import BUILTIN_PROFILES, measure_local_cpu
from workloads.training.features import FeatureSet
from workloads.training.loop import StageLog, StageSettings, make_optimizer, train_stage
from workloads.training.online_features import OnlineFeatures

__all__ = [
    "StepFlops",
    "add_arguments",
    "check_args",
    "measure_shape",
    "report",
    "step_flops",
    "train",
]


GPU_SHAPES = ("llama-3-8b", "smollm2-135m")
"""target shapes measured on a GPU, in order (builtin shapes of workloads.roofline.models)"""

FEATURE_NOISE = 0.2
"""EAGLE's feature noise the train check trains with: the recipe's default
(``workloads.draft_train.config.TrainConfig.feature_noise``; pydantic is absent on the GPU
machine)"""

RESERVE_S = 45.0
"""seconds kept for each shape still to come when a shape's measuring stops for the budget"""


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
    config, target, load_s = _load_target(shape, args, dev)
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
    steps, log, stopped = _train_steps(draft, feats, args, dev, deadline)
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
        **_timing(steps, B * L, flops, peak, dev),
        "losses": log.loss,
    }
    del draft, target, feats
    free(dev)
    return out


def _load_target(shape: str, args: argparse.Namespace, dev: torch.device) -> tuple[Any, Any, float]:
    """The random bf16 target of ``shape`` on ``dev``, frozen: its config, the model and the
    seconds it took to make."""
    t_load = time.perf_counter()
    config = target_config(shape)
    target = random_model(config, dtype=torch.bfloat16, device=dev, seed=args.seed)
    target.eval()
    target.requires_grad_(False)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return config, target, time.perf_counter() - t_load


def _train_steps(
    draft: DraftModel, feats: _Timed, args: argparse.Namespace, dev: torch.device, deadline: float
) -> tuple[list[tuple[float, float, float]], StageLog, bool]:
    """``--warmup`` then ``--steps`` training steps, one :func:`train_stage` call each, until
    ``deadline`` (at least one measured): (step, target forward, rows) seconds of each measured
    step, the log, and whether the deadline stopped them."""
    s = StageSettings(
        epochs=1,
        batch_size=args.batch,
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
    for i in range(args.warmup + args.steps):
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
    return steps, log, stopped


def _timing(
    steps: list[tuple[float, float, float]],
    tokens: int,
    flops: StepFlops,
    peak: Peak | None,
    dev: torch.device,
) -> dict[str, Any]:
    """The measured steps' seconds, their split, tokens/s (``tokens`` a step), MFU, peak
    memory and the hours of 1B and 100B tokens."""
    step_s = [x[0] for x in steps]
    mean_s = statistics.fmean(step_s)
    target_s = statistics.fmean(x[1] for x in steps)
    rows_s = statistics.fmean(x[2] for x in steps)
    draft_s = mean_s - target_s - rows_s
    tokens_per_s = tokens / mean_s
    memory, memory_kind = _peak_memory(dev)
    return {
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
    }


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every shape in turn; the JSON-able result (also written after each shape)."""
    t_start = T0
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
        **header("train", dev, args),
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
    write(result, args.out)
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
                free(dev)
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
        write(result, args.out)
    return result


def report(result: dict[str, Any]) -> None:
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


# --- arguments -------------------------------------------------------------------------------


def add_arguments(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """The ``train`` sub-command and its options (``common``: the options every check takes)."""
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


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill the train check's defaults (GPU or tiny) and check its arguments."""
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
