"""The forward steps of a decoding cycle, eager, compiled or replayed from CUDA graphs (private).

A cycle runs two kinds of forward: the target's verification of the tree (``verify``) and the
draft's steps (``draft``: the pending pairs, then one step per tree level).

- ``none``: eager calls.
- ``compile``: ``torch.compile`` of each step (inductor; CPU or CUDA). The KV cache attends over
  its whole capacity (``fixed_width``, rounded up to :data:`CAPACITY_BUCKET` slots) and batches
  keep bucketed sizes (:func:`workloads.engine.batch.row_bucket`), so a step's shapes take a few
  values per call and each is compiled once, in :meth:`Steps.prepare`, before the timers start.
  The prompt phase (prompt lengths vary) runs eagerly.
- ``graphs``: each step captured as a CUDA graph per input shape in :meth:`Steps.prepare` (all
  the batch buckets a call can meet), then replayed with its inputs copied into the graph's
  static buffers. All graphs share one memory pool: graphs replay one at a time and their
  outputs are read before the next replay. A shape that cannot be captured runs eagerly,
  counted in :attr:`Steps.stats`; running out of memory is raised, never swallowed.

A :class:`Steps` lives across ``generate`` calls: it keeps its compiled steps, its graphs and
the KV caches they read and write (:meth:`Steps.caches`), so a repeat call with the same shapes
compiles and captures nothing. The cache's buffers and its write index
(:class:`~workloads.models.kv_cache.RaggedStaticCache` with ``fixed_width``) keep their
addresses, as a replayed graph needs.

Shape legend: B rows, n verified tokens, P pending pairs, K frontier nodes, W key slots.
"""

from __future__ import annotations

import itertools
import logging
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from workloads.models.draft import Draft
from workloads.models.fusion import body_features, last_layer
from workloads.models.kv_cache import CACHE_KW, RaggedStaticCache, additive_mask, layer_masks
from workloads.models.target import input_device

log = logging.getLogger(__name__)

Step = Callable[..., Any]

CAPACITY_BUCKET = 256
"""compiled and captured steps see KV caches of a multiple of this many slots per row"""

RECOMPILE_LIMIT = 64
"""dynamo's recompiles per step: b, n and the bucket take a few values each (default 8 would
fall back to eager mid-run)"""


def capacity(slots: int, mode: str) -> int:
    """KV slots per row to allocate for ``slots`` needed: rounded up to a bucket when compiled."""
    return slots if mode == "none" else -(-slots // CAPACITY_BUCKET) * CAPACITY_BUCKET


@dataclass
class StepStats:
    """What compiling and capturing cost, and what did not go as asked (the trial's metrics).

    Attributes:
        captures: CUDA graphs captured (``graphs``; with ``capture=False`` the shapes that
            would have been).
        capture_s: seconds capturing them (warm-up runs included), outside the timers.
        compiles: graphs dynamo compiled (``compile``: one per shape and step, recompiles
            included).
        compile_s: seconds of the first calls that compiled them, outside the timers.
        fallbacks: step shapes that run eagerly because their capture failed (with why).
        late: step calls inside a timed cycle that met a shape not prepared, or that
            compiled (a recompile: the prepared graph's guards failed); their capture or compile
            time is then inside the timers. 0 unless :meth:`Steps.prepare`'s plan is wrong.
    """

    captures: int = 0
    capture_s: float = 0.0
    compiles: int = 0
    compile_s: float = 0.0
    fallbacks: dict[str, str] = field(default_factory=dict)
    late: int = 0

    def metrics(self) -> dict[str, float]:
        return {
            "compile.captures": float(self.captures),
            "compile.capture_s": self.capture_s,
            "compile.compiles": float(self.compiles),
            "compile.compile_s": self.compile_s,
            "compile.fallbacks": float(len(self.fallbacks)),
            "compile.late": float(self.late),
        }


@dataclass(frozen=True)
class StepPlan:
    """The shapes one ``generate`` call can run its steps at: per batch bucket B the verified
    tokens n and the tree's frontier K, and the pending pairs P (the same for every B)."""

    buckets: tuple[tuple[int, int, int], ...]
    """(B, n, K) per batch bucket"""
    pending: int
    """P: pending pairs per row (the deepest tree's depth + 1)"""


class Steps:
    """The target's and the draft's forward steps of :func:`workloads.engine.tree_decode.generate`.

    Args:
        target: the target causal LM.
        draft: the draft (:class:`~workloads.models.draft.Draft`); None for the autoregressive loop
            (``verify`` only). Replace it with :meth:`set_draft`.
        mode: ``none`` | ``compile`` | ``graphs`` (module doc).
        backend: the ``torch.compile`` backend (``eager`` in tests: counts graphs, no codegen).
        capture: False only in tests on a CPU: the ``graphs`` path with the capture replaced by
            an eager call through the same static buffers (``graphs`` needs CUDA otherwise).

    Raises:
        ValueError: ``graphs`` for a target that is not on a CUDA device, or an unknown mode.
    """

    def __init__(
        self,
        target: PreTrainedModel,
        draft: Draft | None,
        mode: str = "none",
        *,
        backend: str | Callable[..., Any] = "inductor",
        capture: bool = True,
    ) -> None:
        if mode not in ("none", "compile", "graphs"):
            raise ValueError(f"compile mode {mode!r}: use none, compile or graphs")
        if mode == "graphs" and capture and input_device(target).type != "cuda":
            raise ValueError(
                f"compile 'graphs' captures CUDA graphs, but the target is on "
                f"{input_device(target)}. Fix: compile: compile (or none) on a CPU"
            )
        self.target, self.mode, self.stats = target, mode, StepStats()
        self._backend, self._capture = backend, capture
        self._caches: dict[str, RaggedStaticCache] = {}
        self._prepared: set[tuple[Any, ...]] = set()
        self.pool = torch.cuda.graph_pool_handle() if mode == "graphs" and capture else None

        self.fusion_layers: tuple[int, ...] = ()
        """target layers the draft fuses (its ``arch.fusion_layers``), read by the verify step"""

        def verify(ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: Any) -> Any:
            h = body_features(
                target.model,
                self.fusion_layers,
                input_ids=ids,
                position_ids=pos,
                attention_mask=layer_masks(target.config, mask, pos),
                use_cache=True,
                **{CACHE_KW: cache},
            )
            return h, target.lm_head(last_layer(h, len(self.fusion_layers)))

        self._verify_eager: Step = verify
        self._verify = self._wrap(verify, "verify")
        self.set_draft(draft)

    @property
    def fixed(self) -> bool:
        """Whether steps need fixed shapes (bucketed rows, full-width caches)."""
        return self.mode != "none"

    def _wrap(self, fn: Step, name: str) -> Step:
        if self.mode == "compile":
            torch._dynamo.config.recompile_limit = max(
                torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT
            )
            own = _own_code(fn, f"{name}_step_{next(_SERIAL)}")
            return torch.compile(own, dynamic=False, backend=self._count(self._backend))
        if self.mode == "graphs":
            return Graphed(fn, name, self.stats, capture=self._capture, pool=self.pool)
        return fn

    def _count(self, backend: str | Callable[..., Any]) -> Callable[..., Any]:
        from torch._dynamo.backends.registry import lookup_backend

        inner = lookup_backend(backend) if isinstance(backend, str) else backend

        def counted(gm: Any, example_inputs: Any, **kw: Any) -> Any:
            self.stats.compiles += 1
            return inner(gm, example_inputs, **kw)

        return counted

    def set_draft(self, draft: Draft | None) -> None:
        """Use ``draft`` from now on (a per-batch oracle); its steps are compiled or captured
        again only if it is another capturable draft."""
        if getattr(self, "_draft_obj", None) is draft and draft is not None:
            return
        self._draft_obj = draft
        layers = tuple(getattr(getattr(draft, "arch", None), "fusion_layers", ()))
        if layers != self.fusion_layers:  # the verify step returns other features now
            self.fusion_layers = layers
            self._verify = self._wrap(self._verify_eager, "verify")
            self._prepared.clear()
        no_draft = torch.zeros(0, dtype=torch.long)
        self.draft_to_target: torch.Tensor = getattr(draft, "draft_to_target", no_draft)
        self._top: Step = getattr(draft, "top_candidates", None) or self._top_of_logits
        draft_fwd: Step = _no_draft if draft is None else draft

        def draft_step(
            h: torch.Tensor, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: Any
        ) -> Any:
            return draft_fwd(h, x, pos, attention_mask=mask, cache=cache)

        self.draft_eager: Step = draft_step  # the prompt phase: its lengths vary by batch
        capturable = draft is not None and getattr(draft, "capturable", True)
        self._draft = self._wrap(draft_step, "draft") if capturable else draft_step
        self._draft_capturable = capturable
        self._prepared = {k for k in self._prepared if k[0] == "verify"}

    def _top_of_logits(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        assert self._draft_obj is not None, "the autoregressive loop's steps have no draft"
        logp = torch.log_softmax(self._draft_obj.logits(hidden).float(), -1)
        return logp.topk(k, -1)

    def caches(
        self, rows: int, t_slots: int, d_slots: int
    ) -> tuple[RaggedStaticCache, RaggedStaticCache]:
        """The target's and the draft's KV caches for a batch of ``rows`` needing ``t_slots``
        and ``d_slots`` per row: those of the last call, emptied, when they are big enough
        (their buffers, and the graphs that read them, are kept), else new ones."""
        dev = input_device(self.target)
        out = []
        for kind, slots in (("target", t_slots), ("draft", d_slots)):
            cache = self._caches.get(kind)
            if cache is None or cache.max_rows < rows or cache.capacity < slots:
                cache = RaggedStaticCache(
                    rows, capacity(slots, self.mode), dev, fixed_width=self.fixed
                )
                self._caches[kind] = cache
                self._prepared.clear()
                for step in (self._verify, self._draft):  # graphs of the old caches' buffers
                    if isinstance(step, Graphed):
                        step.forget()
            cache.reset(rows)
            out.append(cache)
        return out[0], out[1]

    def prepare(self, plan: StepPlan, tcache: RaggedStaticCache, dcache: RaggedStaticCache) -> None:
        """Compile or capture every step shape of ``plan`` now (outside the timers), on dummy
        inputs in the caches' staged slots (discarded; the caches are empty before and after).
        Shapes prepared by an earlier call are skipped."""
        if not self.fixed:
            return
        ti = input_device(self.target)
        dt = self.target.dtype
        rows = tcache.rows
        ddt = _dtype_of(self._draft_obj) if self._draft_capturable else None
        # the caches' buffers are allocated by an eager call first: a compiled step that
        # allocated them would be compiled again once they exist (a graph, into its pool)
        hd = int(self.target.config.hidden_size)
        feat = (len(self.fusion_layers) + 1) * hd  # the target features the pending pairs carry
        first = [("verify", tcache, dt, 0)]
        first += [("draft", dcache, dt, feat)] if ddt is not None else []
        for kind, cache, hdt, hw in first:
            if not cache.keys:
                self._dummy(kind, cache, rows, 1, hdt, hw, eager=True)
        for b, n, k in plan.buckets:
            todo = [("verify", b, n, dt, 0)]
            if ddt is not None:
                todo += [("draft", b, plan.pending, dt, feat), ("draft", b, k, ddt, hd)]
            for key in todo:
                if key in self._prepared:
                    continue
                kind, _, width, hdt, hw = key
                t0 = time.perf_counter()
                before = self.stats.captures
                self._dummy(kind, tcache if kind == "verify" else dcache, b, width, hdt, hw)
                _sync(ti)
                seconds = time.perf_counter() - t0
                if self.mode == "compile":
                    self.stats.compile_s += seconds
                elif self.stats.captures > before:
                    self.stats.capture_s += seconds
                self._prepared.add(key)
        tcache.reset(rows)
        dcache.reset(rows)

    def _dummy(
        self,
        kind: str,
        cache: RaggedStaticCache,
        b: int,
        width: int,
        hdt: torch.dtype,
        hw: int,
        *,
        eager: bool = False,
    ) -> None:
        """One step of ``kind`` on b rows of ``width`` dummy tokens (a draft's: hidden inputs
        ``hw`` wide) in ``cache``'s staged slots (then discarded)."""
        ti = input_device(self.target)
        cache.reset(b)
        cache.stage(width)
        mask = additive_mask(cache.allowed(_causal(b, width, ti)), hdt)
        # ids and positions apart: a compiled step guards on which inputs alias each other
        ids = torch.zeros(b, width, dtype=torch.long, device=ti)
        pos = torch.arange(width, device=ti).expand(b, width).contiguous()
        if kind == "verify":
            (self._verify_eager if eager else self._verify)(ids, pos, mask, cache)
        else:
            h = torch.zeros(b, width, hw, dtype=hdt, device=ti)
            (self.draft_eager if eager else self._draft)(h, ids, pos, mask, cache)
        cache.discard()

    def verify(
        self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: RaggedStaticCache
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Target forward of [B, n] tokens at positions [B, n] with mask [B, 1, n, W]:
        target features [B, n, F] (:attr:`fusion_layers`; F = h without fusion) and logits
        [B, n, V] in the target's dtype, both on its output device."""
        self._late("verify", ids.shape[0], ids.shape[1], mask.dtype, 0)
        if self.fixed:  # compiled steps guard on strides: the layout prepare made them for
            ids, pos, mask = _dense(ids), _dense(pos), _dense(mask)
        before = self.stats.compiles
        h, logits = self._verify(ids, pos, mask, cache)
        self.stats.late += self.stats.compiles > before  # compiled inside a timed cycle
        return h, logits

    def draft(
        self,
        hidden: torch.Tensor,
        next_ids: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor,
        cache: RaggedStaticCache,
    ) -> torch.Tensor:
        """Draft forward of [B, T] pairs (hidden [B, T, F] target features or [B, T, h] draft
        states, tokens, positions, mask [B, 1, T, W]) -> [B, T, h] draft hidden states."""
        if self._draft_capturable:
            self._late("draft", hidden.shape[0], hidden.shape[1], mask.dtype, hidden.shape[2])
        if self.fixed and self._draft_capturable:
            hidden, next_ids, pos, mask = (_dense(t) for t in (hidden, next_ids, pos, mask))
        before = self.stats.compiles
        out: torch.Tensor = self._draft(hidden, next_ids, pos, mask, cache)
        self.stats.late += self.stats.compiles > before
        return out

    def top_candidates(self, hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The draft's k most likely next tokens after each state: log-probabilities [..., k]
        (float32, descending) and draft-vocabulary ids [..., k]. A draft may give them without
        a full-vocabulary pass (``top_candidates``; the oracle does)."""
        lp, ix = self._top(hidden, k)
        return lp, ix

    def _late(self, kind: str, b: int, width: int, dt: torch.dtype, hw: int) -> None:
        if self.fixed and (kind, b, width, dt, hw) not in self._prepared:
            self.stats.late += 1
            self._prepared.add((kind, b, width, dt, hw))


_SERIAL = itertools.count()


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` with the strides of a new tensor of its shape, size-1 dimensions included (a copy
    only when they differ; ``contiguous()`` keeps those strides, and dynamo guards on them)."""
    want, acc = [], 1
    for size in reversed(t.shape):
        want.append(acc)
        acc *= max(size, 1)
    if t.stride() == tuple(reversed(want)):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _own_code(fn: Step, name: str) -> Step:
    """``fn`` with a code object of its own, so each :class:`Steps` has its own compiled graphs
    and recompile count (dynamo keeps both per code object), freed with it."""
    code = fn.__code__.replace(co_name=name, co_qualname=name)
    own = types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    own.__kwdefaults__ = fn.__kwdefaults__
    return own


def _causal(b: int, n: int, dev: torch.device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=dev).tril().expand(b, n, n)


def _dtype_of(module: Any) -> torch.dtype | None:
    params = getattr(module, "parameters", None)
    first = next(iter(params()), None) if params else None
    return first.dtype if first is not None else None


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _no_draft(*_: Any, **__: Any) -> Any:
    raise TypeError("these steps have no draft (the autoregressive loop): verify only")


class Graphed:
    """A step captured as one CUDA graph per input signature, replayed with copied inputs.

    The step's last argument is the KV cache (not a tensor input: its buffers are read and
    written in place at fixed addresses). Outputs are the graph's static tensors, valid until
    the same signature is replayed again. The signature is each input's shape, dtype and device
    plus the cache (its identity and live rows): two dtypes never share a graph.

    Args:
        fn: the step, ``fn(*tensors, cache)``.
        name: for messages.
        stats: where captures, their seconds and fallbacks are counted.
        capture: False only in tests on a CPU: inputs still go through the static buffers, but
            the step is called instead of replayed (everything but the capture is exercised).
        pool: the memory pool shared by every graph of a :class:`Steps`.
    """

    def __init__(
        self,
        fn: Step,
        name: str,
        stats: StepStats | None = None,
        *,
        capture: bool = True,
        pool: Any = None,
    ) -> None:
        self.fn, self.name, self.capture, self.pool = fn, name, capture, pool
        self.stats = stats if stats is not None else StepStats()
        self.graphs: dict[tuple[Any, ...], tuple[Any, list[torch.Tensor], Any]] = {}
        self.fallbacks: dict[tuple[Any, ...], str] = {}

    @staticmethod
    def key(tensors: list[torch.Tensor], cache: Any) -> tuple[Any, ...]:
        """The signature a graph is captured for (see the class doc): the cache by its serial
        number, never reused (an ``id`` may be, once a cache is freed)."""
        sig = tuple((tuple(t.shape), t.dtype, t.device) for t in tensors)
        return (*sig, getattr(cache, "serial", id(cache)), getattr(cache, "rows", None))

    def forget(self) -> None:
        """Drop every graph (their caches were replaced); their pool memory goes with them."""
        self.graphs.clear()
        self.fallbacks.clear()

    def __call__(self, *args: Any) -> Any:
        *tensors, cache = args
        key = self.key(tensors, cache)
        if key in self.fallbacks:
            return self.fn(*tensors, cache)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(tensors, cache)
            except torch.cuda.OutOfMemoryError:
                raise  # out of memory is the run's result, not a shape to run eagerly
            except Exception as exc:  # a shape that cannot be captured runs eagerly
                reason = f"{type(exc).__name__}: {exc}"
                self.fallbacks[key] = reason
                self.stats.fallbacks[f"{self.name} {key[:-2]}"] = reason
                log.warning(
                    "CUDA graph capture of the %s step failed for shapes %s; it runs eagerly: %s",
                    self.name,
                    key[:-2],
                    reason,
                )
                return self.fn(*tensors, cache)
            self.stats.captures += 1
        graph, static, out = self.graphs[key]
        for buf, t in zip(static, tensors, strict=True):
            buf.copy_(t)
        if graph is None:  # capture=False: the same buffers, an eager call
            return self.fn(*static, cache)
        graph.replay()
        return out

    def _capture(self, tensors: list[torch.Tensor], cache: Any) -> tuple[Any, list[Any], Any]:
        static = [t.clone() for t in tensors]
        if not self.capture:
            return None, static, None
        # warm up on a side stream (lazy initialisation, kernel selection), then capture; the
        # writes into the cache land in staged slots that the replay writes again
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.fn(*static, cache)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.fn(*static, cache)
        return graph, static, out
