"""Online features: the target's hidden states computed inside each training step, nothing stored.

SpecForge's and vLLM speculators' online modes do the same: the frozen target runs forward on
the step's rows (inference mode) and its last-layer hidden states feed the draft at once. An
:class:`OnlineFeatures` is a :class:`~workloads.training.features.FeatureSet` like the cache, with
the same masks, positions and float16 rounding (:func:`~workloads.training.features.target_hidden`),
so a trial gives the same losses either way (``features.mode``, see
:mod:`workloads.training.stage_data`). It pickles as a :class:`TargetSpec` plus its row source, so a
training worker loads its own copy of the target on its device.

Shape legend: b rows, L sequence length, h hidden size.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from workloads.data.packing import PackedRows, RowSource
from workloads.training.features import target_hidden

if TYPE_CHECKING:
    from workloads.models.target import Target


@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    """How to load the frozen target (the trial's ``target`` block): small and picklable, so
    :class:`OnlineFeatures` sent to a worker loads the target there (once per process).

    ``load()`` calls :func:`workloads.models.target.load_target` with these fields."""

    name: str
    """``target.model``: a builtin name, a local folder or a hub id"""
    cache_dir: Path
    """the shared cache (where the converted default target is kept)"""
    dtype: str = "float32"
    """``target.dtype``"""
    weights: Literal["pretrained", "random"] = "pretrained"
    """``target.weights``"""
    device_map: Literal["none", "auto"] = "none"
    """``target.device_map``"""
    seed: int = 0
    """seed of random weights"""
    device: str = "cpu"
    """``cpu``, ``cuda`` or ``auto``"""

    def load(self) -> Target:
        """The target, loaded once per process and spec (later calls return the same one)."""
        return _load_target(self)


@functools.lru_cache(maxsize=2)
def _load_target(spec: TargetSpec) -> Target:
    from workloads.models.target import load_target

    return load_target(
        spec.name,
        cache_dir=spec.cache_dir,
        dtype=spec.dtype,
        device=spec.device,
        weights=spec.weights,
        device_map=spec.device_map,
        seed=spec.seed,
    )


class OnlineFeatures:
    """A :class:`FeatureSet` whose hidden states the target computes when asked, inside the
    training step, on that step's rows only; nothing is stored.

    The hidden states are those a cache would hold, bit for bit up to the batching of rows:
    the same masks and positions (:func:`target_hidden`) and the same float16 rounding, left on
    the target's device.

    Args:
        rows: the stage's packed rows.
        target: a :class:`TargetSpec` (loaded on first use, once per process) or the loaded
            target model itself (then the object cannot be pickled).
        model: the spec's target model when the caller has already loaded it (not pickled).
        batch: rows per target forward.
        layers: the target layers fused into the features (:mod:`workloads.models.fusion`);
            () = the last-layer hidden states only.
    """

    def __init__(
        self,
        rows: RowSource,
        target: TargetSpec | torch.nn.Module,
        *,
        model: torch.nn.Module | None = None,
        batch: int = 4,
        layers: tuple[int, ...] = (),
    ) -> None:
        self.source = rows
        self.layers = tuple(layers)
        self.spec = target if isinstance(target, TargetSpec) else None
        self._model = model if isinstance(target, TargetSpec) else target
        self.batch = batch
        self.target_rows = 0
        """rows run through the target by this object in this process"""

    def __getstate__(self) -> dict[str, Any]:
        if self.spec is None:
            raise TypeError(
                "OnlineFeatures over a target model object cannot be pickled (sent to a "
                "worker); build it with a TargetSpec"
            )
        return {
            "source": self.source,
            "spec": self.spec,
            "batch": self.batch,
            "layers": self.layers,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._model, self.target_rows = None, 0

    @property
    def rows(self) -> int:
        """R, rows of the stage."""
        return int(self.source.rows)

    @property
    def seq_len(self) -> int:
        """L, tokens per row."""
        return int(self.source.seq_len)

    @property
    def tokens(self) -> int:
        """R * L."""
        return self.rows * self.seq_len

    @property
    def model(self) -> torch.nn.Module:
        """The target model (loaded from the spec on first use)."""
        if self._model is None:
            assert self.spec is not None, "an OnlineFeatures has a model or a spec"
            self._model = self.spec.load().model
        return self._model

    def packed(self, idx: torch.Tensor) -> PackedRows:
        """Rows ``idx`` [b] of the row source, each [b, L]."""
        return self.source.packed(idx)

    def hidden(self, idx: torch.Tensor, packed: PackedRows | None = None) -> torch.Tensor:
        """[b, L, F] float16 target features of rows ``idx`` (:meth:`FeatureSet.hidden`),
        computed now (inference mode) on the target's device.

        Raises:
            ValueError: a hidden state overflows float16.
        """
        part = packed if packed is not None else self.packed(idx)
        hidden = target_hidden(
            self.model,
            part.input_ids,
            part.position_ids,
            self.batch,
            to_cpu=False,
            layers=self.layers,
        )
        self.target_rows += int(part.input_ids.shape[0])
        return hidden
