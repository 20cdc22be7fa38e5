"""Benchmark: what each part of the issue-13 draft recipe costs, as ratios from one run.

On the real target (SmolLM2-135M-Instruct) and real packed pretraining rows (the ``--rows`` rows
with the most document boundaries among the first 16x as many), in one process:
- target features: ms per batch of rows with isolated packing (block-diagonal mask, positions
  restarting per document) vs joined packing (plain causal attention), same tokens;
- draft training: ms per optimiser step (EAGLE loss, backward, AdamW) isolated vs joined rows,
  and with EAGLE's feature noise (0.2) vs without;
- regeneration: the target's own SFT replies, tokens/s of the engine's batched AR loop at the
  batch size the recipe uses (16) against one prompt at a time (the same loop at b = 1).
Medians over repeats, interleaved so that drift hits every variant alike.

    python -m benchmarks.recipe_cost --threads 2
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from benchmarks import harness
from workloads.data import PackedRows, read_sharegpt, split_conversations
from workloads.engine.ar_decode import ar_generate
from workloads.training import rows as _rows
from workloads.training.features import target_hidden
from workloads.training.loop import draft_loss, input_noise, make_optimizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4, help="rows per target batch and draft step")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--regen-prompts", type=int, default=16)
    ap.add_argument("--regen-tokens", type=int, default=32)
    harness.add_threads(ap)
    harness.add_cache(ap, "--cache")
    args = ap.parse_args()
    if args.rows < 1 or args.seq_len < 16 or args.repeats < 1 or args.regen_prompts < 1:
        ap.error("--rows, --repeats and --regen-prompts must be >= 1, --seq-len >= 16")
    target = harness.target(args.threads, args.cache)
    model, tok = target.model, target.tokenizer
    splits = split_conversations(read_sharegpt()[0])
    mix = {"sharegpt": 0.8, "stdlib": 0.2}
    n_rows = 16 * args.rows
    packed = {
        p: _rows.pretrain_rows(tok, splits["pretrain"], mix, args.seq_len, n_rows, packing=p)
        for p in ("isolated", "joined")
    }
    # the rows with the most document boundaries (most rows hold one piece of one document)
    segments = (packed["isolated"].position_ids == 0).sum(-1)
    pick = torch.argsort(-segments, stable=True)[: args.rows]
    rows = {
        p: PackedRows(r.input_ids[pick], r.loss_mask[pick], r.position_ids[pick])
        for p, r in packed.items()
    }
    docs = int(segments[pick].sum())

    def features(packing: str) -> Callable[[], object]:
        r = rows[packing]
        return lambda: target_hidden(model, r.input_ids, r.position_ids, args.rows)

    feats = harness.median_ms({p: features(p) for p in rows}, args.repeats)
    hidden = {
        p: target_hidden(model, r.input_ids, r.position_ids, args.rows) for p, r in rows.items()
    }
    draft = harness.fresh_draft(model)
    opt = make_optimizer(draft, harness.stage_settings(args.rows))
    gen = torch.Generator().manual_seed(0)

    def step(packing: str, noise: float) -> None:
        r = rows[packing]
        h = hidden[packing]
        b, t, width = h.shape
        n = input_noise(torch.Size((b, t - 2, width)), noise, gen, seq_len=t) if noise else None
        loss, _ = draft_loss(draft, r.input_ids, r.loss_mask, h, w_reg=1.0, w_cls=0.1,
                             pos_bt=r.position_ids, noise_bth=n)  # fmt: skip
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    train = harness.median_ms(
        {
            "joined": lambda: step("joined", 0.0),
            "isolated": lambda: step("isolated", 0.0),
            "isolated+noise": lambda: step("isolated", 0.2),
        },
        args.repeats,
    )
    prompts = harness.sft_prompts(tok, splits["sft"], args.regen_prompts, 256)
    eos = target.eos_token_ids

    def regen(batch: int) -> tuple[int, float]:
        t0, generated = time.perf_counter(), 0
        for i in range(0, len(prompts), batch):
            out = ar_generate(model, prompts[i : i + batch], max_new_tokens=args.regen_tokens,
                              eos_ids=eos)  # fmt: skip
            generated += out.generated
        return generated, time.perf_counter() - t0

    batched, single = regen(16), regen(1)
    fast, slow = batched[0] / batched[1], single[0] / single[1]
    tokens = args.rows * args.seq_len
    print(f"{args.rows} rows x {args.seq_len} tokens ({docs} document pieces when isolated), "
          f"{args.threads} threads, medians of {args.repeats}")  # fmt: skip
    print(f"target features  joined {feats['joined']:8.1f} ms  isolated "
          f"{feats['isolated']:8.1f} ms  isolated/joined {feats['isolated'] / feats['joined']:.2f}x"
          f"  ({tokens / feats['isolated'] * 1000:.0f} tokens/s isolated)")  # fmt: skip
    print(f"draft train step joined {train['joined']:8.1f} ms  isolated {train['isolated']:8.1f} ms"
          f"  isolated+noise {train['isolated+noise']:8.1f} ms  isolated/joined "
          f"{train['isolated'] / train['joined']:.2f}x  noise/none "
          f"{train['isolated+noise'] / train['isolated']:.2f}x")  # fmt: skip
    print(f"regeneration     b=16 {fast:6.1f} tokens/s  b=1 {slow:6.1f} tokens/s  "
          f"({len(prompts)} prompts, <= {args.regen_tokens} tokens each)  batched/single "
          f"{fast / slow:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
