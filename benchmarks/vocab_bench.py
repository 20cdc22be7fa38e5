"""Benchmark: what a truncated draft vocabulary saves in training and decoding (EAGLE-3 style).

In one process, on the real target (SmolLM2-135M-Instruct, vocabulary 49,152) and its
real pretraining rows' most frequent tokens, for each draft vocabulary size N (0 = full):
- training: ms per optimiser step of the EAGLE loss (forward, backward, AdamW) on a batch of
  real packed rows with the target's hidden states, and the tokens/s it implies;
- decoding: ms per draft step (``topk`` new tokens, LM head and top-k, 128 cached positions).
Medians over repeats, interleaved across sizes so drift hits all equally. Acceptance length
for the same sizes comes from ``sweeps/vocab.yaml``.

    python -m benchmarks.vocab_bench --sizes 0 2048 8192 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks import harness
from workloads.data import read_sharegpt, split_conversations
from workloads.engine.step_cost import measure_step_cost
from workloads.training import rows as _rows
from workloads.training.features import target_hidden
from workloads.training.loop import draft_loss, make_optimizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 2048, 8192])
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=10)
    harness.add_threads(ap)
    harness.add_cache(ap, "--cache")
    args = ap.parse_args()
    target = harness.target(args.threads, args.cache)
    model = target.model
    convs, _ = read_sharegpt()
    rows = _rows.pretrain_rows(
        target.tokenizer, split_conversations(convs)["pretrain"], {"sharegpt": 0.8, "stdlib": 0.2},
        args.seq_len, 64, packing="isolated",
    )  # fmt: skip
    ids, mask, pos = rows.input_ids, rows.loss_mask, rows.position_ids
    hidden = target_hidden(model, ids[: args.batch_size], pos[: args.batch_size], args.batch_size)
    vocab = model.config.vocab_size
    counts = torch.bincount(ids.flatten(), minlength=vocab)
    order = torch.argsort(-counts * vocab + torch.arange(vocab))
    s = harness.stage_settings(args.batch_size)
    drafts = {}
    for n in args.sizes:
        keep = None if n == 0 else order[:n].sort().values
        drafts[n] = harness.fresh_draft(model, args.layers, keep)
    opts = {n: make_optimizer(d, s) for n, d in drafts.items()}
    train_ms: dict[int, list[float]] = {n: [] for n in drafts}
    decode_ms: dict[int, list[float]] = {n: [] for n in drafts}
    batch = (ids[: args.batch_size], mask[: args.batch_size], hidden)
    for r in range(args.repeats + 1):  # round 0 warms up
        for n, d in drafts.items():
            d.train()
            t0 = time.perf_counter()
            loss, _ = draft_loss(d, *batch, w_reg=1.0, w_cls=0.1, pos_bt=pos[: args.batch_size])
            opts[n].zero_grad(set_to_none=True)
            loss.backward()
            opts[n].step()
            dt = 1000 * (time.perf_counter() - t0)
            d.eval()
            cost = measure_step_cost(model, d, topk=4, num_draft_tokens=6, warmup=1, repeats=5)
            if r:
                train_ms[n].append(dt)
                decode_ms[n].append(cost.draft_ms)
    tokens = args.batch_size * args.seq_len
    full = statistics.median(train_ms[args.sizes[0]]), statistics.median(decode_ms[args.sizes[0]])
    print(f"draft layers {args.layers}, batch {args.batch_size}x{args.seq_len}, "
          f"{args.threads} threads, {args.repeats} repeats (medians)")  # fmt: skip
    print(f"{'N':>7} {'train ms/step':>14} {'train tok/s':>12} {'draft ms/step':>14} "
          f"{'train vs first':>15} {'decode vs first':>16}")  # fmt: skip
    for n in args.sizes:
        t, dms = statistics.median(train_ms[n]), statistics.median(decode_ms[n])
        label = f"{vocab} (full)" if n == 0 else str(n)
        print(f"{label:>7} {t:14.1f} {tokens / t * 1000:12.0f} {dms:14.2f} "
              f"{full[0] / t:14.2f}x {full[1] / dms:15.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
