"""Benchmark: SFT reply regeneration (``sft.responses: target``) by this platform's batched AR
loop (the default path, :mod:`workloads.training.regenerate`) against a vLLM server without
speculation (what SpecForge and ``speculators`` regenerate with), in one run.

The same first-turn prompts of the SFT split (chat template applied, token ids), greedy,
``--max-new-tokens`` each: tokens/s of each path (vLLM's start-up reported apart and, in
``with start-up``, added), and how many replies are identical token for token (the rest: the
position of the first difference). Writes ``<out>/regen_bench.json``.

    python -m benchmarks.regen_bench --prompts 32 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import harness


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", type=int, default=32, help="SFT prompts (default 32)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens per reply at most")
    p.add_argument("--batch-size", type=int, default=16, help="AR batch = vLLM concurrency")
    harness.add_threads(p, 1, "torch threads (vLLM computes on 1)")
    harness.add_cache(p, help="converted target")
    harness.add_out(p, Path("runs-serve/regen"), "output folder")
    a = p.parse_args(argv)
    if min(a.prompts, a.max_new_tokens, a.batch_size, a.threads) < 1:
        return harness.refusal("regen_bench", "every number must be >= 1")
    import torch

    from workloads.config import TargetConfig
    from workloads.data.sharegpt import read_sharegpt, split_conversations
    from workloads.engine.ar_decode import ar_generate
    from workloads.serving.bench import SERVED_NAME, served_target_path
    from workloads.serving.env import find_env
    from workloads.serving.server import VllmServer

    env = find_env("auto")
    target = harness.target(a.threads, a.cache_dir, "smollm2-135m-instruct")
    sft = split_conversations(read_sharegpt()[0])["sft"]
    prompts = harness.sft_prompts(target.tokenizer, sft[: 4 * a.prompts], a.prompts, 512)
    eos = target.eos_token_ids

    t0, ours = time.perf_counter(), []
    for i in range(0, len(prompts), a.batch_size):
        batch = prompts[i : i + a.batch_size]
        with torch.inference_mode():
            res = ar_generate(target.model, batch, max_new_tokens=a.max_new_tokens, eos_ids=eos)
        ours += [list(t) for t in res.tokens]
    ours_s = time.perf_counter() - t0

    a.out.mkdir(parents=True, exist_ok=True)
    server = VllmServer(
        python=env.python, model=served_target_path(TargetConfig(), a.cache_dir),
        args=["--served-model-name", SERVED_NAME, "--dtype", "float32", "--max-model-len",
              "2048", "--max-num-seqs", str(a.batch_size)],
        log_path=a.out / "server.log", env={"VLLM_CPU_KVCACHE_SPACE": "2"},
    )  # fmt: skip
    with server:

        def ask(ids: list[int]) -> list[int]:
            body = {"model": SERVED_NAME, "prompt": ids, "max_tokens": a.max_new_tokens,
                    "temperature": 0.0, "return_token_ids": True}  # fmt: skip
            return [int(t) for t in server.post("/v1/completions", body)["choices"][0]["token_ids"]]

        t0 = time.perf_counter()
        with ThreadPoolExecutor(a.batch_size) as pool:
            theirs = list(pool.map(ask, prompts))
        vllm_s = time.perf_counter() - t0
    trimmed = [r[: next((i + 1 for i, t in enumerate(r) if t in eos), len(r))] for r in ours]
    same = sum(x == y for x, y in zip(trimmed, theirs, strict=True))
    first_diff = [
        next((i for i, (u, v) in enumerate(zip(x, y, strict=False)) if u != v), min(len(x), len(y)))
        for x, y in zip(trimmed, theirs, strict=True) if x != y
    ]  # fmt: skip
    n_ours, n_vllm = sum(map(len, trimmed)), sum(map(len, theirs))
    out = {
        "prompts": len(prompts), "max_new_tokens": a.max_new_tokens, "batch_size": a.batch_size,
        "threads": a.threads, "ar_tokens": n_ours, "ar_s": ours_s,
        "ar_tokens_per_s": n_ours / ours_s,
        "vllm_tokens": n_vllm, "vllm_s": vllm_s, "vllm_tokens_per_s": n_vllm / vllm_s,
        "vllm_startup_s": server.startup_s,
        "vllm_tokens_per_s_with_startup": n_vllm / (vllm_s + server.startup_s),
        "identical_replies": same, "first_difference_at": first_diff,
    }  # fmt: skip
    harness.write_json(a.out / "regen_bench.json", out, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
