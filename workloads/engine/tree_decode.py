"""EAGLE-2 dynamic-tree speculative decoding for a batch of b prompts of different lengths.

Per cycle, for every row at once (Li et al., EAGLE-2, arXiv 2406.16858, Sec. 4; Scylla arXiv
2505.07858 Sec. 3):
1. draft prefill of the pairs (target hidden h_t, token x_{t+1}) the draft has not seen (rows
   accepted different numbers of tokens: padded, masked);
2. expansion: ``depth`` draft steps, each frontier node taking its ``topk`` children, the
   frontier being the ``topk`` best new nodes by cumulative log-probability;
3. rerank: keep the ``num_draft_tokens - 1`` best nodes (closed under ancestors) plus the root;
4. verify them in one target forward with a per-row tree attention mask;
5. accept: at temperature 0 the longest path equal to the target's greedy choices; above it,
   recursive rejection sampling over the tree (:func:`workloads.engine.tree.accept_sampling`); then
   the bonus token;
6. commit: each row keeps its own accepted path in the target KV cache; rows that emitted EOS or
   reached ``max_new_tokens`` leave the batch.

Losslessness: at temperature 0 every emitted token is the target's argmax given the accepted
prefix, so each row equals the target's greedy output (up to float rounding between batched and
one-token forwards); above 0 each emitted token is distributed as the target's.

Shape legend: B rows still decoding, P pending pairs, K frontier nodes, n verified nodes,
h hidden, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import PreTrainedModel

from workloads.engine.batch import (
    Placement,
    Timer,
    finished,
    pick,
    prefill,
    right_pad,
    row_bucket,
    rows_to_keep,
)
from workloads.engine.draft_side import draft_prefill, draft_tree
from workloads.engine.steps import StepPlan, Steps
from workloads.engine.tree import DraftTree, accept_greedy, accept_sampling, max_nodes
from workloads.models.draft import Draft
from workloads.models.kv_cache import RaggedStaticCache, additive_mask

Compile = Literal["none", "graphs", "compile"]


@dataclass(frozen=True, kw_only=True)
class TreeShape:
    """Tree of one decoding cycle: ``num_draft_tokens`` counts the root."""

    depth: int
    topk: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        if self.depth < 1 or self.topk < 1 or self.num_draft_tokens < 2:
            raise ValueError(
                f"tree depth {self.depth}, topk {self.topk}, num_draft_tokens "
                f"{self.num_draft_tokens}: a tree needs depth >= 1, topk >= 1 and "
                "num_draft_tokens >= 2 (the root and one drafted token)"
            )

    def capped(self, vocab: int) -> TreeShape:
        """The shape the engine uses: depth <= num_draft_tokens - 1 (a node at depth d is
        verified only with its d ancestors) and topk <= the draft vocabulary."""
        return TreeShape(
            depth=min(self.depth, self.num_draft_tokens - 1),
            topk=min(self.topk, vocab),
            num_draft_tokens=self.num_draft_tokens,
        )


ShapePolicy = Callable[[int], TreeShape]
"""live batch size -> the tree of this cycle (batch-adaptive ``num_draft_tokens``)"""


@dataclass
class DecodeResult:
    """One prompt's output (batch size 1).

    Attributes:
        tokens: generated token ids (EOS included when generated).
        accept_lengths: per cycle, tokens emitted (accepted draft tokens + 1).
        draft_s, verify_s, total_s: wall seconds in draft forwards, target forwards, overall.
    """

    tokens: list[int] = field(default_factory=list)
    accept_lengths: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0

    @property
    def acceptance_length(self) -> float:
        """Mean tokens per cycle (accepted draft tokens + 1)."""
        return sum(self.accept_lengths) / max(len(self.accept_lengths), 1)


@dataclass
class BatchResult:
    """Output of one batch (rows in prompt order) and where the time went (wall seconds).

    Attributes:
        tokens: per row, the generated ids (EOS included when generated).
        accept_lengths: per row, tokens emitted per cycle (accepted draft tokens + 1; a cycle cut
            short by EOS or ``max_new_tokens`` counts the tokens it emitted).
        cycles: decoding cycles of the batch (one target verification each).
        num_draft_tokens: per cycle, the k verified per row (changes with the live batch size
            under a :data:`ShapePolicy`; at most the nodes the tree holds,
            1 + topk + (depth - 1) * topk**2).
        prefill_s, draft_s, verify_s, total_s: prompt prefill (target and draft), draft forwards
            of the cycles, target verification forwards, the whole call. The rest of a cycle is
            bookkeeping.
        cache_allocations: KV buffers the call's caches have allocated (per layer, keys and
            values, once per cache: a :class:`~workloads.engine.steps.Steps` reused over calls keeps
            its caches, so a repeat call reports the same count and allocates nothing).
    """

    tokens: list[list[int]]
    accept_lengths: list[list[int]]
    cycles: int = 0
    num_draft_tokens: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0
    cache_allocations: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def generated(self) -> int:
        """Tokens generated over all rows."""
        return sum(len(t) for t in self.tokens)

    @property
    def acceptance_length(self) -> float:
        """Mean tokens per cycle and row (accepted draft tokens + 1), over all row-cycles."""
        n = sum(len(a) for a in self.accept_lengths)
        return sum(sum(a) for a in self.accept_lengths) / n if n else float("nan")

    @property
    def bookkeeping_s(self) -> float:
        """Cycle time outside the draft and target forward passes."""
        return self.total_s - self.prefill_s - self.draft_s - self.verify_s


@torch.inference_mode()
def generate(
    target: PreTrainedModel,
    draft: Draft,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    shape: TreeShape | ShapePolicy,
    eos_ids: frozenset[int],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    compile: Compile = "none",
    steps: Steps | None = None,
) -> BatchResult:
    """Generate up to ``max_new_tokens`` per prompt with tree speculative decoding.

    Args:
        target: the frozen target causal LM (``.model`` the decoder, ``.lm_head`` the head); it
            may be spread over devices (:class:`~workloads.engine.batch.Placement`).
        draft: a draft for this target, on the target's input device; a draft with per-row
            state (the oracle) may define ``keep_rows(rows)``, called when rows leave the batch.
        prompts: b token-id lists (chat template applied), any lengths >= 1.
        shape: the tree (depth, topk, num_draft_tokens), or a policy giving it from the live
            batch size each cycle (Scylla Table 5, "Opt. top_k"). Depth is capped at
            num_draft_tokens - 1 and topk at the draft vocabulary.
        eos_ids: a row stops after any of these tokens.
        temperature: 0 = greedy; > 0 = sampling from softmax(logits / temperature).
        generator: RNG for sampling (reproducible runs), on the target's output device.
        compile: none = eager; graphs = the target's verification and the draft's steps
            replayed from CUDA graphs; compile = ``torch.compile`` of the same steps (see
            :mod:`workloads.engine.steps`). Ignored when ``steps`` is given.
        steps: the steps (and KV caches) of an earlier call to reuse: pass the same
            :class:`~workloads.engine.steps.Steps` to every call of a benchmark so that graphs are
            captured and steps compiled once, outside the timers (its ``stats`` count them).

    Raises:
        ValueError: an empty prompt list, an empty prompt, ``max_new_tokens`` < 1, or
            ``graphs`` on a target that is not on CUDA.
    """
    _check_prompts(prompts, max_new_tokens)
    steps = steps if steps is not None else Steps(target, draft, compile)
    shape_at, plan, tcache, dcache = _prepare(steps, draft, prompts, max_new_tokens, shape)
    where, dt = Placement.of(target), target.dtype
    dev, odev = where.input, where.output
    timer = Timer(where.devices)
    res = BatchResult(tokens=[[] for _ in prompts], accept_lengths=[[] for _ in prompts])
    top_k = max(k for _, _, k in plan.buckets)
    t0 = timer.now()
    st = _prompt_phase(target, steps, prompts, (tcache, dcache), top_k, res, temperature, generator)
    res.prefill_s = timer.now() - t0
    st.live = [not finished(res.tokens[r], eos_ids, max_new_tokens) for r in st.prompt]
    go, go_host = torch.ones(len(prompts), dtype=torch.bool, device=dev), [True] * len(prompts)
    while any(st.live):
        if st.drop_finished(steps.fixed, (tcache, dcache), draft):  # fixed shapes: by buckets
            go_host = []
        sh = shape_at(len(st.prompt))
        if st.pending is not None:  # 1. the draft reads the pairs the last cycle accepted
            ta = timer.mark()
            st.h_in, st.top = draft_prefill(steps, dcache, *st.pending, st.m, st.pend_host, top_k)
            timer.add("draft", ta)
        # 2. expansion: depth levels of topk children per frontier node
        tree = draft_tree(steps, dcache, st.root, st.m, st.h_in, st.top, sh.depth, sh.topk, timer)
        sel = tree.best(sh.num_draft_tokens)  # 3. rerank
        toks, depths, anc = tree.selected(sel)
        n = toks.shape[1]
        tcache.stage(n)  # 4. verify
        mask = additive_mask(tcache.allowed(anc), dt)
        tb = timer.mark()
        v_h, v_logits = steps.verify(toks, st.m[:, None] + depths, mask, tcache)
        timer.add("verify", tb)
        last, bonus = _accept(tree, sel, toks, depths, v_logits, temperature, generator, odev)
        path = anc.gather(1, last[:, None, None].expand(-1, 1, n))[:, 0]  # 5. accepted [B, n]
        n_acc = path.sum(1)  # root + accepted drafts = tokens emitted this cycle
        if not all(st.live):  # frozen rows (fixed shapes) commit nothing
            if st.live != go_host:  # copied to the device when that changes
                go, go_host = torch.tensor(st.live).to(dev), list(st.live)
            n_acc = n_acc * go
        order, emitted, chain = _emitted(toks, path, n_acc, bonus)
        # 6. the cycle's one host read: tokens emitted per row, the tokens, whether KV moves
        host = torch.cat([n_acc[:, None], chain[:, None].long(), emitted], 1).tolist()
        st.pend_host = [h[0] for h in host]
        tcache.commit(order[:, : max(st.pend_host)], n_acc, st.pend_host, moved=not host[0][1])
        width = plan.pending if steps.fixed else max(st.pend_host)
        cols = _columns(order, width)
        pend_h = v_h.gather(1, cols.to(odev)[:, :, None].expand(-1, -1, v_h.shape[2])).to(dev)
        st.pending, st.m, st.root = (pend_h, _columns(emitted, width), n_acc), st.m + n_acc, bonus
        _record(res, n, st.prompt, st.live, host, st.pend_host, eos_ids, max_new_tokens)
    return _finish(res, timer, t0, (tcache, dcache))


def _check_prompts(prompts: list[list[int]], max_new_tokens: int) -> None:
    """Raise the ValueError of :func:`generate` for no prompt, an empty one or no new token."""
    if not prompts or min(len(p) for p in prompts) < 1 or max_new_tokens < 1:
        raise ValueError(
            "generate needs at least one prompt, each of at least one token, and "
            "max_new_tokens >= 1"
        )


def _prepare(
    steps: Steps,
    draft: Draft,
    prompts: list[list[int]],
    max_new_tokens: int,
    shape: TreeShape | ShapePolicy,
) -> tuple[ShapePolicy, StepPlan, RaggedStaticCache, RaggedStaticCache]:
    """Set up a call, outside its timers: the shape of each live batch size, the step plan, the
    target's and the draft's KV caches sized for the longest prompt plus ``max_new_tokens``, and
    the steps compiled or captured for the plan."""
    steps.set_draft(draft)
    shape_at = _policy(shape, int(draft.draft_to_target.shape[0]))
    plan = _plan(shape_at, len(prompts), steps.fixed)
    room = max(map(len, prompts)) + max_new_tokens
    tcache, dcache = steps.caches(len(prompts), *_slots(shape_at, plan, room))
    steps.prepare(plan, tcache, dcache)  # compile / capture: outside the timers
    return shape_at, plan, tcache, dcache


def _prompt_phase(
    target: PreTrainedModel,
    steps: Steps,
    prompts: list[list[int]],
    caches: tuple[RaggedStaticCache, RaggedStaticCache],
    top_k: int,
    res: BatchResult,
    temperature: float,
    generator: torch.Generator | None,
) -> RowState:
    """The prompts through the target (its KV cache) and the draft (step 1 over every prompt
    pair, eager); each row's first token, picked from the target's logits, appended to ``res``.

    Returns:
        The rows' first state: m [B], each row's prompt length (the position of its root, the
        first new token); root [B], that token; h_in [B, 1, h] and the root's ``top_k`` best
        children, as :func:`~workloads.engine.draft_side.draft_prefill` gives them; every
        prompt's tokens pending on the host.
    """
    tcache, dcache = caches
    h_blh, logits, m = prefill(target, prompts, tcache, layers=steps.fusion_layers)
    dev = m.device  # the input device
    root = pick(logits, temperature, generator).to(dev)
    ids, _ = right_pad(prompts, dev)
    pend_x = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], 1).scatter(
        1, (m - 1)[:, None], root[:, None]
    )
    lengths = [len(p) for p in prompts]
    h_in, top = draft_prefill(steps, dcache, h_blh.to(dev), pend_x, m, m, lengths, top_k, True)
    for r, tok in enumerate(root.tolist()):
        res.tokens[r].append(tok)
    return RowState(
        prompt=list(range(len(prompts))), m=m, root=root, h_in=h_in, top=top, pend_host=lengths
    )


@dataclass
class RowState:
    """The per-row state of the live batch: row i of every tensor belongs to prompt
    ``prompt[i]``; :meth:`drop_finished` drops rows from all of it (and from the KV caches and a
    draft's own per-row state) in one call.

    Attributes:
        prompt: [B] the prompt index of each row.
        live: [B] whether each row still decodes (a finished row may stay, frozen, while fixed
            shapes keep the batch at a bucket size).
        m: [B] each row's root position (tokens in its target KV cache).
        root: [B] each row's root token (the last one emitted).
        h_in: [B, 1, h] the draft's input hidden state at the root.
        top: the root's best children (log-probabilities [B, K], tokens [B, K]).
        pending: pend_h [B, P, h], pend_x [B, P], pend_n [B] of the last cycle (None before
            the first).
        pend_host: [B] the pairs pending per row, on the host.
    """

    prompt: list[int]
    m: torch.Tensor
    root: torch.Tensor
    h_in: torch.Tensor
    top: tuple[torch.Tensor, torch.Tensor]
    pend_host: list[int]
    live: list[bool] = field(default_factory=list)
    pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def drop_finished(
        self, fixed: bool, caches: tuple[RaggedStaticCache, RaggedStaticCache], draft: Draft
    ) -> bool:
        """Drop the finished rows (with fixed shapes, only down to the next bucket size:
        :func:`~workloads.engine.batch.row_bucket`) from every tensor, both KV caches and a
        draft with per-row state (its ``keep_rows``). Returns whether rows were dropped."""
        keep = row_bucket(sum(self.live), len(self.prompt), fixed)
        if keep == len(self.prompt):
            return False
        idx = rows_to_keep(self.live, keep)
        sel = torch.tensor(idx).to(self.m.device)
        self.m, self.root, self.h_in = self.m[sel], self.root[sel], self.h_in[sel]
        self.top = (self.top[0][sel], self.top[1][sel])
        if self.pending is not None:
            self.pending = (self.pending[0][sel], self.pending[1][sel], self.pending[2][sel])
        for cache in caches:
            cache.select_rows(sel, idx)
        if hasattr(draft, "keep_rows"):
            draft.keep_rows(sel)
        self.prompt, self.live = [self.prompt[i] for i in idx], [self.live[i] for i in idx]
        self.pend_host = [self.pend_host[i] for i in idx]
        return True


def _accept(
    tree: DraftTree,
    sel: torch.Tensor,
    toks: torch.Tensor,
    depths: torch.Tensor,
    v_logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    odev: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 5 of a cycle: the accepted path's last node [B] (an index into the n verified
    nodes ``toks`` [B, n] at ``depths``) and the bonus token [B], both on the device of
    ``toks``; greedy at temperature 0, else recursive rejection sampling over the tree with the
    target's probabilities from ``v_logits`` [B, n, V] (on ``odev``, the target's output)."""
    lpar = tree.local_parents(sel)
    if temperature == 0:  # argmax of the target's own dtype: no float32 [B, n, V] copy
        return accept_greedy(toks, depths, lpar, v_logits, tree.level)
    dev = toks.device
    probs = torch.softmax(v_logits.float() / temperature, -1)
    last, bonus = accept_sampling(toks.to(odev), lpar.to(odev), probs, generator)
    return last.to(dev), bonus.to(dev)


def _emitted(
    toks: torch.Tensor, path: torch.Tensor, n_acc: torch.Tensor, bonus: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a cycle emits, from the verified nodes ``toks`` [B, n], the accepted ``path`` [B, n]
    (bool, the root included), the tokens emitted ``n_acc`` [B] and the ``bonus`` [B].

    Returns:
        order [B, n], the nodes accepted first (in tree order), then the rest; emitted [B, n],
        each row's accepted drafts with the bonus at column ``n_acc - 1``; chain [B], whether the
        accepted nodes are the first ones of every row (their KV needs no move).
    """
    b, n, dev = toks.shape[0], toks.shape[1], toks.device
    order = torch.argsort((~path).to(torch.int8), dim=1, stable=True)  # accepted first
    emitted = torch.cat([toks.gather(1, order)[:, 1:], bonus[:, None]], 1)
    emitted[torch.arange(b, device=dev), (n_acc - 1).clamp_min(0)] = bonus
    chain = (order == torch.arange(n, device=dev)).all().expand(b)
    return order, emitted, chain


def _record(
    res: BatchResult,
    n: int,
    rows: list[int],
    live: list[bool],
    host: list[list[int]],
    pend_host: list[int],
    eos_ids: frozenset[int],
    max_new_tokens: int,
) -> None:
    """Record one cycle that verified ``n`` nodes per row in ``res``: each live row's emitted
    tokens (``host[i][2:]``, the first ``pend_host[i]``) appended to its prompt's output, stopping
    at EOS or ``max_new_tokens``, their count as its accept length; a row that finished is marked
    not live (``live`` in place)."""
    res.cycles += 1
    res.num_draft_tokens.append(n)  # at most the nodes the tree holds
    for i, r in enumerate(rows):
        if not live[i]:
            continue
        out, before = res.tokens[r], len(res.tokens[r])
        for tok in host[i][2 : 2 + pend_host[i]]:
            out.append(tok)
            if tok in eos_ids or len(out) >= max_new_tokens:
                break
        res.accept_lengths[r].append(len(out) - before)
        live[i] = not finished(out, eos_ids, max_new_tokens)


def _finish(
    res: BatchResult,
    timer: Timer,
    t0: float,
    caches: tuple[RaggedStaticCache, RaggedStaticCache],
) -> BatchResult:
    """``res`` completed: the call's wall seconds since ``t0``, the draft and verify seconds
    timed, and the KV buffers the target's and the draft's ``caches`` have allocated."""
    tcache, dcache = caches
    res.total_s = timer.now() - t0
    res.draft_s, res.verify_s = timer.seconds("draft"), timer.seconds("verify")
    res.cache_allocations = tcache.allocations + dcache.allocations
    return res


def reserve(
    steps: Steps,
    rows: int,
    longest_prompt: int,
    max_new_tokens: int,
    shape: TreeShape | ShapePolicy,
    *,
    vocab: int,
) -> None:
    """Allocate ``steps``' KV caches for every call of up to ``rows`` prompts of up to
    ``longest_prompt`` tokens, before the first: later calls reuse them (and under fixed shapes
    the steps compiled or captured for them), whatever their own lengths."""
    shape_at = _policy(shape, vocab)
    plan = _plan(shape_at, rows, steps.fixed)
    steps.caches(rows, *_slots(shape_at, plan, longest_prompt + max_new_tokens))


def _slots(shape_at: ShapePolicy, plan: StepPlan, room: int) -> tuple[int, int]:
    """KV slots per row of the target's and the draft's cache: ``room`` (prompt and new
    tokens) plus the most a cycle stages (the verified tree; the pending pairs and the tree's
    levels)."""
    k_max = max(n for _, n, _ in plan.buckets)
    d_max = plan.pending + max(shape_at(b).depth * k for b, _, k in plan.buckets)
    return room + k_max, room + d_max


def _columns(x_bn: torch.Tensor, width: int) -> torch.Tensor:
    """The first ``width`` columns of [B, n], padded with its first column past n."""
    if width <= x_bn.shape[1]:
        return x_bn[:, :width]
    return torch.cat([x_bn, x_bn[:, :1].expand(-1, width - x_bn.shape[1])], 1)


def _policy(shape: TreeShape | ShapePolicy, vocab: int) -> ShapePolicy:
    """The shape of each live batch size, capped (:meth:`TreeShape.capped`), asked once per b."""
    cache: dict[int, TreeShape] = {}

    def at(b: int) -> TreeShape:
        if b not in cache:
            cache[b] = (shape if isinstance(shape, TreeShape) else shape(b)).capped(vocab)
        return cache[b]

    return at


def _plan(shape_at: ShapePolicy, b0: int, fixed: bool) -> StepPlan:
    """The step shapes a call of b0 rows can meet (:class:`~workloads.engine.steps.StepPlan`): every
    batch size below b0 when rows leave at once, the buckets of
    :func:`~workloads.engine.batch.row_bucket` under fixed shapes."""
    sizes = sorted({row_bucket(b, b0, fixed) for b in range(1, b0 + 1)})
    buckets = []
    for b in sizes:
        s = shape_at(b)
        buckets.append((b, min(s.num_draft_tokens, max_nodes(s.depth, s.topk)), s.topk))
    return StepPlan(buckets=tuple(buckets), pending=max(shape_at(b).depth for b in sizes) + 1)


def speculative_generate(
    target: PreTrainedModel,
    draft: Draft,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    depth: int,
    topk: int,
    num_draft_tokens: int,
    eos_ids: frozenset[int],
) -> DecodeResult:
    """One prompt at temperature 0 (batch size 1): :func:`generate` for a single row."""
    out = generate(
        target,
        draft,
        [prompt_ids],
        max_new_tokens=max_new_tokens,
        shape=TreeShape(depth=depth, topk=topk, num_draft_tokens=num_draft_tokens),
        eos_ids=eos_ids,
    )
    return DecodeResult(
        tokens=out.tokens[0],
        accept_lengths=out.accept_lengths[0],
        draft_s=out.draft_s,
        verify_s=out.verify_s,
        total_s=out.total_s,
    )
