"""What each serving engine's stock EAGLE-1/2 draft loader builds, as data read from its source
files: the facts :mod:`workloads.models.export` writes a draft's layout by and refuses a draft
that no loader of the format can hold with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class EngineRules:
    """What one engine's EAGLE-1/2 draft loader builds, read from its source (``source``)."""

    name: str
    """engine and draft class, as named in refusals"""
    source: str
    """files the rules were read from"""
    architectures: tuple[str, ...]
    """``architectures`` written to config.json"""
    fc_bias: bool
    """the engine's fc (2h -> h) has a bias"""
    first_input_norm: bool
    """the engine's decoder layer 0 has an input RMSNorm"""
    final_norm: bool
    """the engine applies an RMSNorm between the last layer and the LM head"""
    rope_theta: float | None
    """RoPE base hard-coded by the engine; None = read from config.json"""
    head_dim_from_config: bool
    """the engine reads ``head_dim`` from config.json (else hidden / heads)"""
    token_map: bool
    """the engine can use a truncated draft vocabulary (a hot-token map)"""
    weight_files: tuple[str, ...]
    """weight files written (same tensors)"""
    usage: str
    """how to load the export; ``{out}`` is the folder, ``{token_map}`` the map flag if any"""
    bias_key: bool = False
    """config.json's ``bias`` switches the fc bias (eagle-llm); SGLang's and vLLM's llama.py read
    ``bias`` as the attention bias (``attention_bias or bias``), so it is left out for them"""


ENGINES: dict[str, EngineRules] = {
    "eagle": EngineRules(
        name="eagle-llm 1.2.1 cnets.Model, EAGLE-1/2",
        source="eagle/model/cnets.py, configs.py (EConfig), ea_model.py of PyPI eagle-llm 1.2.1",
        # ea_model.py: bias = config.json "bias" (default True); load_state_dict(strict=True)
        architectures=("LlamaForCausalLM",),
        fc_bias=True,
        first_input_norm=False,  # LlamaDecoderLayer: input_layernorm only if index != 0
        final_norm=False,  # Model.forward returns the last layer's output
        rope_theta=10000.0,  # LlamaRotaryEmbedding(head_dim, max_pos) with base=10000 default
        head_dim_from_config=False,  # LlamaAttention: head_dim = hidden_size // num_heads
        token_map=False,  # embed_tokens [V, h]; ea_model uses the target's full lm_head
        weight_files=("model.safetensors", "pytorch_model.bin"),
        bias_key=True,
        usage="EaModel.from_pretrained(base_model_path=<target>, ea_model_path='{out}') "
        "(reads pytorch_model.bin), or cnets.Model(EConfig.from_pretrained('{out}')) and "
        "load_state_dict (under transformers 5 set the config's rope_scaling to None first)",
    ),
    "sglang": EngineRules(
        name="SGLang LlamaForCausalLMEagle, EAGLE-1/2",
        source="sglang python/sglang/srt/models/llama_eagle.py; models/llama.py (rope_theta, "
        "head_dim, attention bias = attention_bias or bias, from config.json); "
        "speculative/eagle_worker.py (embedding and lm_head shared from the target, lm_head "
        "rows = --speculative-token-map); speculative/spec_utils.py load_token_map (torch.load)",
        architectures=("LlamaForCausalLMEagle",),
        fc_bias=True,  # torch.nn.Linear(2h, h): bias by default
        first_input_norm=False,  # layer_id == 0: input_layernorm replaced by identity
        final_norm=False,  # LlamaModel.forward returns hidden_states + residual
        rope_theta=None,  # sglang.srt.models.llama LlamaDecoderLayer reads config.rope_theta
        head_dim_from_config=True,
        token_map=True,
        weight_files=("model.safetensors",),
        usage="python -m sglang.launch_server --model-path <target> --speculative-algorithm "
        "EAGLE --speculative-draft-model-path {out}{token_map} (unchecked: no SGLang server "
        "runs on this project's CPU machines, docs/serving.md)",
    ),
    "vllm": EngineRules(
        name="vLLM EagleLlamaForCausalLM, EAGLE-1",
        source="vllm vllm/model_executor/models/llama_eagle.py; "
        "transformers_utils/configs/eagle.py (LlamaForCausalLM -> EagleLlamaForCausalLM); "
        "models/llama.py reads config.json's bias as attention bias (vLLM PR #9580)",
        architectures=("LlamaForCausalLM",),  # EAGLEConfig prefixes "Eagle" for method eagle
        fc_bias=False,  # torch.nn.Linear(2h, h, bias=False)
        first_input_norm=False,  # LlamaDecoderLayer(config, i == 0): input_layernorm Identity
        final_norm=False,  # LlamaModel.forward returns hidden_states + residual
        rope_theta=None,  # vllm.model_executor.models.llama reads the RoPE base from config
        head_dim_from_config=True,
        token_map=False,  # LogitsProcessor(config.vocab_size); lm_head shared from the target
        weight_files=("model.safetensors",),
        usage="vllm serve <target> --speculative-config "
        '\'{{"method": "eagle", "model": "{out}", "num_speculative_tokens": 3}}\'',
    ),
}
"""Per engine: what its EAGLE-1/2 loader builds (facts read from the cited source files)."""
