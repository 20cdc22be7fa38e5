"""Draft trees of a batch as tensors, and the accept rules of tree verification (private).

Every row grows a tree of the same shape (EAGLE-2 dynamic tree, arXiv 2406.16858 Sec. 4): node 0
is the root (the last committed token), the ``topk`` children of the root come next, then each
expansion step adds ``topk`` children to each of the ``topk`` frontier nodes. So node indices
are ordered by depth, and the depth of a node index is the same in every row; which node is whose
parent differs per row.

Shape legend: B rows, N tree nodes (root included), K frontier nodes, n verified nodes, V vocab.
"""

from __future__ import annotations

import torch


def max_nodes(depth: int, topk: int) -> int:
    """Nodes of a tree of ``depth`` expansion steps: 1 + topk + (depth - 1) * topk**2."""
    return 1 + topk + (depth - 1) * topk * topk


class DraftTree:
    """Tokens, parents, cumulative log-probabilities and ancestor sets of B trees."""

    def __init__(self, root_b: torch.Tensor, depth: int, topk: int) -> None:
        b, n = root_b.shape[0], max_nodes(depth, topk)
        dev = root_b.device
        self.size = 1
        self.level = 0  # depth of the newest nodes, on the host (no device read per level)
        self.tokens = torch.zeros(b, n, dtype=torch.long, device=dev)
        self.tokens[:, 0] = root_b
        self.parents = torch.zeros(b, n, dtype=torch.long, device=dev)
        self.scores = torch.full((b, n), -torch.inf, device=dev)
        self.scores[:, 0] = 0.0
        self.depths = torch.zeros(n, dtype=torch.long, device=dev)
        self.anc = torch.zeros(b, n, n, dtype=torch.bool, device=dev)  # [B, N, N] ancestor-or-self
        self.anc[:, 0, 0] = True

    def add_children(
        self, parents_bk: torch.Tensor, logp_bkt: torch.Tensor, ids_bkt: torch.Tensor
    ) -> torch.Tensor:
        """Add child j of parent i with token ``ids[:, i, j]``; return the new nodes [B, K*t].
        The parents are the newest nodes (the root, then each expansion's frontier)."""
        b, k, t = ids_bkt.shape
        lo, hi = self.size, self.size + k * t
        par = parents_bk[:, :, None].expand(b, k, t).reshape(b, k * t)
        self.tokens[:, lo:hi] = ids_bkt.reshape(b, -1)
        self.parents[:, lo:hi] = par
        self.scores[:, lo:hi] = (self.scores.gather(1, parents_bk)[:, :, None] + logp_bkt).reshape(
            b, -1
        )
        self.level += 1
        self.depths[lo:hi] = self.level
        n = self.anc.shape[1]
        self.anc[:, lo:hi] = self.anc.gather(1, par[:, :, None].expand(b, k * t, n))
        self.anc[:, torch.arange(lo, hi), torch.arange(lo, hi)] = True
        self.size = hi
        return torch.arange(lo, hi, device=ids_bkt.device).expand(b, -1)

    def best(self, n: int) -> torch.Tensor:
        """Root + the ``n - 1`` best other nodes by score, ascending node index: [B, n'].

        A child never scores above its parent (log-probabilities are <= 0) and a stable sort
        keeps the parent first on ties, so the selection is closed under ancestors.
        """
        n = min(n, self.size)
        order = torch.sort(self.scores[:, 1 : self.size], dim=1, descending=True, stable=True)
        chosen = torch.sort(order.indices[:, : n - 1] + 1, dim=1).values
        return torch.cat([torch.zeros_like(chosen[:, :1]), chosen], dim=1)

    def selected(self, sel_bn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For the nodes ``sel`` [B, n]: tokens [B, n], depths [B, n], ancestor mask [B, n, n]."""
        b, n = sel_bn.shape
        rows = self.anc.gather(1, sel_bn[:, :, None].expand(b, n, self.anc.shape[2]))
        return (
            self.tokens.gather(1, sel_bn),
            self.depths[sel_bn],
            rows.gather(2, sel_bn[:, None].expand(b, n, n)),
        )

    def local_parents(self, sel_bn: torch.Tensor) -> torch.Tensor:
        """Index within ``sel`` of each selected node's parent ([B, n]; the root's is 0)."""
        par = self.parents.gather(1, sel_bn)
        return torch.searchsorted(sel_bn, par).clamp_max(sel_bn.shape[1] - 1)


_BLOCK = 256
"""tokens per block of the two-level inverse-CDF draw of the bonus token"""


def accept_greedy(
    tokens_bn: torch.Tensor,
    depth_bn: torch.Tensor,
    lpar_bn: torch.Tensor,
    logits_bnv: torch.Tensor,
    max_depth: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature 0: the deepest node whose path matches the target's argmax at every step.

    ``logits_bnv`` may be in the target's dtype (bfloat16: the argmax is that of the float32
    upcast, no [B, n, V] float32 copy) and on another device than the tree (a spread target's
    LM head): only the argmax [B, n] moves. ``max_depth``: the tree's depth (a host int).

    Returns:
        last [B]: index (within the verified nodes) of the last accepted node (0 = root only);
        bonus [B]: the target's argmax after it.
    """
    greedy = logits_bnv.argmax(-1).to(tokens_bn.device)
    ok = torch.zeros_like(tokens_bn, dtype=torch.bool)
    ok[:, 0] = True
    for d in range(1, max_depth + 1):
        match = (depth_bn == d) & ok.gather(1, lpar_bn) & (tokens_bn == greedy.gather(1, lpar_bn))
        ok |= match
    last = (ok * (depth_bn + 1)).argmax(1)
    return last, greedy.gather(1, last[:, None])[:, 0]


def accept_sampling(
    tokens_bn: torch.Tensor,
    lpar_bn: torch.Tensor,
    probs_bnv: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature > 0: recursive rejection sampling over the tree (SpecInfer, arXiv 2305.09781,
    Sec. 4.2), with each drafted child a point-mass proposal; all rows at once, no host sync.

    At a node with target distribution p and residual r (initially p), its children x_1, x_2, ...
    (ascending node index) are tried in order: x_i is accepted with probability
    r(x_i) / sum(r), else r(x_i) = 0. If one is accepted, the walk goes on from it; else the bonus
    token is drawn from r / sum(r). The emitted token is then distributed exactly as p at every
    step (P(x_1) = p(x_1), P(x_2) = (1 - p(x_1)) p(x_2) / (1 - p(x_1)), ...), whatever the draft
    proposed, so sampling is lossless.

    Vectorised form (same law): every non-root node c gets its own uniform u_c and its test
    ``u_c * r_c < p_parent(x_c)`` is evaluated against the residual r_c left after all its earlier
    siblings were rejected; the walk takes at each node the first child that passes. Only the
    tests on the walk are ever used, and each uses a fresh uniform, as the sequential walk does.
    The bonus is drawn by a two-level inverse CDF (float64) from one more uniform per row. With a
    ``generator`` on ``probs_bnv``'s device nothing here waits for the device.

    Args:
        tokens_bn: [B, n] token of each verified node (node 0 the root); parents precede their
            children (``lpar_bn[:, i] < i`` for i >= 1).
        lpar_bn: [B, n] index of each node's parent within the n nodes (the root's is 0).
        probs_bnv: the target's (temperature-scaled) next-token probabilities at each node,
            [B, n, V], each row a distribution (may be an expanded view: it is never copied whole).
        generator: RNG, on any device (its B * (n + 1) uniforms are moved to ``probs_bnv``'s).

    Returns:
        last [B], bonus [B] as :func:`accept_greedy`.
    """
    b, n = tokens_bn.shape
    dev = probs_bnv.device
    rdev = generator.device if generator is not None else dev
    u = torch.rand(b, n + 1, generator=generator, device=rdev).to(dev)  # per node; last: bonus
    rows = torch.arange(b, device=dev)
    idx = torch.arange(n, device=dev)
    # 1. the mass p_parent(x_c) each child c proposes, and each node's total mass [B, n]
    q = probs_bnv[rows[:, None], lpar_bn, tokens_bn].float()
    tot = probs_bnv.sum(-1, dtype=torch.float32)
    # 2. earlier siblings [B, c, i]: same parent, i < c; a token already rejected has no mass left
    sib = (lpar_bn[:, :, None] == lpar_bn[:, None, :]) & (idx[None, :] < idx[:, None])[None]
    sib[:, :, 0] = False
    sib[:, 0, :] = False
    dup = (sib & (tokens_bn[:, :, None] == tokens_bn[:, None, :])).any(2)
    q = q.masked_fill(dup, 0.0)
    resid = tot.gather(1, lpar_bn) - (sib * q[:, None, :]).sum(2)  # r_c's total [B, n]
    passes = (resid > 0) & (u[:, :n] * resid < q)
    passes[:, 0] = False
    # 3. the walk: c is on it iff c is its parent's first passing child, and so are its ancestors
    first = passes & ~(sib & passes[:, None, :]).any(2)
    off = ~first
    off[:, 0] = False
    ptr = lpar_bn
    for _ in range(max(n - 1, 1).bit_length()):  # pointer jumping: 2**s ancestors after s steps
        off = off | off.gather(1, ptr)
        ptr = ptr.gather(1, ptr)
    last = torch.where(off, 0, idx[None]).amax(1)  # the walk is a chain: its deepest = largest
    # 4. bonus from the residual at ``last``: p there minus its children's (rejected) tokens;
    # where float underflow left no mass (total <= 0), p itself
    is_child = (lpar_bn == last[:, None]) & (idx[None] > 0)
    left = tot.gather(1, last[:, None])[:, 0] - (is_child * q).sum(1)
    drop = torch.where(is_child & (left > 0)[:, None], 0.0, torch.inf)  # [B, n]
    bonus = torch.empty(b, dtype=torch.long, device=dev)
    v = probs_bnv.shape[2]
    full = v - v % _BLOCK
    step = max(1, 2**24 // v)  # rows per chunk: bounded memory at any b
    for lo in range(0, b, step):
        hi = min(b, lo + step)
        r = probs_bnv[rows[lo:hi], last[lo:hi]].float()  # [b', V], a copy
        r.scatter_reduce_(1, tokens_bn[lo:hi], drop[lo:hi], "amin")
        # inverse CDF in two levels: which block of _BLOCK tokens (the last may be shorter), then
        # which token in that block (x rescaled to the block's float64 sum and kept below it, so
        # never a zero-mass token)
        sums = r[:, :full].unflatten(1, (-1, _BLOCK)).sum(2)
        if full < v:
            sums = torch.cat([sums, r[:, full:].sum(1, keepdim=True)], 1)
        cdf = sums.double().cumsum(1)  # [b', blocks]
        x = u[lo:hi, n, None].double() * cdf[:, -1:]
        blk = torch.searchsorted(cdf, x, right=True).clamp_max(cdf.shape[1] - 1)  # [b', 1]
        x = x - torch.where(blk > 0, cdf.gather(1, (blk - 1).clamp_min(0)), 0.0)
        cols = blk * _BLOCK + torch.arange(_BLOCK, device=dev)  # [b', _BLOCK]
        inner = r.gather(1, cols.clamp_max(v - 1)).masked_fill(cols >= v, 0.0)
        inner_cdf = inner.double().cumsum(1)
        x = x * inner_cdf[:, -1:] / sums.gather(1, blk).double()
        x = torch.minimum(x.clamp_min(0.0), torch.nextafter(inner_cdf[:, -1:], x.new_zeros(())))
        bonus[lo:hi] = cols.gather(1, torch.searchsorted(inner_cdf, x, right=True))[:, 0]
    return last, bonus
