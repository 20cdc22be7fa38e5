"""Oracle draft: proposes a known continuation (e.g. the target's own greedy output).

Its acceptance is known in advance and its forward is a table lookup. It follows the draft
interface of :mod:`workloads.engine.tree_decode`.

Shape legend: B rows, T positions, V target vocabulary.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

PROPOSAL_LOGIT = 20.0
"""logit of the proposed token; every other token has logit 0"""


class OracleDraft(nn.Module):
    """Draft whose top-1 proposal at position p of row r is ``sequences[r][p + 2]``.

    The draft at position p sees (h_p, x_{p+1}) and proposes x_{p+2}. Past the end of a sequence
    it proposes its last token.

    Args:
        sequences: per batch row, prompt + continuation the oracle knows (target token ids); a
            single list is one row.
        vocab_size: V of the target.
        wrong_at: indices i of the sequences whose token is proposed wrongly (forces rejections).
        accept: probability that each other proposal is the known token; otherwise a wrong one
            (drawn uniformly from the other V - 1 tokens). Drawn once per (row, index) from
            ``seed``, so a proposal rejected and re-drafted stays the same. With a greedy
            target, each drafted token is accepted with probability ``accept`` independently,
            so a chain of depth d has acceptance length (1 - accept**(d+1)) / (1 - accept).
        seed: seed of those draws.

    Raises:
        ValueError: ``accept`` outside [0, 1].
    """

    next_bs: torch.Tensor
    draft_to_target: torch.Tensor

    def __init__(
        self,
        sequences: list[list[int]] | list[int],
        vocab_size: int,
        wrong_at: frozenset[int] = frozenset(),
        accept: float = 1.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not 0.0 <= accept <= 1.0:
            raise ValueError(f"oracle accept {accept} must be in [0, 1]")
        rows = [sequences] if sequences and isinstance(sequences[0], int) else sequences
        width = max(len(cast(list[int], r)) for r in rows) + 2
        table = torch.zeros(len(rows), width, dtype=torch.long)
        for i, seq in enumerate(cast(list[list[int]], rows)):
            for p in range(width):
                tok = seq[min(p, len(seq) - 1)]
                table[i, p] = (tok + 1) % vocab_size if p in wrong_at else tok
        if accept < 1.0 and vocab_size > 1:
            gen = torch.Generator().manual_seed(seed)
            miss = torch.rand(table.shape, generator=gen) >= accept
            shift = torch.randint(1, vocab_size, table.shape, generator=gen)
            table = torch.where(miss, (table + shift) % vocab_size, table)
        self.register_buffer("next_bs", table)
        self.register_buffer("draft_to_target", torch.arange(vocab_size))

    @property
    def vocab_size(self) -> int:
        """V."""
        return int(self.draft_to_target.shape[0])

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Rows ``rows`` [B'] of the batch remain (the engine dropped finished rows)."""
        self.next_bs = self.next_bs.index_select(0, rows)

    def forward(
        self,
        hidden: torch.Tensor,
        next_ids: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        cache: object | None = None,
    ) -> torch.Tensor:
        """[B, T, *] -> [B, T, 1]: the id of the token proposed next (as a float). The mask and
        the cache are not read (the engine's cache counts the lengths itself)."""
        slot = (position_ids + 2).clamp(0, self.next_bs.shape[1] - 1)
        return self.next_bs.gather(1, slot).float()[..., None]

    capturable = False
    """its step is a table lookup: nothing to compile or capture (the engine runs it eagerly)"""

    def top_candidates(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """[..., 1] -> the k best children without a [..., V] pass: the proposed token first,
        then the smallest other ids, with the log-probabilities of :meth:`logits`
        (log_softmax of PROPOSAL_LOGIT on one token and 0 on V - 1)."""
        v = self.vocab_size
        lse = math.log(math.exp(PROPOSAL_LOGIT) + v - 1)
        prop = hidden.long()  # [..., 1]
        others = torch.arange(k - 1, device=hidden.device).expand(*prop.shape[:-1], k - 1)
        others = others + (others >= prop).long()  # skip the proposed id
        ids = torch.cat([prop, others], -1)
        lp = torch.full(ids.shape, -lse, device=hidden.device)
        lp[..., 0] = PROPOSAL_LOGIT - lse
        return lp, ids

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., 1] -> [..., V]: PROPOSAL_LOGIT on the proposed token, 0 elsewhere."""
        out = torch.zeros(*hidden.shape[:-1], self.vocab_size, device=hidden.device)
        return out.scatter_(-1, hidden.long(), PROPOSAL_LOGIT)
