"""GPU checks, one JSON each: draft training and decoding.

``train`` (:mod:`benchmarks.gpu.train_check`) measures draft training on online features for
each target shape: tokens/s, the time split per step, MFU, peak memory, hours per 1B and 100B
tokens. ``decode`` (:mod:`benchmarks.gpu.decode_check`, with :mod:`benchmarks.gpu.cells` and
:mod:`benchmarks.gpu.modes`) measures the decoding engine: HF ``generate``, the AR loop and
speculative decoding with an oracle draft over b x k, the best k beside the roofline's k_opt,
and each step mode (none, graphs, compile) with the oracle and a trained-shape draft. Without
CUDA (or with ``--tiny``) a tiny LLaMA shape runs on the CPU instead. This file is the command
line; each check's module says what it measures.

Needs only torch, transformers, numpy, safetensors and filelock (not pydantic, Ray, MLflow,
SQLAlchemy or Optuna): it imports only ``benchmarks/gpu/`` and the ``workloads`` modules that
need none of those.

    python -m benchmarks.gpu_check train --out gpu_check.json
    python -m benchmarks.gpu_check decode --out gpu_check_decode.json

(from the repository root: it needs no install, only the folder).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmarks.gpu.common import T0  # noqa: F401  (first: the budget counts from here)

# isort: split
import torch  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.gpu import decode_check, train_check  # noqa: E402


def _args(argv: list[str]) -> argparse.Namespace:
    ap = harness.parser("gpu_check", description=__doc__.split("\n\n")[0])
    common = harness.parser("gpu_check", add_help=False)
    common.add_argument("--out", type=Path, help="the JSON (default $OUT/gpu_check.json if $OUT)")
    common.add_argument("--tiny", action="store_true", help="a tiny shape (implied without CUDA)")
    common.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    common.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    common.add_argument("--seed", type=int, default=0)
    sub = ap.add_subparsers(dest="command", required=True, metavar="command")
    train_check.add_arguments(sub, common)
    decode_check.add_arguments(sub, common)
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
        decode_check.check_args(ap, args)
    else:
        train_check.check_args(ap, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _args(sys.argv[1:] if argv is None else argv)
    if args.command == "decode":
        result = decode_check.decode(args)
        decode_check.report(result)
        goals = result.get("goals", {})
        ok = (
            any(e.get("best_k") for e in result["batches"])
            and not result["tracebacks"]
            and goals.get("steps_prepared_outside_timers") is not False
            and goals.get("trained_draft_fp32_buffers_kept") is not False
        )
    else:
        result = train_check.train(args)
        train_check.report(result)
        ok = bool(result["shapes"]) and not result["tracebacks"]
    if args.out is not None:
        print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
