"""The HF ``generate`` baseline every benchmark times beside this engine (the ``decode_bench``
workload, ``benchmarks/decode_bench.py``, ``benchmarks/gpu_check.py``): torch and transformers
only, so a bare GPU node runs it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["hf_generate"]


def hf_generate(
    model: Any,
    prompt: list[int],
    n: int,
    *,
    eos_ids: Iterable[int] = (),
    temperature: float = 0.0,
) -> tuple[list[int], float]:
    """HF ``generate`` of one prompt, the baseline every benchmark times (not cached): the new
    ids and the seconds (CUDA synchronised before and after). Greedy at temperature 0, else
    sampling at it (no top-k/top-p), as the engine decodes; stops at ``eos_ids``, or with none
    given generates exactly ``n`` tokens."""
    dev = model.device
    eos = sorted(eos_ids)
    stop = (
        {"eos_token_id": eos, "pad_token_id": eos[0]}
        if eos
        else {"min_new_tokens": n, "pad_token_id": 0}
    )
    sampling = {"do_sample": True, "temperature": temperature, "top_k": None, "top_p": None}
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt], device=dev),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=dev),
            max_new_tokens=n,
            **(sampling if temperature > 0 else {"do_sample": False}),
            **stop,
        )
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return out[0, len(prompt) :].tolist(), time.perf_counter() - t0
