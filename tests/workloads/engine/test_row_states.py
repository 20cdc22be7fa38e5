"""Every row state at every cycle of a batched ``generate``: a row finished at prefill (EOS
first, ``max_new_tokens`` 1), all rows finishing in one cycle, rows of very different lengths,
rows leaving at different cycles; at T = 0 (each row equals the target's greedy output) and at
T > 0 (runs, lengths and accounting right), b in {1, 2, 3}, with a real draft (KV cache, masks)
and with the oracle (per-row state dropped through ``keep_rows``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.workloads.tiny import assert_greedy, greedy_reference, tiny_draft, tiny_target
from workloads.engine.ar_decode import ar_generate
from workloads.engine.oracle_draft import OracleDraft
from workloads.engine.tree_decode import TreeShape, generate

V = 16
SHAPE = TreeShape(depth=3, topk=2, num_draft_tokens=6)
RAGGED = [[1, 2, 3], [4, 5, 6, 7], [8, 9]]  # the case: lengths 3 and 4 (and 2)
VERY_RAGGED = [[3], list(range(1, 16)) * 3, [5, 6, 7, 8, 9, 10, 11]]  # 1, 45 and 7 tokens
TEMPS = [0.0, 0.8]


@pytest.fixture(scope="module")
def target() -> Any:
    return tiny_target(seed=0, vocab=V)


@pytest.fixture(scope="module")
def drafts(target: Any) -> dict[str, Any]:
    return {"model": tiny_draft(target, seed=1)}


def _draft(kind: str, target: Any, drafts: dict[str, Any], prompts: list[list[int]]) -> Any:
    if kind == "model":
        return drafts[kind]
    # the oracle proposes the greedy continuation, wrong every third position: ragged acceptance
    seqs = [p + greedy_reference(target, p, 24) for p in prompts]
    return OracleDraft(seqs, V, wrong_at=frozenset(range(4, 90, 3)))


def _run(
    target: Any,
    draft: Any,
    prompts: list[list[int]],
    n: int,
    eos: frozenset[int],
    temp: float,
    seed: int = 0,
) -> Any:
    return generate(
        target,
        draft,
        prompts,
        max_new_tokens=n,
        shape=SHAPE,
        eos_ids=eos,
        temperature=temp,
        generator=torch.Generator().manual_seed(seed),
    )


def _check(
    res: Any, target: Any, prompts: list[list[int]], n: int, eos: frozenset[int], temp: float
) -> None:
    """Lengths, stops and accounting of every row; at T = 0 each row equals greedy."""
    assert len(res.tokens) == len(res.accept_lengths) == len(prompts)
    for prompt, toks, acc in zip(prompts, res.tokens, res.accept_lengths, strict=True):
        assert 1 <= len(toks) <= n
        assert all(0 <= t < V for t in toks)
        assert not any(t in eos for t in toks[:-1]), toks  # nothing after an EOS
        if len(toks) < n:
            assert toks[-1] in eos, toks  # a row stops early only at an EOS
        assert len(toks) == 1 + sum(acc)  # 1 from the prefill, the rest from the cycles
        assert all(1 <= a <= SHAPE.depth + 1 for a in acc)
        if temp == 0:
            assert_greedy(target, prompt, toks, greedy_reference(target, prompt, n, eos))
    assert res.cycles == max(len(a) for a in res.accept_lengths)


def _first_tokens(target: Any, draft: Any, prompts: list[list[int]], temp: float) -> list[int]:
    """The first token of every row as this seed draws it (the prefill's; EOS plays no part)."""
    return [t[0] for t in _run(target, draft, prompts, 1, frozenset(), temp).tokens]


CASES = [(b, temp, kind) for b in (1, 2, 3) for temp in TEMPS for kind in ("model", "oracle")]


@pytest.mark.parametrize(("b", "temp", "kind"), CASES)
def test_eos_first_row_finishes_at_prefill(target, drafts, b, temp, kind) -> None:  # noqa: ANN001
    # the issue's crash: row 0's first token is EOS, the other rows go on
    prompts = RAGGED[:b]
    draft = _draft(kind, target, drafts, prompts)
    eos = frozenset(_first_tokens(target, draft, prompts, temp)[:1])
    draft = _draft(kind, target, drafts, prompts)
    res = _run(target, draft, prompts, 12, eos, temp)
    assert res.tokens[0] == sorted(eos) and res.accept_lengths[0] == []
    _check(res, target, prompts, 12, eos, temp)


@pytest.mark.parametrize(("b", "temp", "kind"), [c for c in CASES if c[0] > 1])
def test_last_row_finishes_at_prefill(target, drafts, b, temp, kind) -> None:  # noqa: ANN001
    prompts = RAGGED[:b]
    draft = _draft(kind, target, drafts, prompts)
    eos = frozenset(_first_tokens(target, draft, prompts, temp)[-1:])
    res = _run(target, _draft(kind, target, drafts, prompts), prompts, 12, eos, temp)
    assert res.tokens[-1] == sorted(eos)
    _check(res, target, prompts, 12, eos, temp)


@pytest.mark.parametrize(("b", "temp", "kind"), CASES)
def test_max_new_tokens_one_ends_every_row_at_prefill(target, drafts, b, temp, kind) -> None:  # noqa: ANN001
    prompts = RAGGED[:b]
    res = _run(target, _draft(kind, target, drafts, prompts), prompts, 1, frozenset(), temp)
    assert res.cycles == 0 and all(len(t) == 1 for t in res.tokens)
    _check(res, target, prompts, 1, frozenset(), temp)


@pytest.mark.parametrize(("b", "temp", "kind"), CASES)
def test_all_rows_finish_in_one_cycle(target, drafts, b, temp, kind) -> None:  # noqa: ANN001
    prompts = RAGGED[:b]
    res = _run(target, _draft(kind, target, drafts, prompts), prompts, 2, frozenset(), temp)
    assert res.cycles == 1 and all(len(t) == 2 for t in res.tokens)
    _check(res, target, prompts, 2, frozenset(), temp)
    if temp == 0:  # every row's EOS in the first cycle (a row may emit one first, at prefill)
        eos = frozenset(t[1] for t in res.tokens)
        res = _run(target, _draft(kind, target, drafts, prompts), prompts, 20, eos, temp)
        assert res.cycles <= 1
        _check(res, target, prompts, 20, eos, temp)


@pytest.mark.parametrize(("b", "temp", "kind"), CASES)
def test_rows_of_very_different_lengths(target, drafts, b, temp, kind) -> None:  # noqa: ANN001
    prompts = VERY_RAGGED[:b]
    res = _run(target, _draft(kind, target, drafts, prompts), prompts, 12, frozenset(), temp)
    _check(res, target, prompts, 12, frozenset(), temp)


@pytest.mark.parametrize(("b", "temp", "kind"), CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_rows_leave_at_different_cycles(target, drafts, b, temp, kind, seed) -> None:  # noqa: ANN001
    # a third of the vocabulary ends a row: rows finish at the prefill, mid-cycle, or run out
    prompts = VERY_RAGGED[:b] if seed else RAGGED[:b]
    eos = frozenset(range(seed, V, 3))
    res = _run(target, _draft(kind, target, drafts, prompts), prompts, 16, eos, temp, seed)
    _check(res, target, prompts, 16, eos, temp)


@pytest.mark.parametrize("b", [1, 2, 3])
def test_ar_loop_handles_the_same_row_states(target, b) -> None:  # noqa: ANN001
    prompts = RAGGED[:b]
    first = ar_generate(target, prompts, max_new_tokens=1, eos_ids=frozenset()).tokens
    for n, eos in [(1, frozenset()), (2, frozenset()), (12, frozenset(first[0]))]:
        res = ar_generate(target, prompts, max_new_tokens=n, eos_ids=eos)
        for prompt, toks in zip(prompts, res.tokens, strict=True):
            assert_greedy(target, prompt, toks, greedy_reference(target, prompt, n, eos))
