"""The forward steps of a decoding cycle, eager, compiled or replayed from CUDA graphs (private).

A cycle runs two kinds of forward: the target's verification of the tree (``verify``) and the
draft's steps (``draft``: the pending pairs, then one step per tree level). At batch 1 on a GPU a
one-layer draft step is a few dozen small kernels, so launch overhead, not the GPU, sets its time;
SGLang and gpt-fast capture the decode steps as CUDA graphs or compile them for that reason.

- ``none``: eager calls.
- ``compile``: ``torch.compile`` of each step (inductor; CPU or CUDA). The KV cache attends over
  its whole capacity (``fixed_width``, rounded up to :data:`CAPACITY_BUCKET` slots), so a step's
  shapes depend only on (b, n, capacity bucket) and each is compiled once (about a minute per
  shape on a 2-core CPU: it pays only over long runs). The prompt phase (prompt lengths vary)
  runs eagerly.
- ``graphs``: each step captured as a CUDA graph per input shape (b, n) on first use, then
  replayed with its inputs copied into the graph's static buffers. Shapes that cannot be
  captured run eagerly, said once per shape (:data:`fallbacks`).

The cache's buffers and its write index (:class:`~workloads._kv.RaggedStaticCache` with
``fixed_width``) keep their addresses, which is what a replayed graph needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel

from workloads._kv import CACHE_KW, RaggedStaticCache

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


class Steps:
    """The target's and the draft's forward steps of :func:`workloads.tree_decode.generate`.

    Args:
        target: the target causal LM.
        draft: the draft (``__call__``, ``logits``, ``draft_to_target``); None for the
            autoregressive loop (``verify`` only).
        mode: ``none`` | ``compile`` | ``graphs`` (module doc).

    Raises:
        ValueError: ``graphs`` for a target that is not on a CUDA device, or an unknown mode.
    """

    def __init__(self, target: PreTrainedModel, draft: Any | None, mode: str = "none") -> None:
        if mode not in ("none", "compile", "graphs"):
            raise ValueError(f"compile mode {mode!r}: use none, compile or graphs")
        if mode == "graphs" and target.device.type != "cuda":
            raise ValueError(
                f"compile 'graphs' captures CUDA graphs, but the target is on {target.device}. "
                "Fix: compile: compile (or none) on a CPU"
            )
        no_draft = torch.zeros(0, dtype=torch.long)
        self.draft_to_target: torch.Tensor = getattr(draft, "draft_to_target", no_draft)
        self.draft_logits: Step = getattr(draft, "logits", _no_draft)

        def verify(ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: Any) -> Any:
            h = target.model(
                input_ids=ids,
                position_ids=pos,
                attention_mask=mask,
                use_cache=True,
                **{CACHE_KW: cache},
            ).last_hidden_state
            return h, target.lm_head(h).float()

        draft_fwd: Step = _no_draft if draft is None else draft

        def draft_step(h: torch.Tensor, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor,
                       cache: Any) -> Any:  # fmt: skip
            return draft_fwd(h, x, pos, attention_mask=mask, cache=cache)

        self.mode = mode
        self.draft_eager: Step = draft_step  # the prompt phase: its lengths vary by batch
        if mode == "compile":
            torch._dynamo.config.recompile_limit = max(
                torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT
            )
            self._verify: Step = torch.compile(verify, dynamic=False)
            self._draft: Step = torch.compile(draft_step, dynamic=False)
        elif mode == "graphs":
            self._verify, self._draft = Graphed(verify, "verify"), Graphed(draft_step, "draft")
        else:
            self._verify, self._draft = verify, draft_step

    def verify(
        self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, cache: RaggedStaticCache
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Target forward of [B, n] tokens at positions [B, n] with mask [B, 1, n, W]:
        hidden states [B, n, h] and float32 logits [B, n, V]."""
        h, logits = self._verify(ids, pos, mask, cache)
        return h, logits

    def draft(
        self,
        hidden: torch.Tensor,
        next_ids: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor,
        cache: RaggedStaticCache,
    ) -> torch.Tensor:
        """Draft forward of [B, T] pairs (hidden [B, T, h], tokens, positions, mask [B, 1, T, W])
        -> [B, T, h] draft hidden states."""
        out: torch.Tensor = self._draft(hidden, next_ids, pos, mask, cache)
        return out


def _no_draft(*_: Any, **__: Any) -> Any:
    raise TypeError("these steps have no draft (the autoregressive loop): verify only")


class Graphed:
    """A step captured as one CUDA graph per input shape, replayed with copied inputs.

    The step's last argument is the KV cache (not a tensor input: its buffers are read and
    written in place at fixed addresses). Outputs are the graph's static tensors, valid until
    the same shape is replayed again.

    Args:
        fn: the step, ``fn(*tensors, cache)``.
        name: for messages.
        capture: False only in tests on a CPU: inputs still go through the static buffers, but
            the step is called instead of replayed (everything but the capture is exercised).
    """

    def __init__(self, fn: Step, name: str, *, capture: bool = True) -> None:
        self.fn, self.name, self.capture = fn, name, capture
        self.graphs: dict[tuple[Any, ...], tuple[Any, list[torch.Tensor], Any]] = {}
        self.fallbacks: dict[tuple[Any, ...], str] = {}

    def __call__(self, *args: Any) -> Any:
        *tensors, cache = args
        key = (*(tuple(t.shape) for t in tensors), getattr(cache, "rows", None))
        if key in self.fallbacks:
            return self.fn(*tensors, cache)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(tensors, cache)
            except Exception as exc:  # a shape that cannot be captured runs eagerly
                self.fallbacks[key] = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "CUDA graph capture of the %s step failed for shapes %s; it runs eagerly: %s",
                    self.name, key, self.fallbacks[key],
                )  # fmt: skip
                return self.fn(*tensors, cache)
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
        with torch.cuda.graph(graph):
            out = self.fn(*static, cache)
        return graph, static, out
