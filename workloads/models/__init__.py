"""The target and the draft: loading, the static KV cache they attend with, and export.

``target`` (the target model, its devices and tokenizer), ``target_source`` (where a target comes
from: the packaged GGUF, a local folder, a hub id the user names), ``draft`` (the EAGLE-style
draft model), ``kv_cache`` (the ragged static KV cache and masks) and ``export`` (a trained draft
written for EAGLE, SpecForge, vLLM and SGLang).

May import: ``workloads.config``, ``workloads.result``, ``workloads.roofline``. Nothing is
imported here, so the torch modules load without pydantic.
"""
