"""What both GPU checks share: the budget's start, the tiny CPU stand-in, the JSON's header and
its writing, freeing the device between measurements."""

from __future__ import annotations

import argparse
import gc
import platform
import time
from pathlib import Path
from typing import Any

T0 = time.perf_counter()  # the budget counts from here, torch's import included

import torch  # noqa: E402
from transformers import LlamaConfig, PretrainedConfig  # noqa: E402

from workloads.files import atomic_json  # noqa: E402
from workloads.models.target import random_config  # noqa: E402

__all__ = ["T0", "TINY", "free", "header", "target_config", "write"]


TINY = "tiny-llama"
"""the CPU stand-in: a 2-layer LLaMA of width 64 (see :func:`target_config`)"""


def target_config(shape: str) -> PretrainedConfig:
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


def header(check: str, dev: torch.device, args: argparse.Namespace) -> dict[str, Any]:
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


def write(result: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_json(out, result)


def free(dev: torch.device) -> None:
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
