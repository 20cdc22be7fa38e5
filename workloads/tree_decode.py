"""EAGLE-2 dynamic-tree speculative decoding at temperature 0, batch size 1.

Per cycle (Li et al., EAGLE-2, arXiv 2406.16858, Sec. 4; Scylla arXiv 2505.07858 Sec. 3):
1. draft prefill of the pairs (target hidden h_t, token x_{t+1}) the draft has not seen;
2. expansion: ``depth`` draft steps, each frontier node taking its ``topk`` children, the
   frontier being the ``topk`` best new nodes by cumulative log-probability;
3. rerank: keep the ``num_draft_tokens - 1`` best nodes (ancestor-closed) plus the root;
4. verify them in one target forward with a tree attention mask;
5. accept the longest path whose tokens equal the target's greedy choices, add the bonus token;
6. commit: keep the accepted path in the target KV cache, drop the tree from the draft cache.

Losslessness: every emitted token is the target's argmax given the accepted prefix, so the output
equals the target's greedy output (up to float rounding between batched and single-token forwards).

Shape legend: n tree nodes verified (root included), h hidden, N draft vocabulary, m committed
tokens before the root.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from workloads._kv import cache_len, causal_mask, crop_to, keep_positions, prefix_and_tree_mask
from workloads.draft_model import DraftModel


@dataclass
class DecodeResult:
    """Output of one speculative generation.

    Attributes:
        tokens: generated token ids (EOS included when generated).
        accept_lengths: per cycle, accepted draft tokens + 1 (the acceptance length tau).
        draft_s, verify_s, total_s: wall seconds in draft forwards, target forwards, overall.
    """

    tokens: list[int] = field(default_factory=list)
    accept_lengths: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0

    @property
    def acceptance_length(self) -> float:
        """Mean accepted tokens per cycle (accepted draft tokens + 1)."""
        return sum(self.accept_lengths) / max(len(self.accept_lengths), 1)


@dataclass
class _Tree:
    """Draft tree of one cycle; node 0 is the root (the last committed token)."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]
    scores: list[float]
    slots: dict[int, int] = field(default_factory=dict)  # node -> draft-cache slot past the prefix

    def add(self, token: int, parent: int, score: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.scores.append(score)
        return len(self.tokens) - 1

    def ancestors(self, node: int) -> list[int]:
        """The node and its ancestors, root excluded."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out


def _draft_children(
    draft: DraftModel, tree: _Tree, nodes: list[int], hidden_kh: torch.Tensor, topk: int
) -> list[int]:
    """Add the ``topk`` children of each of ``nodes`` (draft outputs ``hidden_kh``); return them."""
    logp_kn = torch.log_softmax(draft.logits(hidden_kh).float(), -1)
    top_lp, top_ix = logp_kn.topk(topk, -1)
    top_ids = draft.draft_to_target[top_ix]
    children = []
    for i, node in enumerate(nodes):
        for lp, tok in zip(top_lp[i].tolist(), top_ids[i].tolist(), strict=True):
            children.append(tree.add(tok, node, tree.scores[node] + lp))
    return children


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    draft: DraftModel,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    depth: int,
    topk: int,
    num_draft_tokens: int,
    eos_ids: frozenset[int],
) -> DecodeResult:
    """Generate up to ``max_new_tokens`` with tree speculative decoding at temperature 0.

    Args:
        target: the frozen target causal LM (``.model`` the decoder, ``.lm_head`` the head).
        draft: a trained (or fresh) draft for this target.
        prompt_ids: the prompt, already rendered with the chat template.
        depth, topk, num_draft_tokens: tree shape (``num_draft_tokens`` counts the root).
        eos_ids: generation stops after any of these tokens.
    """
    res, t0, dt = DecodeResult(), time.perf_counter(), target.dtype
    tgt_cache, dft_cache = DynamicCache(config=target.config), draft.new_cache()
    ids = torch.tensor([prompt_ids])
    h_th = target.model(input_ids=ids, cache=tgt_cache, use_cache=True).last_hidden_state[0]
    root = int(target.lm_head(h_th[-1]).argmax())
    res.tokens.append(root)
    pend_h, pend_x = h_th, prompt_ids[1:] + [root]  # (h_t, x_{t+1}) pairs the draft has not seen
    while root not in eos_ids and len(res.tokens) < max_new_tokens:
        m = cache_len(tgt_cache)  # committed tokens before the root; the root sits at position m
        td = time.perf_counter()
        # 1. draft prefill of the pending pairs -> the root's children
        d, n_new = cache_len(dft_cache), len(pend_x)
        out_h = draft(
            pend_h[None].to(dt),
            torch.tensor([pend_x]),
            torch.arange(d, d + n_new)[None],
            attention_mask=causal_mask(d, n_new, dt),
            cache=dft_cache,
        )[0]
        tree = _Tree(tokens=[root], parents=[-1], depths=[0], scores=[0.0])
        node_h = {0: out_h[-1]}  # node -> draft output after feeding it (predicts its child)
        frontier = _draft_children(draft, tree, [0], out_h[-1:], topk)
        # 2. expansion: feed the frontier, keep the topk best children as the next frontier
        for _ in range(depth - 1):
            slot0 = cache_len(dft_cache) - m
            tree.slots.update({node: slot0 + i for i, node in enumerate(frontier)})
            seen = torch.zeros(len(frontier), slot0 + len(frontier), dtype=torch.bool)
            for i, node in enumerate(frontier):
                seen[i, [tree.slots[a] for a in tree.ancestors(node)]] = True
            parent_kh = torch.stack([node_h[tree.parents[n]] for n in frontier])
            pos = torch.tensor([[m + tree.depths[n] - 1 for n in frontier]])
            f_kh = draft(
                parent_kh[None],
                torch.tensor([[tree.tokens[n] for n in frontier]]),
                pos,
                attention_mask=prefix_and_tree_mask(m, seen, dt),
                cache=dft_cache,
            )[0]
            node_h.update({n: f_kh[i] for i, n in enumerate(frontier)})
            children = _draft_children(draft, tree, frontier, f_kh, topk)
            frontier = sorted(children, key=lambda c: -tree.scores[c])[:topk]
        crop_to(dft_cache, m)
        # 3. rerank: best num_draft_tokens - 1 nodes; parents sort before children
        order = sorted(range(1, len(tree.tokens)), key=lambda c: (-tree.scores[c], tree.depths[c]))
        chosen = sorted(order[: num_draft_tokens - 1], key=lambda c: (tree.depths[c], c))
        nodes = [0] + chosen
        index = {node: i for i, node in enumerate(nodes)}
        tv = time.perf_counter()
        res.draft_s += tv - td
        # 4. verify root + chosen nodes in one target forward with the tree mask
        seen = torch.zeros(len(nodes), len(nodes), dtype=torch.bool)
        for i, node in enumerate(nodes):
            seen[i, [index[a] for a in tree.ancestors(node)] + [0]] = True
        pos = torch.tensor([[m + tree.depths[n] for n in nodes]])
        v_nh = target.model(
            input_ids=torch.tensor([[tree.tokens[n] for n in nodes]]),
            position_ids=pos,
            attention_mask=prefix_and_tree_mask(m, seen, dt),
            cache=tgt_cache,
            use_cache=True,
        ).last_hidden_state[0]
        greedy = target.lm_head(v_nh).argmax(-1).tolist()
        res.verify_s += time.perf_counter() - tv
        # 5. accept the longest path matching the target's greedy tokens, then the bonus token
        path, cur = [0], 0
        while True:
            nxt = [
                c
                for c in nodes[1:]
                if tree.parents[c] == nodes[cur] and tree.tokens[c] == greedy[cur]
            ]
            if not nxt:
                break
            cur = index[nxt[0]]
            path.append(cur)
        new = [tree.tokens[nodes[i]] for i in path[1:]] + [greedy[cur]]
        res.accept_lengths.append(len(new))
        # 6. commit: target cache keeps the path; truncate at EOS and max_new_tokens
        keep = torch.cat([torch.arange(m), m + torch.tensor(path)])
        keep_positions(tgt_cache, keep)
        for tok in new:
            res.tokens.append(tok)
            if tok in eos_ids or len(res.tokens) >= max_new_tokens:
                break
        root = res.tokens[-1]
        pend_h, pend_x = v_nh[path], new
    res.total_s = time.perf_counter() - t0
    return res
