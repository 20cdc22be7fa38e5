"""Target features, the draft's inputs: packed token rows and the target's last hidden states.

A stage's features are a :class:`FeatureSet`: rows read by index, their hidden states next to
them. Three implementations:

- :class:`~workloads.training.feature_cache.CachedFeatures` (``features.mode: cached``), built by
  :func:`~workloads.training.feature_cache.ensure_features` into the shared on-disk cache and
  read lazily, memory-mapped, a few rows at a time (:mod:`workloads.training.feature_cache`);
- :class:`~workloads.training.online_features.OnlineFeatures` (``features.mode: online``): the
  target runs inside each training step on that step's rows, nothing on disk (the online mode of
  SpecForge, whose ``OnlineEagle3Model`` runs the frozen target under ``no_grad`` in the step's
  forward, and of vLLM's speculators, whose online mode asks a live vLLM server for the step's
  hidden states and discards them);
- :class:`Features`, rows and hidden states held in RAM (tests, small experiments).

:func:`workloads.training.feature_mode.resolve_feature_mode` picks cached or online for
``features.mode: auto`` from the size of the cache
(:func:`workloads.training.feature_mode.feature_gib`).

Rows carry their ``position_ids``: with document-isolated packing (:mod:`workloads.data.packing`)
the target's hidden states of a document are computed with a block-diagonal causal mask and
positions from 0 (:func:`target_hidden`), so they equal those of the document alone (SDPA/eager
attention get the boolean mask; a target loaded with a flash-attention kernel gets the positions
only, from which transformers derives the varlen boundaries of packed sequences, all rows of a
batch as one sequence). :class:`LazyRows` packs a stage's rows on first use, so a cache that
finds all its chunks packs nothing; :func:`tokenizer_fingerprint` is part of a cache's identity.

Shape legend: R rows, L sequence length, h hidden size, b rows asked for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Protocol, cast, runtime_checkable

import torch

from workloads.data.packing import InMemoryRows, PackedRows, attention_allowed
from workloads.models.fusion import body_features
from workloads.models.kv_cache import layer_masks


@runtime_checkable
class FeatureSet(Protocol):
    """The rows of one training stage and the target's hidden states of those rows.

    Row ``r`` is the same for every reader, process and run. What training reads per step is
    proportional to the step's rows, never to the stage.
    """

    @property
    def rows(self) -> int:
        """R, rows in the stage."""
        ...

    @property
    def seq_len(self) -> int:
        """L, tokens per row."""
        ...

    @property
    def tokens(self) -> int:
        """R * L, tokens in the stage."""
        ...

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """Rows ``idx`` [b] (long, any order, each < R): ids, loss mask, positions [b, L], CPU."""
        ...

    def hidden(self, idx: torch.Tensor, packed: PackedRows | None = None) -> torch.Tensor:
        """[b, L, F] float16: the target features of rows ``idx`` (F = h, the last-layer hidden
        states after the final norm; wider with hidden fusion, :mod:`workloads.models.fusion`),
        on the device they were computed on (the CPU for a cache). ``packed``:
        the rows' :meth:`packed`, when the caller has it (saves reading them again)."""
        ...


class Features:
    """A :class:`FeatureSet` held in RAM.

    Args:
        input_ids: [R, L] long.
        loss_mask: [R, L] bool.
        hidden: [R, L, h] float16, the target's last-layer hidden states (kept as
            ``hidden_states``; :meth:`hidden` reads rows of it).
        position_ids: [R, L] long; None: every row is one document, positions ``0..L-1``.
    """

    def __init__(
        self,
        input_ids: torch.Tensor,
        loss_mask: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor | None = None,
    ) -> None:
        self.input_ids = input_ids
        self.loss_mask = loss_mask
        self.hidden_states = hidden
        self.position_ids = position_ids

    @property
    def rows(self) -> int:
        """R, rows held."""
        return int(self.input_ids.shape[0])

    @property
    def seq_len(self) -> int:
        """L, tokens per row (0 when empty)."""
        return int(self.input_ids.shape[1]) if self.input_ids.ndim == 2 else 0

    @property
    def tokens(self) -> int:
        """Tokens in all rows."""
        return int(self.input_ids.numel())

    def positions(self, rows: torch.Tensor) -> torch.Tensor:
        """[len(rows), L] position ids of the rows at index ``rows``."""
        if self.position_ids is not None:
            return self.position_ids[rows]
        length = int(self.input_ids.shape[1])
        return torch.arange(length).expand(len(rows), length)

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """Rows ``idx`` [b] -> ids, loss mask, positions, each [b, L]."""
        return PackedRows(self.input_ids[idx], self.loss_mask[idx], self.positions(idx))

    def hidden(self, idx: torch.Tensor, packed: PackedRows | None = None) -> torch.Tensor:
        """[b, L, h] hidden states of rows ``idx`` (``packed`` is not needed)."""
        return self.hidden_states[idx]


def tokenizer_fingerprint(tokenizer: object) -> str:
    """16 hex chars over the tokenizer's class and vocabulary (token -> id): features built with
    another tokenizer are refused even under the same target name."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    vocab = sorted(get_vocab().items()) if callable(get_vocab) else []
    text = json.dumps([type(tokenizer).__name__, vocab], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@torch.inference_mode()
def target_hidden(
    target_model: torch.nn.Module,
    ids_rl: torch.Tensor,
    pos_rl: torch.Tensor,
    batch: int = 4,
    *,
    to_cpu: bool = True,
    layers: tuple[int, ...] = (),
) -> torch.Tensor:
    """Target features [R, L, F] (float16) of the target for rows ``ids_rl`` with positions
    ``pos_rl`` [R, L]: each segment (positions from 0) sees only its own tokens. F = h, the
    last-layer hidden states, or with fusion ``layers`` the states entering those layers
    before them, F = (len(layers) + 1) * h (:mod:`workloads.models.fusion`).

    Rows go through the target ``batch`` at a time; the result is on the CPU, or with
    ``to_cpu=False`` on the target's (first) device.

    Raises:
        ValueError: a hidden state overflows float16.
    """
    body = cast(torch.nn.Module, target_model.model)
    param = next(target_model.parameters(), None)
    dev = param.device if param is not None else torch.device("cpu")
    config = getattr(target_model, "config", None)
    flash = "flash" in str(getattr(config, "_attn_implementation", ""))
    outs = []
    for i in range(0, ids_rl.shape[0], batch):
        ids, pos = ids_rl[i : i + batch].to(dev), pos_rl[i : i + batch].to(dev)
        if flash:  # varlen: one packed sequence of all rows, boundaries where positions are 0
            b, length = ids.shape
            flat = body_features(
                body, layers, input_ids=ids.reshape(1, -1), position_ids=pos.reshape(1, -1)
            )
            hidden = flat.reshape(b, length, -1)
        else:
            allowed = attention_allowed(pos)
            if allowed is not None:  # packed segments: each sees only its own tokens
                index = torch.arange(pos.shape[1], device=dev).expand_as(pos)
                allowed = layer_masks(config, allowed, index)
            hidden = body_features(
                body, layers, input_ids=ids, position_ids=pos, attention_mask=allowed
            )
        hidden = hidden.to(torch.float16)
        outs.append(hidden.cpu() if to_cpu else hidden)
    hidden = torch.cat(outs)
    if not torch.isfinite(hidden).all():
        raise ValueError("target hidden states overflow float16; use a float32 cache")
    return hidden


class LazyRows:
    """A :class:`~workloads.data.packing.RowSource` whose rows are packed in RAM on first use.

    For the builtin corpora, packed whole by a function of the row count: a feature cache that
    finds all its chunks never packs anything, and one that builds packs once, not per chunk.

    Args:
        build: ``n -> PackedRows``, the first n rows (ids, loss mask, positions [n, L]).
        n: R, rows this source offers (pass whole chunks: ``ceil(n_rows / rows_per_chunk) *
            rows_per_chunk``, so that a chunk is never cut short).
        seq_len: L, tokens per row (known before packing).
    """

    def __init__(self, build: Callable[[int], PackedRows], n: int, seq_len: int) -> None:
        self._build, self._n, self._seq_len = build, n, seq_len
        self._data: InMemoryRows | None = None

    @property
    def rows(self) -> int:
        """R, rows offered."""
        return self._n

    @property
    def seq_len(self) -> int:
        """L, tokens per row."""
        return self._seq_len

    @property
    def built(self) -> bool:
        """Whether the rows have been packed."""
        return self._data is not None

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """Rows ``idx`` [b] -> each [b, L] (packs all R rows on the first call).

        Raises:
            ValueError: ``build`` gave rows of another shape than [R, L].
        """
        if self._data is None:
            data = self._build(self._n)
            if tuple(data.input_ids.shape) != (self._n, self._seq_len):
                raise ValueError(
                    f"the row builder gave {tuple(data.input_ids.shape)} rows, not "
                    f"({self._n}, {self._seq_len})"
                )
            self._data = InMemoryRows(data)
        return self._data.packed(idx)
