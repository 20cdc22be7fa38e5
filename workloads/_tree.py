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
        """Add child j of parent i with token ``ids[:, i, j]``; return the new nodes [B, K*t]."""
        b, k, t = ids_bkt.shape
        lo, hi = self.size, self.size + k * t
        par = parents_bk[:, :, None].expand(b, k, t).reshape(b, k * t)
        self.tokens[:, lo:hi] = ids_bkt.reshape(b, -1)
        self.parents[:, lo:hi] = par
        self.scores[:, lo:hi] = (self.scores.gather(1, parents_bk)[:, :, None] + logp_bkt).reshape(
            b, -1
        )
        self.depths[lo:hi] = self.depths[parents_bk[0, 0]] + 1
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


def accept_greedy(
    tokens_bn: torch.Tensor, depth_bn: torch.Tensor, lpar_bn: torch.Tensor, logits_bnv: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature 0: the deepest node whose path matches the target's argmax at every step.

    Returns:
        last [B]: index (within the verified nodes) of the last accepted node (0 = root only);
        bonus [B]: the target's argmax after it.
    """
    greedy = logits_bnv.argmax(-1)
    ok = torch.zeros_like(tokens_bn, dtype=torch.bool)
    ok[:, 0] = True
    for d in range(1, int(depth_bn.max()) + 1):
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
    Sec. 4.2), with each drafted child a point-mass proposal.

    At a node with target distribution p and residual r (initially p), its children x_1, x_2, ...
    are tried in order: x_i is accepted with probability r(x_i) / sum(r), else r(x_i) = 0. If one
    is accepted, the walk goes on from it; else the bonus token is drawn from r / sum(r). The
    emitted token is then distributed exactly as p at every step (P(x_1) = p(x_1), P(x_2) =
    (1 - p(x_1)) p(x_2) / (1 - p(x_1)), ...), whatever the draft proposed, so sampling is lossless.

    Args:
        probs_bnv: the target's (temperature-scaled) next-token probabilities at each node.

    Returns:
        last [B], bonus [B] as :func:`accept_greedy`.
    """
    b, n = tokens_bn.shape
    dev = generator.device if generator is not None else probs_bnv.device
    toks, lpar = tokens_bn.tolist(), lpar_bn.tolist()
    lasts, bonuses = [], []
    for r in range(b):
        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            children[lpar[r][i]].append(i)
        cur = 0
        while True:
            resid = probs_bnv[r, cur].clone()
            nxt = None
            for c in children[cur]:
                total = float(resid.sum())
                u = float(torch.rand((), generator=generator, device=dev))
                if total > 0 and u * total < float(resid[toks[r][c]]):
                    nxt = c
                    break
                resid[toks[r][c]] = 0.0
            if nxt is None:
                if float(resid.sum()) <= 0:  # float underflow: fall back to p itself
                    resid = probs_bnv[r, cur]
                bonus = int(torch.multinomial(resid, 1, generator=generator))
                break
            cur = nxt
        lasts.append(cur)
        bonuses.append(bonus)
    out = tokens_bn.device
    return torch.tensor(lasts, device=out), torch.tensor(bonuses, device=out)
