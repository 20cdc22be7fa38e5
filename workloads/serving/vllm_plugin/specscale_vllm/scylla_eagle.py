"""This project's draft as a vLLM EAGLE drafter (vLLM 0.32, ``method: eagle``, and with hidden
fusion ``method: eagle3``).

The draft (``workloads/models/draft.py``): ``x = fc([embed(x_{t+1}); h_t]) (+ bias)``, D LLaMA
decoder layers (layer 0's input RMSNorm optional), an optional final RMSNorm, then logits over
N draft tokens mapped to target ids. vLLM's stock ``EagleLlamaForCausalLM``
(``model_executor/models/llama_eagle.py``) has no fc bias, no layer-0 norm, no final norm and the
target's full LM head; this class adds each as a ``config.json`` switch and takes the truncated
LM head and the ``d2t`` map (target id - draft id, EAGLE-3's convention) as
``Eagle3LlamaForCausalLM`` does (``llama_eagle3.py``). The hidden state fed to the next draft
step is the one the logits come from (after the final norm), as in this project's decoder.

config.json switches: ``fc_bias``, ``first_input_norm``, ``output_norm`` (bool),
``draft_vocab_size`` (N; equal to ``vocab_size`` for the full vocabulary, when the target's LM
head is shared and no ``lm_head``/``d2t`` is stored) and ``embed_scale`` (the factor on the
embedding rows, the target's convention: sqrt(h) for Gemma, whose vLLM class scales in its
model's forward, not in the embedding module vLLM may share with the draft; default 1).

A draft with EAGLE-3's hidden fusion is :class:`Eagle3ScyllaLlamaForCausalLM`, a subclass of
vLLM's ``Eagle3LlamaForCausalLM`` (the eagle3 proposer accepts only its subclasses): vLLM
gathers the target's hidden states entering the layers ``eagle_aux_hidden_state_layer_ids``
(config.json), concatenated, and :meth:`~Eagle3ScyllaLlamaForCausalLM.combine_hidden_states`
fuses them with the draft's ``fuse`` weight (n*h -> h, no bias) before the fc, as this
project's draft does; deeper draft steps are fed the draft's own output, as with ``eagle``.
"""

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn as nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.models.llama_eagle import EagleLlamaForCausalLM, LlamaDecoderLayer
from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
from vllm.model_executor.models.utils import (
    AutoWeightsLoader,
    WeightsMapper,
    get_draft_quant_config,
    maybe_prefix,
    process_eagle_weight,
)


@support_torch_compile
class ScyllaLlamaModel(nn.Module):
    """[fuse (n*h -> h)] fc (2h -> h, optional bias) -> D decoder layers -> optional RMSNorm;
    ``fuse`` only with ``num_aux_hidden_states`` n in the config (applied by the drafter's
    ``combine_hidden_states``)."""

    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_stacked={
            ".q_proj": (".qkv_proj", "q"),
            ".k_proj": (".qkv_proj", "k"),
            ".v_proj": (".qkv_proj", "v"),
            ".gate_proj": (".gate_up_proj", 0),
            ".up_proj": (".gate_up_proj", 1),
        }
    )

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "", start_layer_id: int = 0):
        super().__init__()
        spec = vllm_config.speculative_config
        assert spec is not None
        cfg = spec.draft_model_config.hf_config
        self.config = cfg
        h = cfg.hidden_size
        self.embed_tokens = VocabParallelEmbedding(
            cfg.vocab_size, h, prefix=maybe_prefix(prefix, "embed_tokens")
        )
        no_first_norm = not getattr(cfg, "first_input_norm", False)
        self.layers = nn.ModuleList(
            [
                LlamaDecoderLayer(
                    vllm_config,
                    i == 0 and no_first_norm,
                    prefix=maybe_prefix(prefix, f"layers.{i + start_layer_id}"),
                    config=cfg,
                )
                for i in range(cfg.num_hidden_layers)
            ]
        )
        self.fc = ReplicatedLinear(
            input_size=2 * h,
            output_size=h,
            bias=bool(getattr(cfg, "fc_bias", False)),
            params_dtype=vllm_config.model_config.dtype,
            quant_config=get_draft_quant_config(vllm_config),
            prefix=maybe_prefix(prefix, "fc"),
            return_bias=False,
        )
        n_aux = int(getattr(cfg, "num_aux_hidden_states", 0) or 0)
        self.fuse = (
            ReplicatedLinear(
                input_size=n_aux * h,
                output_size=h,
                bias=False,
                params_dtype=vllm_config.model_config.dtype,
                quant_config=get_draft_quant_config(vllm_config),
                prefix=maybe_prefix(prefix, "fuse"),
                return_bias=False,
            )
            if n_aux
            else None
        )
        scale = float(getattr(cfg, "embed_scale", 1.0) or 1.0)  # rounded to the rows' dtype
        self.embed_scale = float(torch.tensor(scale, dtype=vllm_config.model_config.dtype))
        self.output_norm = bool(getattr(cfg, "output_norm", False))
        self.norm = RMSNorm(h, eps=cfg.rms_norm_eps) if self.output_norm else nn.Identity()

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        emb = self.embed_tokens(input_ids)
        if self.embed_scale != 1.0:
            emb = emb * self.embed_scale
        return emb

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.fc(torch.cat((self.embed_input_ids(input_ids), hidden_states), dim=-1))
        residual = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual)
        if self.output_norm:
            x, _ = self.norm(x, residual)
        else:
            x = x + residual
        return x, x

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return AutoWeightsLoader(self).load_weights(weights, mapper=self.hf_to_vllm_mapper)


class _ScyllaDrafter(nn.Module):
    """What both drafters share: the model, the (truncated) LM head and the weight loading."""

    config: Any

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        nn.Module.__init__(self)
        spec = vllm_config.speculative_config
        assert spec is not None
        self.config = cfg = spec.draft_model_config.hf_config
        if getattr(cfg, "draft_vocab_size", None) is None:
            cfg.draft_vocab_size = cfg.vocab_size
        self.model = ScyllaLlamaModel(
            vllm_config=vllm_config,
            prefix=maybe_prefix(prefix, "model"),
            start_layer_id=vllm_config.model_config.get_num_layers(vllm_config.parallel_config),
        )
        n, scale = cfg.draft_vocab_size, getattr(cfg, "logit_scale", 1.0)
        self.truncated = n != vllm_config.model_config.get_vocab_size()
        if self.truncated:
            self.lm_head = ParallelLMHead(
                n,
                cfg.hidden_size,
                quant_config=get_draft_quant_config(vllm_config),
                prefix=maybe_prefix(prefix, "lm_head"),
            )
            self.draft_id_to_target_id = nn.Parameter(
                torch.zeros(n, dtype=torch.long), requires_grad=False
            )
        self.logits_processor = LogitsProcessor(n, scale=scale)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        logits = self.logits_processor(self.lm_head, hidden_states)
        if not self.truncated or logits is None:
            return logits
        n = self.config.draft_vocab_size
        targets = torch.arange(n, device=logits.device) + self.draft_id_to_target_id
        full = logits.new_full((logits.shape[0], self.config.vocab_size), float("-inf"))
        full[:, targets] = logits
        return full

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        def rename(item: tuple[str, torch.Tensor]) -> tuple[str, torch.Tensor]:
            name, tensor = item
            if name == "d2t":
                return "draft_id_to_target_id", tensor
            if "lm_head" not in name:
                name = "model." + name
            process_eagle_weight(self, name)
            return name, tensor

        AutoWeightsLoader(self).load_weights(map(rename, weights))


class EagleScyllaLlamaForCausalLM(_ScyllaDrafter, EagleLlamaForCausalLM):
    """The drafter vLLM builds for a ``--format vllm`` export of a Scylla draft."""


class Eagle3ScyllaLlamaForCausalLM(_ScyllaDrafter, Eagle3LlamaForCausalLM):
    """The drafter of a draft with hidden fusion (``method: eagle3``)."""

    use_parallel_drafting = False

    def combine_hidden_states(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[T, n*h] the target's states at the aux layers -> [T, h] the fused input."""
        assert self.model.fuse is not None, "an eagle3 export has num_aux_hidden_states"
        return self.model.fuse(hidden_states)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        inputs_embeds: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if inputs_embeds is not None:
            raise NotImplementedError(f"{type(self).__name__} takes no multimodal inputs")
        return self.model(input_ids, positions, hidden_states)
