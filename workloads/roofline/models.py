"""Transformer shapes the roofline counts need (Scylla arXiv 2505.07858, Appendix C).

A :class:`ModelShape` holds only sizes; bytes per element belong to the hardware profile (the
dtype), not to the model. Built-in shapes are copied from the official Hugging Face
``config.json`` files named next to each one; any other LLaMA-style model loads from its own
``config.json`` with :func:`load_model_shape`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """Sizes of a decoder-only transformer (LLaMA / Qwen2 layout: GQA attention, gated MLP)."""

    name: str
    """model name, e.g. "qwen2.5-72b" """
    hidden: int
    """h: hidden size (elements per token)"""
    layers: int
    """l: decoder layers"""
    heads: int
    """attention (query) heads"""
    kv_heads: int
    """key/value heads (GQA groups; = heads without GQA)"""
    head_dim: int
    """elements per attention head"""
    mlp_inner: int
    """h_m: MLP inner (intermediate) size"""
    vocab: int
    """V: vocabulary size (rows of the LM head)"""

    @property
    def h(self) -> int:
        """Hidden size h (alias of ``hidden``, the paper's symbol)."""
        return self.hidden

    @property
    def h_kv(self) -> int:
        """h_kv = kv_heads * head_dim: elements of K (or V) per token per layer."""
        return self.kv_heads * self.head_dim

    @property
    def h_m(self) -> int:
        """MLP inner size h_m (alias of ``mlp_inner``)."""
        return self.mlp_inner


def _shape(
    name: str, h: int, l: int, heads: int, kv: int, h_m: int, v: int, head_dim: int = 0  # noqa: E741
) -> ModelShape:
    return ModelShape(
        name=name,
        hidden=h,
        layers=l,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim or h // heads,
        mlp_inner=h_m,
        vocab=v,
    )


BUILTIN_SHAPES: dict[str, ModelShape] = {
    # https://huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json (hidden_size 8192,
    # num_hidden_layers 80, num_attention_heads 64, num_key_value_heads 8,
    # intermediate_size 29568, vocab_size 152064); the paper's roofline target.
    "qwen2.5-72b": _shape("qwen2.5-72b", 8192, 80, 64, 8, 29568, 152064),
    # https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json (hidden_size 3584,
    # num_hidden_layers 28, num_attention_heads 28, num_key_value_heads 4,
    # intermediate_size 18944, vocab_size 152064)
    "qwen2.5-7b": _shape("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064),
    # https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json
    "llama-3-8b": _shape("llama-3-8b", 4096, 32, 32, 8, 14336, 128256),
    # https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json
    "llama-3-70b": _shape("llama-3-70b", 8192, 80, 64, 8, 28672, 128256),
    # https://huggingface.co/lmsys/vicuna-7b-v1.3/blob/main/config.json (no GQA: kv heads = heads)
    "vicuna-7b": _shape("vicuna-7b", 4096, 32, 32, 32, 11008, 32000),
    # https://huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json (head_dim 64)
    "smollm2-135m": _shape("smollm2-135m", 576, 30, 9, 3, 1536, 49152),
    # https://huggingface.co/google/gemma-3-270m/blob/main/config.json (head_dim 256, 15 of its
    # 18 layers attend over a 512-token sliding window, which these counts do not model)
    "gemma-3-270m": _shape("gemma-3-270m", 640, 18, 4, 1, 2048, 262144, head_dim=256),
}
"""Shapes of the built-in models, by canonical lower-case name."""

_ALIASES: dict[str, str] = {
    "qwen2.5-72b-instruct": "qwen2.5-72b",
    "qwen-2.5-72b": "qwen2.5-72b",
    "qwen2.5-7b-instruct": "qwen2.5-7b",
    "qwen-2.5-7b": "qwen2.5-7b",
    "llama3-8b": "llama-3-8b",
    "llama-3-8b-instruct": "llama-3-8b",
    "llama3-8b-instruct": "llama-3-8b",
    "meta-llama-3-8b": "llama-3-8b",
    "meta-llama-3-8b-instruct": "llama-3-8b",
    "llama3-70b": "llama-3-70b",
    "llama-3-70b-instruct": "llama-3-70b",
    "llama3-70b-instruct": "llama-3-70b",
    "meta-llama-3-70b": "llama-3-70b",
    "meta-llama-3-70b-instruct": "llama-3-70b",
    "vicuna-7b-v1.3": "vicuna-7b",
    "vicuna-7b-v1.5": "vicuna-7b",
    "smollm2-135m-instruct": "smollm2-135m",
    "smollm2": "smollm2-135m",
    "gemma3-270m": "gemma-3-270m",
    "gemma-3-270m-it": "gemma-3-270m",
}


def builtin_names() -> list[str]:
    """Canonical names of the built-in shapes, sorted."""
    return sorted(BUILTIN_SHAPES)


def canonical_name(name: str) -> str | None:
    """The built-in shape a name means (case-insensitive, ``org/`` prefix and ``_`` ignored,
    aliases such as ``"Meta-Llama-3-8B-Instruct"`` resolved), or None when it names none."""
    key = _normalise(name)
    key = _ALIASES.get(key, key)
    return key if key in BUILTIN_SHAPES else None


def load_model_shape(name_or_path: str | Path) -> ModelShape:
    """A built-in shape by name, or the shape read from a Hugging Face ``config.json``.

    ``name_or_path`` is a built-in name (case-insensitive; a hub-style ``org/`` prefix, ``_`` for
    ``-`` and aliases such as ``"Qwen2.5-72B"`` or ``"meta-llama/Meta-Llama-3-8B-Instruct"`` are
    accepted), a path to a ``config.json``, or a folder holding one. The config needs the
    LLaMA-style keys ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``intermediate_size`` and ``vocab_size``; ``num_key_value_heads`` defaults to the head count
    and ``head_dim`` to hidden / heads; a multimodal config's ``text_config`` is used when the top
    level has no ``hidden_size``.

    Raises ``ValueError`` for an unknown name (listing the built-ins), a missing file, invalid
    JSON or a missing key (naming the file and key).
    """
    path = Path(name_or_path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"{path} is a folder without a config.json. Fix: pass the folder of a Hugging Face "
                "model (it holds config.json) or the config.json itself"
            )
        path = path / "config.json"
    if path.is_file():
        return _from_config(path)
    text = str(name_or_path)
    if text.endswith(".json") or text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise ValueError(
            f"model config {text!r} does not exist. Fix: pass a config.json, a folder "
            f"holding one, or a built-in name ({', '.join(builtin_names())})"
        )
    key = canonical_name(text)
    if key is None:
        raise ValueError(
            f"unknown model {text!r}. Fix: use a built-in name ({', '.join(builtin_names())}) "
            "or a path to a Hugging Face config.json"
        )
    return BUILTIN_SHAPES[key]


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-").rsplit("/", 1)[-1]


def _from_config(path: Path) -> ModelShape:
    try:
        cfg: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(
            f"{path}: cannot read the model config ({e}). Fix: pass a Hugging Face config.json "
            "(a JSON object with hidden_size, num_hidden_layers, ...)"
        ) from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: a model config must be a JSON object")
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    name = cfg.get("_name_or_path") or path.parent.name or path.stem
    return shape_from_dict(cfg, name=str(name), where=str(path))


SHAPE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
)
"""the config fields a :class:`ModelShape` is read from"""


def shape_from_dict(cfg: Mapping[str, Any], *, name: str, where: str, fix: str = "") -> ModelShape:
    """A LLaMA-style config's fields (:data:`SHAPE_KEYS`) -> :class:`ModelShape`.

    num_key_value_heads defaults to the head count and head_dim to hidden / heads.

    Raises:
        ValueError: a missing or non-positive field, naming ``where`` (and ``fix``).
    """

    def need(key: str) -> int:
        if cfg.get(key) is None:
            raise ValueError(
                f"{where}: key {key!r} is missing; a LLaMA-style config needs hidden_size, "
                f"num_hidden_layers, num_attention_heads, intermediate_size, vocab_size{fix}"
            )
        value = cfg[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{where}: {key} = {value!r} must be a positive integer{fix}")
        return value

    h = need("hidden_size")
    heads = need("num_attention_heads")
    kv = need("num_key_value_heads") if cfg.get("num_key_value_heads") is not None else heads
    head_dim = need("head_dim") if cfg.get("head_dim") is not None else h // heads
    return ModelShape(
        name=name,
        hidden=h,
        layers=need("num_hidden_layers"),
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        mlp_inner=need("intermediate_size"),
        vocab=need("vocab_size"),
    )
