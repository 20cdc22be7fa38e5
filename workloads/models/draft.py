"""The draft model of the EAGLE / Scylla family.

Input at position t: ``concat(embed(x_{t+1}), h_t)`` where ``h_t`` is the target's last-layer
hidden state (after its final norm) and ``x_{t+1}`` the next token; with EAGLE-3's hidden fusion
(``fusion_layers``), ``h_t`` is instead a linear fusion (``fuse``, n*h -> h, no bias) of the
target's hidden states at n layers (:mod:`workloads.models.fusion`). Then an FC layer 2h -> h,
``layers`` LLaMA decoder layers, an RMSNorm (Scylla, arXiv 2505.07858 Sec. 4; EAGLE-1 has none)
and the target's frozen LM head, optionally truncated to the ``vocab_size`` most frequent target
tokens (EAGLE-3 style; ``draft_to_target`` maps draft ids back to target ids).

The output ``f_{t}`` is the predicted target hidden state ``h_{t+1}``; ``logits(f_t)`` gives the
draft distribution of token ``x_{t+2}``.

Precision: the trainable weights (FC, layers, norm) stay float32, the master copy the optimiser
updates; the frozen embedding and LM head are kept in a *compute dtype* (float32 for fp32
training, bfloat16 for bfloat16 autocast: half the memory and no casts in the matmuls). Inputs
are cast to what the weights need, so a plain float32 forward, a bfloat16-autocast forward (CPU
or CUDA) and decoding beside a bfloat16 target (whose hidden states and masks are bfloat16) all
work whatever the target's dtype. To decode in the target's dtype instead,
:meth:`DraftModel.cast_to` casts the weights but keeps the RoPE table (``inv_freq``) in float32;
``.to(dtype=...)`` would not.

Shape legend: B batch, T positions, S cached + new positions, h hidden size, N draft vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DynamicCache, LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from workloads.models.kv_cache import CACHE_KW, RaggedStaticCache

TRAINED_WITH = "trained_with.json"
"""file of a draft folder holding the draft_train trial config it was trained with (its
pretraining tokens and seed select it for serving; absent in folders saved before 2026-12-03)"""


def trained_target(folder: Path) -> str | None:
    """``target.model`` of the trial that trained the draft in ``folder`` (its
    :data:`TRAINED_WITH`), or None when the folder has no readable record of it."""
    try:
        cfg = json.loads((folder / TRAINED_WITH).read_text())
    except (OSError, ValueError):
        return None
    model = (cfg.get("target") or {}).get("model") if isinstance(cfg, dict) else None
    return str(model) if model else None


def check_trained_target(folder: Path, target_model: str) -> None:
    """Refuse to run the draft in ``folder`` on a builtin target other than the builtin one it
    was trained on (:func:`trained_target`); a path or hub id on either side is not judged.

    Raises:
        workloads.config.ConfigError: the two builtin names differ, with the fix, blaming
            ``target.model``.
    """
    from workloads.config import ConfigError
    from workloads.models.target_source import builtin_target

    trained = trained_target(folder)
    if trained is None or trained == target_model:
        return
    if builtin_target(trained) is not None and builtin_target(target_model) is not None:
        raise ConfigError(
            f"the draft {folder} was trained on {trained!r}, and target.model is "
            f"{target_model!r}. Fix: target.model: {trained}",
            ("target", "model"),
        )


@dataclass(frozen=True, kw_only=True)
class DraftArch:
    """Architecture of a draft; the width and attention shape follow the target."""

    hidden_size: int
    """h, the target's hidden width"""
    layers: int
    """D, number of LLaMA decoder layers"""
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    """MLP inner width h_m"""
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    output_norm: bool
    """RMSNorm before the LM head (Scylla) or none (EAGLE-1)"""
    first_input_norm: bool = True
    """RMSNorm on the first decoder layer's input (HF LLaMA); EAGLE-1/2's code has none"""
    fusion_layers: tuple[int, ...] = ()
    """target layers fused into the draft's input (EAGLE-3); () = the last-layer state only"""
    embed_scale: float = 1.0
    """factor on the frozen embedding's rows, the target's own convention (sqrt(h) for Gemma:
    :func:`workloads.models.target.embedding_scale`); 1.0 for LLaMA-style targets"""

    @property
    def feature_width(self) -> int:
        """F, width of the target features the draft reads: ``(len(fusion_layers) + 1) * h``
        (:mod:`workloads.models.fusion`)."""
        return (len(self.fusion_layers) + 1) * self.hidden_size

    @classmethod
    def from_fields(cls, data: dict[str, Any]) -> DraftArch:
        """The architecture of a saved ``arch.json`` or an export's config (unknown keys
        ignored; ``fusion_layers`` absent in drafts saved before fusion existed)."""
        known = {f.name for f in fields(cls)}
        args = {k: v for k, v in data.items() if k in known}
        args["fusion_layers"] = tuple(args.get("fusion_layers", ()))
        return cls(**args)

    @classmethod
    def from_target(
        cls,
        config: object,
        *,
        layers: int,
        output_norm: bool,
        first_input_norm: bool = True,
        rope_theta: float | None = None,
        fusion_layers: tuple[int, ...] = (),
        embed_scale: float = 1.0,
    ) -> DraftArch:
        """Copy the width, attention shape and RoPE of a target HF config.

        ``rope_theta`` overrides the target's RoPE base (EAGLE-1's code hard-codes 10000); a
        target with a RoPE per layer type (Gemma-3: local and global) gives its global one.
        ``embed_scale``: the target's embedding scale (:func:`~workloads.models.target.
        embedding_scale`), which the draft applies to its embedding input as the target does.
        """
        get = config.__getattribute__
        rope = getattr(config, "rope_parameters", None) or {}
        rope = rope.get("full_attention", rope)  # per layer type: the global layers' RoPE
        heads = int(get("num_attention_heads"))
        return cls(
            hidden_size=int(get("hidden_size")),
            layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=int(getattr(config, "num_key_value_heads", heads)),
            head_dim=int(getattr(config, "head_dim", None) or get("hidden_size") // heads),
            intermediate_size=int(get("intermediate_size")),
            rms_norm_eps=float(get("rms_norm_eps")),
            rope_theta=float(
                rope_theta
                if rope_theta is not None
                else rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
            ),
            max_position_embeddings=int(get("max_position_embeddings")),
            output_norm=output_norm,
            first_input_norm=first_input_norm,
            fusion_layers=tuple(fusion_layers),
            embed_scale=float(embed_scale),
        )

    def llama_config(self) -> LlamaConfig:
        """The LlamaConfig of the decoder stack (sdpa attention)."""
        cfg = LlamaConfig(
            hidden_size=self.hidden_size,
            num_hidden_layers=self.layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            rms_norm_eps=self.rms_norm_eps,
            max_position_embeddings=self.max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            vocab_size=1,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
        cfg._attn_implementation = "sdpa"
        return cfg


class Draft(Protocol):
    """What the engine needs from a draft: :class:`DraftModel`, the engine's
    :class:`~workloads.engine.oracle_draft.OracleDraft`, the tests' stubs.

    Calling it predicts the next target hidden states (:meth:`DraftModel.forward` states the
    shapes); its layers take the engine's :class:`~workloads.models.kv_cache.RaggedStaticCache`
    (they call its ``update`` only) or a ``DynamicCache`` as ``cache``, and an additive mask
    [B, 1, T, S]. Optional: ``top_candidates(hidden, k)`` (the k best children without a
    full-vocabulary pass, see :meth:`workloads.engine.steps.Steps.top_candidates`) and
    ``capturable = False`` (a step not worth compiling or capturing: the oracle's table lookup).
    """

    draft_to_target: torch.Tensor
    """[N] target id of each draft id"""

    def __call__(
        self,
        hidden: torch.Tensor,
        next_ids: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        cache: RaggedStaticCache | DynamicCache | None = None,
    ) -> torch.Tensor: ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


class DraftModel(nn.Module):
    """EAGLE/Scylla draft: [fuse(n*h->h)] -> FC(2h->h) -> D decoder layers -> RMSNorm -> frozen
    (truncated) LM head.

    With ``arch.first_input_norm`` False, layer 0 has no input RMSNorm (EAGLE-1/2's ``cnets``).

    Args:
        arch: the architecture.
        embed_weight: [V, h] the target's token embedding (frozen, not saved with the draft).
        lm_head_weight: [V, h] the target's LM head (frozen, not saved with the draft).
        draft_to_target: [N] target ids of the draft vocabulary, or None for the full vocabulary.
        compute_dtype: dtype of the frozen embedding and LM head (see the module docstring):
            ``torch.float32`` (default) or ``torch.bfloat16`` / ``torch.float16`` for training in
            autocast of that dtype; changed later with :meth:`set_compute_dtype`.
    """

    FROZEN_WEIGHTS = ("embed_weight", "lm_head_weight")
    """buffers holding the target's frozen weights, kept in the compute dtype"""

    draft_to_target: torch.Tensor
    embed_weight: torch.Tensor
    lm_head_weight: torch.Tensor

    def __init__(
        self,
        arch: DraftArch,
        *,
        embed_weight: torch.Tensor,
        lm_head_weight: torch.Tensor,
        draft_to_target: torch.Tensor | None = None,
        compute_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.arch = arch
        config = arch.llama_config()
        self.config = config
        h = arch.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=True)
        n_fused = len(arch.fusion_layers)
        self.fuse = nn.Linear(n_fused * h, h, bias=False) if n_fused else None
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(arch.layers))
        if not arch.first_input_norm:  # EAGLE-1/2: the FC output enters layer 0 unnormalised
            self.layers[0].input_layernorm = nn.Identity()
        self.norm: nn.Module = (
            LlamaRMSNorm(h, eps=arch.rms_norm_eps) if arch.output_norm else nn.Identity()
        )
        self.rotary = LlamaRotaryEmbedding(config)
        vocab = (
            torch.arange(lm_head_weight.shape[0]) if draft_to_target is None else draft_to_target
        )
        self.register_buffer("draft_to_target", vocab.long().clone(), persistent=False)
        self.register_buffer(
            "embed_weight", embed_weight.detach().to(compute_dtype), persistent=False
        )
        head = lm_head_weight.detach()[vocab.to(lm_head_weight.device)]
        self.register_buffer("lm_head_weight", head.to(compute_dtype), persistent=False)
        # the float32 buffers that :meth:`cast_to` keeps float32 (RoPE's inv_freq and its copy)
        self.fp32_buffers: tuple[str, ...] = tuple(
            name
            for name, buf in self.named_buffers()
            if buf.dtype == torch.float32 and name not in self.FROZEN_WEIGHTS
        )

    @property
    def compute_dtype(self) -> torch.dtype:
        """dtype of the frozen embedding and LM head."""
        return self.embed_weight.dtype

    def set_compute_dtype(self, dtype: torch.dtype) -> DraftModel:
        """Keep the frozen embedding and LM head in ``dtype`` (the trainable weights keep theirs).

        Returns:
            ``self``, as ``nn.Module.to`` does.
        """
        self.embed_weight = self.embed_weight.to(dtype)
        self.lm_head_weight = self.lm_head_weight.to(dtype)
        return self

    def cast_to(
        self, dtype: torch.dtype, *, device: torch.device | str | None = None
    ) -> DraftModel:
        """Run in ``dtype`` (e.g. a bfloat16 target's), on ``device`` if given: the parameters and
        the frozen embedding and LM head are cast, the buffers in :attr:`fp32_buffers` stay
        float32.

        Use it, never ``.to(dtype=...)``: that casts every float buffer too, and a bfloat16 RoPE
        ``inv_freq`` rounds the rotation angles (position * inv_freq) by up to 0.4 % of
        themselves, i.e. radians at positions in the thousands (transformers'
        ``LlamaRotaryEmbedding`` computes cos/sin in float32 from whatever ``inv_freq`` holds).

        Returns:
            ``self``, as ``nn.Module.to`` does.
        """
        keep = {name: self.get_buffer(name) for name in self.fp32_buffers}
        self.to(device=device, dtype=dtype)
        for name, buf in keep.items():
            owner, _, attr = name.rpartition(".")
            setattr(self.get_submodule(owner), attr, buf.to(self.get_buffer(name).device))
        return self

    @property
    def vocab_size(self) -> int:
        """N, size of the draft vocabulary."""
        return int(self.draft_to_target.shape[0])

    def new_cache(self) -> DynamicCache:
        """An empty KV cache for incremental decoding."""
        return DynamicCache(config=self.config)

    def forward(
        self,
        hidden: torch.Tensor,
        next_ids: torch.Tensor,
        position_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        cache: RaggedStaticCache | DynamicCache | None = None,
    ) -> torch.Tensor:
        """Predict the next target hidden states (the :class:`Draft` call).

        Args:
            hidden: [B, T, F] target features (:attr:`DraftArch.feature_width`; fused first
                when the draft has fusion) or [B, T, h] the draft's own outputs (inside a tree,
                in training-time test), any float dtype and device (cast to the FC's; a spread
                target ends on another GPU).
            next_ids: [B, T] target token ids x_{t+1} (moved to the draft's device, as are the
                positions and the mask).
            position_ids: [B, T] positions t.
            attention_mask: None (causal) or [B, 1, T, S] additive float mask, any float dtype
                (cast to the layers' compute dtype, its minimum clamped to that dtype's range).
            cache: KV cache, extended in place.

        Returns:
            [B, T, h] predicted hidden states (after the output norm), in the FC weight's dtype
            or, under autocast, the autocast dtype.
        """
        dev, dt = self.fc.weight.device, self.fc.weight.dtype
        emb = nn.functional.embedding(next_ids.to(dev), self.embed_weight)
        if self.arch.embed_scale != 1.0:  # rounded to the weight's dtype, as the target's is;
            # a 0-dim tensor, not float(tensor): no host read, no graph break in a compiled step
            emb = emb * torch.tensor(self.arch.embed_scale, dtype=emb.dtype)
        hidden = hidden.to(dev, dt)
        if self.fuse is not None and hidden.shape[-1] == self.arch.feature_width:
            hidden = self.fuse(hidden[..., : -self.arch.hidden_size])
        x = self.fc(torch.cat([emb.to(dt), hidden], -1))
        position_ids = position_ids.to(dev)
        if attention_mask is not None:
            floor = torch.finfo(x.dtype).min  # float32's minimum would round to -inf in bf16
            if torch.finfo(attention_mask.dtype).min < floor:
                attention_mask = attention_mask.clamp(min=floor)
            attention_mask = attention_mask.to(dev, x.dtype)
        pos_emb = self.rotary(x, position_ids)
        for layer in self.layers:
            x = layer(
                x,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=cache is not None,
                **{CACHE_KW: cache},
                position_embeddings=pos_emb,
            )
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., h] -> [..., N] draft logits over the draft vocabulary, in the compute dtype
        (``hidden`` is cast to it; under autocast the autocast dtype)."""
        head = self.lm_head_weight
        return hidden.to(head.device, head.dtype) @ head.T

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The weights that training changes (fc, layers, norm), as a flat state dict."""
        return {
            k: v.detach().contiguous()
            for k, v in self.state_dict().items()
            if not k.startswith("rotary.")
        }

    def save(self, path: Path) -> None:
        """Write ``draft.safetensors`` (trainable weights + vocabulary map) and ``arch.json``."""
        path.mkdir(parents=True, exist_ok=True)
        tensors = dict(self.trainable_state())
        tensors["draft_to_target"] = self.draft_to_target.clone()
        save_file(tensors, str(path / "draft.safetensors"))
        (path / "arch.json").write_text(json.dumps(asdict(self.arch), indent=2))

    @classmethod
    def load(
        cls,
        path: Path,
        *,
        embed_weight: torch.Tensor,
        lm_head_weight: torch.Tensor,
        compute_dtype: torch.dtype = torch.float32,
    ) -> DraftModel:
        """Inverse of :meth:`save`; the frozen embedding and LM head come from the target (kept
        in ``compute_dtype``, see :class:`DraftModel`)."""
        arch = DraftArch.from_fields(json.loads((path / "arch.json").read_text()))
        tensors = load_file(str(path / "draft.safetensors"))
        vocab = tensors.pop("draft_to_target")
        model = cls(
            arch,
            embed_weight=embed_weight,
            lm_head_weight=lm_head_weight,
            draft_to_target=vocab,
            compute_dtype=compute_dtype,
        )
        model.load_state_dict(tensors, strict=False)
        return model

    def num_parameters(self) -> int:
        """Trainable parameter count (excludes the frozen embedding and LM head)."""
        return sum(p.numel() for p in self.parameters())
