"""GPU checks, one JSON each: draft training (issue 15, item 7) and decoding (issue 16, item 8).

``train`` measures, for each target shape (default: llama-3-8b, then smollm2-135m), a
random-weight target in bfloat16 (``workloads.target.random_config``, seeded initialisation on
the device) with :class:`~workloads.online_features.OnlineFeatures` (the target runs inside
each step)
and a 1-layer EAGLE draft trained by :func:`~workloads.training.train_stage` in bf16 autocast
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
llama-3-8b, bf16) with the oracle draft (:class:`~workloads.oracle_draft.OracleDraft`, each
proposal kept with probability ``--oracle-accept``, default 0.8), temperature 0, no EOS:

- HF ``generate`` greedy at b = 1;
- the engine's AR loop (:func:`~workloads.ar_decode.ar_generate`) and speculative decoding
  (:func:`~workloads.tree_decode.generate`, a chain of k - 1 proposals) in tokens/s over
  b in ``--batches`` (1, 8, 32, 64) x k in ``--ks`` (2, 4, ..., 64), with the per-cycle split
  (draft, verify, bookkeeping) and the acceptance length;
- per b: the measured best k beside the roofline's k_opt for the shape on ``--hardware``
  (:func:`workloads.roofline.k_opt`, the numbers of ``orchestrator roofline --model llama-3-8b
  --hardware h200``, at the mean prefix the rows decode over), and ``auto`` (k re-chosen each
  cycle from the live batch size by that k_opt, as ``decode.num_draft_tokens: auto`` with
  ``k_law: roofline``) against the best fixed k;
- the issue's GPU goals read off the result (``goals``): oracle b=1 >= 4x HF, bookkeeping
  <= 10% of a cycle at b=64, best k within one doubling of k_opt for b >= 8.

Each (b, k) cell gets an equal share of what is left of ``--budget-s`` (default 450 s, so the
check ends inside 8 minutes on one H200): one untimed call (compilation, graph capture, and the
oracle's knowledge of the cell's own greedy continuation), then timed calls until its share is
spent. ``--compile`` (none, graphs, compile) and ``--attn`` (sdpa, eager) pass to
the engine and the model. Without CUDA a tiny shape runs on the CPU (b 1, 4; k 2, 4, 8).

The GPU machine has torch, transformers, numpy, safetensors and filelock but not pydantic, Ray,
MLflow, SQLAlchemy or Optuna: the script imports only the ``workloads`` modules it needs
(``target``, ``features``, ``online_features``, ``draft_model``, ``training``, ``roofline``,
``oracle_draft``, ``ar_decode``, ``tree_decode``), none of which needs those packages
(``workloads/__init__.py`` imports nothing eagerly; a test runs the script with them blocked).

    python benchmarks/gpu_check.py train --out gpu_check.json
    python benchmarks/gpu_check.py decode --out gpu_check_decode.json
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn, cast

_T0 = time.perf_counter()  # the budget counts from here, torch's import included

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from transformers import LlamaConfig, PretrainedConfig  # noqa: E402

from workloads.ar_decode import ar_generate  # noqa: E402
from workloads.data.packing import InMemoryRows, PackedRows  # noqa: E402
from workloads.draft_model import DraftArch, DraftModel  # noqa: E402
from workloads.features import FeatureSet  # noqa: E402
from workloads.online_features import OnlineFeatures  # noqa: E402
from workloads.oracle_draft import OracleDraft  # noqa: E402
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
from workloads.target import random_config, random_model  # noqa: E402
from workloads.training import StageLog, StageSettings, make_optimizer, train_stage  # noqa: E402
from workloads.tree_decode import BatchResult, TreeShape, generate  # noqa: E402

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
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, out)


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

        return {
            "tokens_per_s": self.tokens / self.total_s if self.total_s > 0 else None,
            "acceptance_length": self.accepted / self.row_cycles if self.row_cycles else None,
            "ms_per_cycle": 1000 * cyc / self.cycles if self.cycles else None,
            "prefill_share_of_total": self.prefill_s / self.total_s if self.total_s > 0 else None,
            "draft_share": share(self.draft_s),
            "verify_share": share(self.verify_s),
            "bookkeeping_share": share(book),
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


def _hf_generate(
    model: Any, prompt: list[int], n: int, dev: torch.device
) -> tuple[list[int], float]:
    """HF ``generate`` greedy, exactly ``n`` new tokens (the model's EOS is unset): ids, seconds."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt], device=dev),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=dev),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            pad_token_id=0,
        )
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return out[0, len(prompt) :].tolist(), time.perf_counter() - t0


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


def decode(args: argparse.Namespace) -> dict[str, Any]:
    """The decode check: HF ``generate`` at b=1, the engine's AR loop and the oracle at each
    (b, k), ``auto`` k per b; the JSON-able result (also written after each batch size)."""
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
            "oracle wrong). tokens/s = generated tokens of the batch / wall seconds of the "
            "whole call (prefill included); shares are of the time after the prefill."
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
    n, eos, extra = args.max_new_tokens, frozenset[int](), {"compile": args.compile}
    clock = _Clock(deadline, 1 + len(args.batches) * (len(args.ks) + 2))

    def spec(batch: list[list[int]], known: list[list[int]], k: int | None) -> BatchResult:
        seqs = [p + r for p, r in zip(batch, known, strict=True)]
        oracle = OracleDraft(seqs, vocab, accept=args.oracle_accept, seed=args.seed).to(dev)
        tree = _chain(k) if k is not None else (lambda b: _chain(law(b)))
        return generate(
            model, cast(Any, oracle), batch, max_new_tokens=n, shape=tree, eos_ids=eos, **extra
        )

    # HF generate at b=1 (the first prompts in turn, one warm-up)
    budget = clock.cell_budget()
    hf, hf_refs = Cell(), []
    t0 = time.perf_counter()
    try:
        _hf_generate(model, prompts[0][:8], 2, dev)
        for p in prompts:
            toks, sec = _hf_generate(model, p, n, dev)
            hf_refs.append(toks)
            hf.calls, hf.tokens = hf.calls + 1, hf.tokens + len(toks)
            hf.total_s += sec
            if time.perf_counter() - t0 + sec > budget:
                break
    except Exception as e:  # noqa: BLE001 - recorded in the JSON; the engine still runs
        result["errors"].append(f"HF generate: {type(e).__name__}: {e}")
        result["tracebacks"].append(traceback.format_exc())
    result["hf_generate_b1"] = hf.row() | {"mismatches": None}
    for b in args.batches:
        batch = prompts[:b]
        entry: dict[str, Any] = {"b": b, "ar": None, "spec": {}, "auto": None}
        result["batches"].append(entry)
        budget = clock.cell_budget()
        if budget <= 0:
            clock.left -= len(args.ks) + 1
            result["errors"].append(f"b={b}: not measured, the budget was spent")
            continue
        try:
            t0 = time.perf_counter()
            ar_call = functools.partial(
                ar_generate, model, batch, max_new_tokens=n, eos_ids=eos, **extra
            )
            refs = ar_call().tokens  # warm-up; the references
            ar = _timed(ar_call, refs, budget - (time.perf_counter() - t0), args.calls)
            entry["ar"] = ar.row() | {"ratio_over_ar": 1.0}
            if b == 1:
                entry["ar"]["mismatches_vs_hf"] = sum(
                    o != r for o, r in zip(refs, hf_refs[:1], strict=False)
                )
            base = ar.row()["tokens_per_s"]
            cases: list[int | None] = [*args.ks, None]
            for k in cases:
                name = "auto" if k is None else str(k)
                budget = clock.cell_budget()
                if budget <= 0:
                    result["errors"].append(f"b={b} k={name}: not measured, the budget was spent")
                    continue
                try:
                    t0 = time.perf_counter()
                    known = spec(batch, refs, k).tokens  # warm-up; the oracle's continuation
                    cell = _timed(
                        functools.partial(spec, batch, known, k),
                        refs,
                        budget - (time.perf_counter() - t0),
                        args.calls,
                    )
                except torch.OutOfMemoryError:
                    _free(dev)
                    result["errors"].append(f"b={b} k={name}: out of memory")
                    continue
                row = cell.row()
                row["ratio_over_ar"] = row["tokens_per_s"] / base if base else None
                if k is None:
                    row["k_at_b"] = law(b)  # fewer rows, as they finish, may take other k
                    entry["auto"] = row
                else:
                    entry["spec"][name] = row
        except Exception as e:  # noqa: BLE001 - recorded in the JSON; the next b runs
            result["errors"].append(f"b={b}: {type(e).__name__}: {e}")
            result["tracebacks"].append(traceback.format_exc())
            _free(dev)
        _summarise(entry, result["roofline_k_opt"].get(str(b)))
        result["elapsed_s"] = time.perf_counter() - t_start
        _write(result, args.out)
    result["goals"] = _goals(result)
    result["elapsed_s"] = time.perf_counter() - t_start
    _write(result, args.out)
    return result


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


def _goals(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's GPU goals, read off the result (None where not measured)."""
    by_b = {e["b"]: e for e in result["batches"]}
    hf = (result.get("hf_generate_b1") or {}).get("tokens_per_s")
    b1 = by_b.get(1, {}).get("best_tokens_per_s")
    big = by_b.get(max(by_b)) if by_b else None
    book = None
    if big and big.get("best_k") is not None:
        book = big["spec"][str(big["best_k"])]["bookkeeping_share"]
    within = {str(b): e.get("best_k_within_one_doubling") for b, e in by_b.items() if b >= 8}
    return {
        "b1_best_over_hf_generate": b1 / hf if b1 and hf else None,
        "b1_goal": ">= 4",
        f"bookkeeping_share_at_b{max(by_b) if by_b else 0}_best_k": book,
        "bookkeeping_goal": "<= 0.10",
        "best_k_within_one_doubling_of_k_opt": within or "n/a: no b >= 8 measured",
    }


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _report_decode(result: dict[str, Any]) -> None:
    hw = result.get("hardware", {})
    print(
        f"gpu_check decode on {result['device']} (torch {result['versions']['torch']}, "
        f"transformers {result['versions']['transformers']}); shape {result['shape']}, "
        f"roofline {hw.get('name')} (I_crit {_fmt(hw.get('i_crit'), '.0f')} FLOP/byte, "
        f"prefix s={result.get('roofline_prefix_s')})"
    )
    hf = result.get("hf_generate_b1") or {}
    print(f"HF generate b=1: {_fmt(hf.get('tokens_per_s'), '.1f')} tok/s")
    head = f"{'b':>3} {'method':>10} {'tok/s':>9} {'x AR':>6} {'tau':>5} {'ms/cyc':>7}"
    print(head + f" {'draft':>6} {'verify':>6} {'book':>6} {'calls':>5} {'mism':>4}")
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
                f"{_fmt(r['bookkeeping_share'], '.0%'):>6} {r['calls']:>5} {r['mismatches']:>4}"
            )
        if "best_k" in e:
            above = e.get("k_opt") is not None and e.get("best_k_within_one_doubling") is None
            print(
                f"    b={e['b']}: best fixed k={e['best_k']} "
                f"({_fmt(e['best_ratio_over_ar'], '.2f')}x AR), roofline k_opt="
                f"{e.get('k_opt', 'n/a')}{' (not reached: above the k scanned)' if above else ''}"
                f", auto/best {_fmt(e.get('auto_over_best'), '.2f')}"
            )
    for key, value in result.get("goals", {}).items():
        print(f"  goal {key}: {value}")
    if result.get("note"):
        print(f"  note: {result['note']}")
    for err in result["errors"]:
        print(f"  note: {err}")


def _int_list(text: str) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers") from None
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} holds no integer")
    return values


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
    de.add_argument("--budget-s", type=float, help="stop measuring in time (450; tiny 60)")
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
        "budget_s": (60.0, 450.0),
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
    if args.compile == "graphs" and args.device != "cuda":
        ap.error(
            "--compile graphs captures CUDA graphs and this run is on the CPU. "
            "Fix: --compile compile (torch.compile) or --compile none"
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
        ok = any(e.get("best_k") for e in result["batches"]) and not result["tracebacks"]
    else:
        result = train(args)
        _report(result)
        ok = bool(result["shapes"]) and not result["tracebacks"]
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
