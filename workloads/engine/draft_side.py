"""Steps 1 and 2 of a tree decoding cycle, the draft's side (:mod:`workloads.engine.tree_decode`
runs the cycle): the draft reads the pairs it has not seen, then expands the tree level by level.

Sources: Li et al., EAGLE-2 (arXiv 2406.16858) Sec. 4, the dynamic tree; Scylla (arXiv
2505.07858) Sec. 3. Shape legend: B rows, P pending pairs, h hidden.
"""

from __future__ import annotations

import torch

from workloads.engine.batch import Timer
from workloads.engine.steps import Steps
from workloads.engine.tree import DraftTree
from workloads.models.kv_cache import RaggedStaticCache, additive_mask


def draft_prefill(
    steps: Steps,
    dcache: RaggedStaticCache,
    pend_h: torch.Tensor,
    pend_x: torch.Tensor,
    pend_n: torch.Tensor,
    m: torch.Tensor,
    pend_host: list[int],
    top_k: int,
    eager: bool = False,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Step 1 of a cycle: the draft reads the pairs it has not seen and predicts the root's
    child. ``eager``: not compiled or captured (the prompt phase, whose lengths vary).

    Args:
        pend_h, pend_x, pend_n: [B, P, h] target hidden states at positions m - pend_n .. m - 1,
            [B, P] the token after each, [B] how many of the P are real (padded, masked; 0 for
            a frozen row); ``pend_host`` the same counts on the host.
        m: [B] position of each row's root (its last committed token).
        top_k: candidates to keep for the root's child.

    Returns:
        h_in [B, 1, h], the draft's hidden state at the root, and its ``top_k`` best children:
        log-probabilities [B, 1, top_k] and draft-vocabulary ids [B, 1, top_k].
    """
    b, p = pend_x.shape
    dev = pend_x.device
    j = torch.arange(p, device=dev)
    key_ok = j[None] < pend_n[:, None]
    causal = torch.ones(p, p, dtype=torch.bool, device=dev).tril()
    dcache.stage(p)
    mask = additive_mask(dcache.allowed(causal[None] & key_ok[:, None]), pend_h.dtype)
    step = steps.draft_eager if eager else steps.draft
    out = step(pend_h, pend_x, (m - pend_n)[:, None] + j, mask, dcache)
    dcache.commit(None, pend_n, pend_host)
    last = (pend_n - 1).clamp_min(0)[:, None, None].expand(b, 1, out.shape[2])
    h_in = out.gather(1, last)
    return h_in, steps.top_candidates(h_in, top_k)


def draft_tree(
    steps: Steps,
    dcache: RaggedStaticCache,
    root: torch.Tensor,
    m: torch.Tensor,
    h_in: torch.Tensor,
    top: tuple[torch.Tensor, torch.Tensor],
    depth: int,
    topk: int,
    timer: Timer,
) -> DraftTree:
    """Step 2 of a cycle: the tree expansion from the root's best children ``top``, ``depth``
    levels of ``topk`` children per frontier node (EAGLE-2's dynamic tree, Sec. 4).

    Args:
        root: [B] the last committed token of each row, at position ``m`` [B].
        h_in, top: [B, 1, h] and the root's children from :func:`draft_prefill`.

    Returns:
        The trees (draft forwards timed under ``draft``). The draft's cache is as before (the
        tree's slots are staged, then discarded).
    """
    b, dt = root.shape[0], h_in.dtype
    tree = DraftTree(root, depth, topk)
    d2t = steps.draft_to_target
    lp, ix = top[0][..., :topk], top[1][..., :topk]
    frontier = tree.add_children(torch.zeros_like(m)[:, None], lp, d2t[ix])
    h_in = h_in.expand(b, topk, -1).contiguous()  # the strides prepared steps were made for
    slot_nodes = frontier[:, :0]
    for _ in range(depth - 1):
        slot_nodes = torch.cat([slot_nodes, frontier], 1)
        n_all = tree.anc.shape[2]
        seen = tree.anc.gather(1, frontier[:, :, None].expand(b, topk, n_all))
        seen = seen.gather(2, slot_nodes[:, None, :].expand(b, topk, slot_nodes.shape[1]))
        dcache.stage(topk)
        mask = additive_mask(dcache.allowed(seen), dt)
        pos = (m + tree.level - 1)[:, None].expand(b, topk).contiguous()  # depth: a host int
        t = timer.mark()
        f_h = steps.draft(h_in, tree.tokens.gather(1, frontier), pos, mask, dcache)
        lp, ix = steps.top_candidates(f_h, topk)
        timer.add("draft", t)
        lo = tree.size
        tree.add_children(frontier, lp, d2t[ix])
        best = tree.scores[:, lo : tree.size].topk(topk, dim=1).indices
        frontier = lo + best
        h_in = f_h.gather(1, (best // topk)[:, :, None].expand(b, topk, f_h.shape[2]))
    dcache.discard()
    return tree
