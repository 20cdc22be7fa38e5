"""Benchmark: how far rounding moves a target's top-2 logit gap, per dtype (the near-tie rule).

Speculative decoding verifies a tree of n tokens in one forward, while the greedy reference
decodes one token per forward over a KV cache; the two round differently, so the top-2 order can
flip where the target's top-2 gap is tiny (DESIGN.md, near-ties). How tiny, per dtype, is
measured here rather than assumed. For each target and dtype, on real prompts (spec-bench sets)
and their greedy continuations, the logits at every generated position are computed three ways:
one token per forward over a cache (the reference's way), chunks of ``--chunk`` tokens over a
cache (a verify step's way) and one full forward. For the reference's top-2 tokens at each
position the gap change ``|gap_ref - gap_other|`` is expressed in units of the dtype's spacing at
the top logit (:func:`workloads.training.evaluation.near_tie_threshold`'s unit), and the script
prints its maximum, 99.9th percentile and the argmax flips seen, per target and dtype. The
near-tie rule's constants (``NEAR_TIE_ULPS`` in ``workloads/training/evaluation.py``) come from
these figures.

    python -m benchmarks.near_tie_rounding --targets smollm2-135m-instruct gemma-3-270m \
        --dtypes float32 bfloat16 --prompts 8 --new-tokens 48
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from transformers import DynamicCache

from benchmarks import harness
from workloads.data import chat_prompt_ids, load_prompt_sets
from workloads.models.target import load_target
from workloads.training.evaluation import greedy_reference

SPECBENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "specbench"


@torch.inference_mode()
def _chunked(model: torch.nn.Module, ids: list[int], start: int, chunk: int) -> torch.Tensor:
    """Logits [len(ids) - start, V] (float32) at positions start-1 .. len-2: the prompt up to
    ``start`` in one forward, then ``chunk`` tokens per forward over a KV cache."""
    cache = DynamicCache()
    x = torch.tensor([ids])
    out = [model(input_ids=x[:, :start], past_key_values=cache, use_cache=True).logits[0, -1:]]
    for i in range(start, len(ids) - 1, chunk):
        j = min(i + chunk, len(ids) - 1)
        out.append(model(input_ids=x[:, i:j], past_key_values=cache, use_cache=True).logits[0])
    return torch.cat(out).float()


def _ulps(top: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The dtype's spacing at each top logit's magnitude [P]."""
    exp = torch.floor(torch.log2(top.abs().clamp_min(1e-30)))
    return torch.finfo(dtype).eps * torch.pow(2.0, exp)


def measure(name: str, dtype: str, prompts: list[str], new_tokens: int, chunk: int,
            cache: Path) -> dict[str, object]:  # fmt: skip
    """Gap changes (in spacings) of chunked and full forwards against one-token forwards."""
    target = load_target(name, cache_dir=cache, dtype=dtype)
    model, dt = target.model, target.model.dtype
    moved: dict[str, list[float]] = {"chunked": [], "full": []}
    flips: dict[str, list[float]] = {"chunked": [], "full": []}
    for text in prompts:
        prompt = chat_prompt_ids(target.tokenizer, text)
        ref, _ = greedy_reference(
            model, prompt, max_new_tokens=new_tokens, eos_ids=target.eos_token_ids,
            cache_dir=cache, target_name=f"{name}@{dtype}",
        )  # fmt: skip
        ids, start = prompt + ref, len(prompt)
        one = _chunked(model, ids, start, 1)
        others = {"chunked": _chunked(model, ids, start, chunk), "full": None}
        with torch.inference_mode():
            full = model(input_ids=torch.tensor([ids])).logits[0, start - 1 : -1].float()
        others["full"] = full
        top2 = one.topk(2, -1)
        i1, i2 = top2.indices[:, 0:1], top2.indices[:, 1:2]
        gap_ref = top2.values[:, 0] - top2.values[:, 1]
        unit = _ulps(top2.values[:, 0], dt)
        for kind, logits in others.items():
            assert logits is not None
            gap = (logits.gather(1, i1) - logits.gather(1, i2))[:, 0]
            moved[kind] += ((gap - gap_ref).abs() / unit).tolist()
            flip = logits.argmax(-1) != one.argmax(-1)
            flips[kind] += (gap_ref[flip] / unit[flip]).tolist()
    row: dict[str, object] = {"target": name, "dtype": dtype, "positions": len(moved["full"])}
    for kind in moved:
        vals = sorted(moved[kind])
        q = vals[min(len(vals) - 1, math.ceil(0.999 * len(vals)) - 1)]
        row[f"{kind}.max_ulps"] = round(vals[-1], 2)
        row[f"{kind}.p999_ulps"] = round(q, 2)
        row[f"{kind}.flips"] = len(flips[kind])
        row[f"{kind}.flip_gaps_ulps"] = [round(g, 2) for g in flips[kind]]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", nargs="+", default=["smollm2-135m-instruct", "gemma-3-270m"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=8, help="prompts (round robin over sets)")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--chunk", type=int, default=8, help="tokens per verify-like forward")
    harness.add_threads(ap)
    harness.add_cache(ap, "--cache")
    harness.add_out(ap, None, "write the rows as JSON here too")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sets = load_prompt_sets(SPECBENCH, n=args.prompts)
    texts = [p for group in zip(*(s.prompts for s in sets), strict=False) for p in group]
    rows = []
    for name in args.targets:
        for dtype in args.dtypes:
            row = measure(name, dtype, texts[: args.prompts], args.new_tokens, args.chunk,
                          args.cache)  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        harness.write_json(args.out, rows)


if __name__ == "__main__":
    main()
