"""The draft side of the tree: at every expanded node, the children the engine drafted equal
what the same draft proposes when run step by step along that node's path from scratch.

The engine drafts all rows and all frontier nodes at once, with padding, a ragged KV cache,
per-node attention masks and explicit positions; the reference feeds one (hidden, token) pair
at a time to a fresh cache with no mask at all, after a plain causal target forward. A tiny
random target and a tiny random 1-layer draft with a truncated, permuted vocabulary make every
mask, position and cache slot matter; controls with a wrong position or mask must fail.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import workloads.engine.tree_decode as tree_decode
from tests.workloads.tiny import tiny_draft, tiny_target
from workloads.engine.tree import DraftTree
from workloads.engine.tree_decode import TreeShape, generate

V = 32
PROMPTS = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]]
SHAPE = TreeShape(depth=3, topk=3, num_draft_tokens=8)
N_NEW = 14
TOL = 1e-4  # log-probability: batched/masked vs one-at-a-time forwards differ by rounding only


@pytest.fixture(scope="module")
def models() -> tuple[Any, Any]:
    target = tiny_target(seed=0, vocab=V)
    vocab = torch.randperm(V, generator=torch.Generator().manual_seed(3))[:24]  # truncated
    return target, tiny_draft(target, seed=1, draft_to_target=vocab)


class _WrongPositions(torch.nn.Module):
    """Control: the draft sees every position after the prompt prefill shifted by one."""

    def __init__(self, draft: Any) -> None:
        super().__init__()
        self.draft, self.calls = draft, 0
        self.draft_to_target = draft.draft_to_target

    def new_cache(self) -> Any:
        return self.draft.new_cache()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.draft.logits(hidden)

    def forward(self, hidden, next_ids, position_ids, **kw):  # noqa: ANN001, ANN003, ANN201
        self.calls += 1
        return self.draft(hidden, next_ids, position_ids + (self.calls > 1), **kw)


class _NoMask(_WrongPositions):
    """Control: every query may attend to every cached and new slot (no tree or padding mask)."""

    def forward(self, hidden, next_ids, position_ids, **kw):  # noqa: ANN001, ANN003, ANN201
        mask = kw.pop("attention_mask", None)
        kw["attention_mask"] = None if mask is None else torch.zeros_like(mask)
        return self.draft(hidden, next_ids, position_ids, **kw)


def _run(draft: Any, target: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[DraftTree], Any]:
    """generate at T=0, recording the tree of every cycle."""
    trees: list[DraftTree] = []
    inner = tree_decode.draft_tree

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = inner(*args, **kwargs)
        found = [x for x in (out if isinstance(out, tuple) else (out,)) if isinstance(x, DraftTree)]
        assert len(found) == 1, "the engine's draft_tree no longer returns its DraftTree"
        trees.append(found[0])
        return out

    monkeypatch.setattr(tree_decode, "draft_tree", recording)
    res = generate(target, draft, PROMPTS, max_new_tokens=N_NEW, shape=SHAPE, eos_ids=frozenset())
    monkeypatch.undo()
    return trees, res


class _Reference:
    """The draft run one pair per forward on one row's committed sequence, from an empty cache:
    target hidden states from one plain causal forward of the final sequence (causal, so a
    prefix's states are its own), the draft's cache extended as the row commits tokens."""

    def __init__(self, target: Any, draft: Any, seq: list[int]) -> None:
        self.draft, self.seq, self.done = draft, seq, 0
        with torch.inference_mode():
            self.h = target.model(input_ids=torch.tensor([seq])).last_hidden_state
        self.cache = draft.new_cache()
        self.f = torch.empty(0)

    @torch.inference_mode()
    def logp(self, m: int, path: list[int]) -> torch.Tensor:
        """Draft log-probabilities [N] below the root at position ``m`` along ``path``."""
        assert m >= self.done
        for t in range(self.done, m):  # the pairs (h_t, x_{t+1}) at positions t
            self.f = self.draft(
                self.h[:, t : t + 1],
                torch.tensor([[self.seq[t + 1]]]),
                torch.tensor([[t]]),
                cache=self.cache,
            )
        self.done = m
        f = self.f
        for i, tok in enumerate(path):  # inside the tree the draft feeds its own output back
            f = self.draft(f, torch.tensor([[tok]]), torch.tensor([[m + i]]), cache=self.cache)
        if path:
            self.cache.crop(-len(path))
        return torch.log_softmax(self.draft.logits(f[0, -1]).float(), -1)


def _problems(
    trees: list[DraftTree], res: Any, target: Any, draft: Any, first_only: bool = False
) -> list[str]:
    """Disagreements between the engine's trees and the step-by-step reference (all, or the
    first one)."""
    to_draft = {int(t): i for i, t in enumerate(draft.draft_to_target.tolist())}
    topk, problems = SHAPE.topk, []
    for r, prompt in enumerate(PROMPTS):
        ref = _Reference(target, draft, prompt + res.tokens[r])
        for c, tree in enumerate(trees[: len(res.accept_lengths[r])]):
            if first_only and problems:
                return problems
            alive = [q for q in range(len(PROMPTS)) if len(res.accept_lengths[q]) > c]
            i = alive.index(r) if tree.tokens.shape[0] == len(alive) else r
            m = len(prompt) + sum(res.accept_lengths[r][:c])
            toks, par = tree.tokens[i].tolist(), tree.parents[i].tolist()
            scores, size = tree.scores[i].tolist(), tree.size
            if toks[0] != ref.seq[m]:
                problems.append(f"cycle {c} row {r}: root {toks[0]} != {ref.seq[m]}")
                continue
            kids: dict[int, list[int]] = {}
            for j in range(1, size):
                kids.setdefault(par[j], []).append(j)
            for j, children in sorted(kids.items()):
                path, k = [], j
                while k != 0:
                    path.insert(0, toks[k])
                    k = par[k]
                logp = ref.logp(m, path)
                kth = float(logp.topk(topk).values[-1])
                got = [toks[ch] for ch in children]
                where = f"cycle {c} row {r} node {j} (path {path})"
                if len(children) != topk or len(set(got)) != topk:
                    problems.append(f"{where}: children {got}")
                    continue
                for ch in children:
                    lp = float(logp[to_draft[toks[ch]]])
                    if abs(scores[ch] - scores[j] - lp) > TOL or lp < kth - TOL:
                        problems.append(f"{where}: child {toks[ch]} logp {scores[ch] - scores[j]}")
            # EAGLE-2 frontier: at each depth the topk best-scored nodes are the ones expanded
            depth = tree.depths.tolist()
            for d in range(1, SHAPE.depth):
                level = [j for j in range(size) if depth[j] == d]
                grown = [j for j in level if j in kids]
                rest = [scores[j] for j in level if j not in kids]
                if len(grown) != min(topk, len(level)) or (
                    rest and min(scores[j] for j in grown) < max(rest) - TOL
                ):
                    problems.append(f"cycle {c} row {r}: depth {d} expanded {grown}")
    return problems


def test_tree_children_equal_the_step_by_step_draft(models, monkeypatch) -> None:  # noqa: ANN001
    target, draft = models
    trees, res = _run(draft, target, monkeypatch)
    assert len(trees) == res.cycles >= 4
    assert any(a > 1 for acc in res.accept_lengths for a in acc)  # pending pairs > 1 occur
    assert _problems(trees, res, target, draft) == []


@pytest.mark.parametrize("broken", [_WrongPositions, _NoMask])
def test_controls_with_a_wrong_position_or_mask_fail(models, monkeypatch, broken) -> None:  # noqa: ANN001
    target, draft = models
    trees, res = _run(broken(draft), target, monkeypatch)
    assert len(_problems(trees, res, target, draft, first_only=True)) > 0
