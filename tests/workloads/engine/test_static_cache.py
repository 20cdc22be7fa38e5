"""The engine's preallocated KV caches, step runners, oracle acceptance and shape policies, on a
tiny random Llama target (real attention, masks, positions and cache)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from workloads.engine import steps as _steps
from workloads.engine import tree_decode
from workloads.engine.ar_decode import ar_generate
from workloads.engine.oracle_draft import OracleDraft
from workloads.engine.steps import Graphed, Steps
from workloads.engine.tree_decode import TreeShape, generate
from workloads.models.kv_cache import CacheFull, RaggedStaticCache

V = 64
PROMPTS = [[1, 2, 3], [4, 5, 6, 7], [9] * 11]
SHAPE = TreeShape(depth=3, topk=2, num_draft_tokens=5)


@pytest.fixture(scope="module")
def target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def greedy(target: LlamaForCausalLM) -> list[list[int]]:
    return [
        ar_generate(target, [p], max_new_tokens=14, eos_ids=frozenset()).tokens[0] for p in PROMPTS
    ]


def oracle(greedy: list[list[int]], **kw: object) -> OracleDraft:
    return OracleDraft([p + g for p, g in zip(PROMPTS, greedy, strict=True)], V, **kw)  # type: ignore[arg-type]


def test_storage_is_allocated_once_and_written_in_place(
    target: LlamaForCausalLM, greedy: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[RaggedStaticCache] = []
    real = _steps.RaggedStaticCache

    def spy(*a: object, **kw: object) -> RaggedStaticCache:
        cache = real(*a, **kw)  # type: ignore[arg-type]
        seen.append(cache)
        return cache

    monkeypatch.setattr(_steps, "RaggedStaticCache", spy)
    ptrs: list[list[int]] = []
    orig_commit = real.commit

    def commit(self: RaggedStaticCache, *a: object, **kw: object) -> None:
        orig_commit(self, *a, **kw)  # type: ignore[arg-type]
        if self is seen[0]:
            ptrs.append([t.data_ptr() for t in (*self.keys.values(), *self.values.values())])

    monkeypatch.setattr(real, "commit", commit)
    res = generate(
        target, oracle(greedy, wrong_at=frozenset({6, 9})), PROMPTS, max_new_tokens=14,
        shape=SHAPE, eos_ids=frozenset({greedy[0][3]}),
    )  # fmt: skip
    assert res.tokens[1:] == greedy[1:] and res.tokens[0] == greedy[0][:4]  # row 0 leaves early
    assert res.cycles >= 4 and len(ptrs) == res.cycles + 1  # prefill + one commit per cycle
    assert all(p == ptrs[0] for p in ptrs)  # same storage across cycles, rows leaving included
    # 2 target layers, keys and values, allocated once each (the oracle writes no KV)
    assert res.cache_allocations == 2 * 2


def test_commit_moves_only_the_accepted_entries() -> None:
    cache = RaggedStaticCache(2, 8, torch.device("cpu"))
    k = torch.arange(2 * 3, dtype=torch.float32).reshape(2, 1, 3, 1)
    cache.stage(3)
    cache.update(k, -k, 0)
    cache.commit(None, torch.tensor([3, 2]))  # row 1 keeps 2 of its 3 slots
    tree = 100 + torch.arange(2 * 4, dtype=torch.float32).reshape(2, 1, 4, 1)
    cache.stage(4)
    keys, _ = cache.update(tree, tree, 0)
    assert keys.shape[2] == 3 + 4  # W = max(lengths) + staged
    cache.commit(torch.tensor([[0, 2, 3], [0, 1, 0]]), torch.tensor([3, 2]))
    assert cache.lengths.tolist() == [6, 4]
    assert cache.keys[0][0, 0, :6, 0].tolist() == [0, 1, 2, 100, 102, 103]
    assert cache.keys[0][1, 0, :4, 0].tolist() == [3, 4, 104, 105]
    # control: without the move the accepted path would be [100, 101, 102]
    assert cache.keys[0][0, 0, 3:6, 0].tolist() != [100, 101, 102]


def test_mask_lets_each_row_see_its_committed_slots_and_the_staged_tree() -> None:
    cache = RaggedStaticCache(2, 10, torch.device("cpu"))
    cache.stage(2)
    cache.update(torch.zeros(2, 1, 2, 1), torch.zeros(2, 1, 2, 1), 0)
    cache.commit(None, torch.tensor([2, 1]))
    cache.stage(2)
    tree = torch.tensor([[[True, False], [True, True]]] * 2)
    allowed = cache.allowed(tree)
    assert allowed.shape == (2, 2, 4)
    assert allowed[0].tolist() == [[True, True, True, False], [True, True, True, True]]
    assert allowed[1].tolist() == [[True, True, False, False], [True, True, True, False]]


def test_capacity_overflow_is_an_error_not_a_silent_write() -> None:
    cache = RaggedStaticCache(1, 4, torch.device("cpu"))
    cache.stage(3)
    with pytest.raises(CacheFull, match="4 slots"):
        cache.stage(2)


def test_graph_runner_static_buffers_stay_lossless(
    target: LlamaForCausalLM, greedy: list[list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graphs path without the capture itself (no CUDA here): inputs copied into static
    buffers per shape, a fixed-width cache with index buffers at fixed addresses."""
    runners: list[Graphed] = []

    class CpuGraphs(Steps):
        def __init__(self, tgt: object, draft: object, mode: str = "none") -> None:
            super().__init__(tgt, draft, "none")  # type: ignore[arg-type]
            self._verify = Graphed(self._verify, "verify", capture=False)
            self._draft = Graphed(self._draft, "draft", capture=False)
            runners.extend([self._verify, self._draft])

    monkeypatch.setattr(tree_decode, "Steps", CpuGraphs)
    res = generate(
        target, oracle(greedy, accept=0.6), PROMPTS, max_new_tokens=14, shape=SHAPE,
        eos_ids=frozenset(), compile="compile",  # fixed-width caches, as under graphs
    )  # fmt: skip
    assert res.tokens == greedy
    assert all(r.graphs for r in runners)  # each step went through its per-shape buffers


def test_graphs_refused_on_cpu(target: LlamaForCausalLM, greedy: list[list[int]]) -> None:
    with pytest.raises(ValueError, match="CUDA graphs.*Fix"):
        generate(
            target, oracle(greedy), PROMPTS, max_new_tokens=4, shape=SHAPE,
            eos_ids=frozenset(), compile="graphs",
        )  # fmt: skip


def test_draft_prompt_prefill_is_timed_as_prefill(
    target: LlamaForCausalLM, greedy: list[list[int]]
) -> None:
    res = generate(
        target, oracle(greedy), PROMPTS, max_new_tokens=1, shape=SHAPE, eos_ids=frozenset()
    )
    assert res.cycles == 0 and res.draft_s == 0.0 and res.prefill_s > 0
    assert res.tokens == [g[:1] for g in greedy]


@pytest.mark.parametrize("accept", [0.0, 0.5, 0.8, 1.0])
def test_oracle_accept_sets_the_acceptance_length(target: LlamaForCausalLM, accept: float) -> None:
    prompt = [5, 6, 7]
    ref = ar_generate(target, [prompt], max_new_tokens=200, eos_ids=frozenset()).tokens[0]
    chain = TreeShape(depth=3, topk=1, num_draft_tokens=4)
    draft = OracleDraft(prompt + ref, V, accept=accept, seed=1)
    res = generate(target, draft, [prompt], max_new_tokens=200, shape=chain, eos_ids=frozenset())
    assert res.tokens[0] == ref  # lossless whatever the draft proposes
    expected = (1 - accept**4) / (1 - accept) if accept < 1 else 4.0
    assert res.acceptance_length == pytest.approx(expected, rel=0.15)


def test_oracle_accept_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        OracleDraft([1, 2], V, accept=1.5)


def test_shape_policy_follows_the_live_batch(
    target: LlamaForCausalLM, greedy: list[list[int]]
) -> None:
    asked: list[int] = []

    def policy(b: int) -> TreeShape:
        asked.append(b)
        return TreeShape(depth=4, topk=2, num_draft_tokens={3: 3, 2: 5, 1: 9}[b])

    i = next(i for i, t in enumerate(greedy[0]) if i >= 3 and t not in greedy[1] + greedy[2])
    eos = frozenset({greedy[0][i]})  # row 0 stops early, the others run to the end
    res = generate(target, oracle(greedy), PROMPTS, max_new_tokens=14, shape=policy, eos_ids=eos)
    assert res.tokens[0] == greedy[0][: i + 1] and res.tokens[1:] == greedy[1:]
    assert res.num_draft_tokens[0] == 3 and res.num_draft_tokens[-1] in (5, 9)
    assert sorted(set(asked)) == [1, 2, 3]  # asked once per live batch size
