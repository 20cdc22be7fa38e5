"""Export a trained draft for a serving engine: a draft folder in, config.json + weights out.

A draft folder is what ``draft_train`` saves (``draft.safetensors`` + ``arch.json``, see
:meth:`workloads.models.draft.DraftModel.save`). Formats:

- ``eagle``: what ``eagle.model.cnets.Model`` of the PyPI package ``eagle-llm`` 1.2.1 (EAGLE-1/2)
  loads with ``load_state_dict(strict=True)`` (``eagle/model/ea_model.py`` reads
  ``pytorch_model.bin``; ``model.safetensors`` holds the same tensors).
- ``sglang``: SGLang's EAGLE-1/2 draft class ``LlamaForCausalLMEagle``
  (``python/sglang/srt/models/llama_eagle.py``), run with ``--speculative-algorithm EAGLE``.
- ``vllm``: vLLM 0.32's ``"method": "eagle"``. A draft stock EAGLE-1 holds (no fc bias, no
  layer-0 or final norm, the full vocabulary) is written for ``EagleLlamaForCausalLM``
  (``vllm/model_executor/models/llama_eagle.py``) and loads in any vLLM; any other draft
  (the default Scylla draft: fc bias, both norms, a truncated vocabulary) is written for
  ``EagleScyllaLlamaForCausalLM``, registered by this project's vLLM plugin
  (``workloads/serving/vllm_plugin``, installed by ``make serve-env``), with the truncated LM
  head and EAGLE-3's ``d2t`` map (docs/serving.md says why). A draft with EAGLE-3's hidden
  fusion is written for the plugin's ``Eagle3ScyllaLlamaForCausalLM`` (``"method": "eagle3"``,
  the fused layers in ``eagle_aux_hidden_state_layer_ids``, the fusion weight ``fuse.weight``).
- ``hf``: a self-describing folder (config.json + model.safetensors, our key names, the final
  norm and the vocabulary map) that :func:`load_hf` turns back into a :class:`DraftModel`.

The engine layouts share the EAGLE-1 key names (``embed_tokens``, ``fc``, ``layers.N``, no
``lm_head`` for the full vocabulary); what each stock loader builds is data
(:data:`workloads.models.engine_rules.ENGINES`), and a draft that no loader of the format can
hold is refused with :class:`ExportError` before anything is written.

Shape legend: h hidden size, V target vocabulary, N draft vocabulary.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from workloads.models.draft import DraftArch, DraftModel
from workloads.models.engine_rules import ENGINES

FORMATS = ("eagle", "sglang", "vllm", "hf")
"""Values of ``--format``."""

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""Element types the weights can be written in (the vocabulary map stays int64)."""

HF_ARCHITECTURE = "SpecscaleDraftModel"
"""``architectures[0]`` of an ``hf`` export; :func:`load_hf` checks it."""

VLLM_PLUGIN_ARCHITECTURE = "EagleScyllaLlamaForCausalLM"
"""``architectures[0]`` of a ``vllm`` export that needs the plugin (``specscale_vllm``)"""

VLLM_FUSED_ARCHITECTURE = "Eagle3ScyllaLlamaForCausalLM"
"""``architectures[0]`` of a ``vllm`` export of a draft with hidden fusion (the plugin's)"""

TOKEN_MAP_FILE = "speculative_token_map.pt"
"""SGLang's hot-token list for a truncated vocabulary (``--speculative-token-map``)."""


class ExportError(ValueError):
    """A draft the chosen format cannot hold as is; the message is one line with the fix."""


@dataclass(frozen=True)
class DraftWeights:
    """A draft folder read back: its architecture, trainable tensors and vocabulary map.

    Attributes:
        arch: the architecture (``arch.json``).
        tensors: our state-dict keys (``fc.*``, ``layers.N.*``, ``norm.weight``) -> tensors.
        draft_to_target: [N] target ids of the draft vocabulary (int64).
    """

    arch: DraftArch
    tensors: dict[str, torch.Tensor]
    draft_to_target: torch.Tensor

    @property
    def full_vocab(self) -> bool:
        """True when the draft vocabulary is ids 0..N-1 in order (full unless N < V)."""
        n = self.draft_to_target.shape[0]
        return bool(torch.equal(self.draft_to_target, torch.arange(n)))


def read_draft(folder: Path) -> DraftWeights:
    """Read a draft folder saved by :meth:`DraftModel.save`.

    Raises:
        ValueError: ``folder`` has no ``arch.json`` or ``draft.safetensors``.
    """
    if not (folder / "arch.json").exists() or not (folder / "draft.safetensors").exists():
        raise ValueError(
            f"{folder} is not a draft folder (needs arch.json and draft.safetensors). Fix: give "
            "the 'draft' folder of a draft_train trial (<run root>/<sweep>/trials/<key>/draft)"
        )
    arch = DraftArch.from_fields(json.loads((folder / "arch.json").read_text()))
    tensors = load_file(str(folder / "draft.safetensors"))
    vocab = tensors.pop("draft_to_target").long()
    return DraftWeights(arch=arch, tensors=tensors, draft_to_target=vocab)


def problems(draft: DraftWeights, fmt: str, *, target_vocab: int | None = None) -> list[str]:
    """Why ``fmt`` cannot load ``draft`` as is: one clause per problem, each with its fix.

    ``target_vocab`` (V) is checked when given: a full-vocabulary engine needs N == V.
    Empty for ``hf`` (it holds every variant).

    Raises:
        ValueError: unknown ``fmt``.
    """
    if fmt in ("hf", "vllm"):  # vllm: the plugin's class holds what stock EAGLE-1 cannot
        return []
    return stock_problems(draft, fmt, target_vocab=target_vocab)


def stock_problems(draft: DraftWeights, fmt: str, *, target_vocab: int | None = None) -> list[str]:
    """Why the stock EAGLE-1/2 loader of engine ``fmt`` (:data:`ENGINES`) cannot load ``draft``.

    Raises:
        ValueError: ``fmt`` has no stock loader.
    """
    if fmt not in ENGINES:
        raise ValueError(f"--format {fmt!r} is not one of {list(FORMATS)}")
    rules, arch, out = ENGINES[fmt], draft.arch, []
    src = "the engine"  # check() names it once
    if arch.fusion_layers:
        out.append(
            f"{src} reads the target's last layer only, but this draft fuses the states of "
            f"target layers {list(arch.fusion_layers)} (draft.fusion: eagle3), and the "
            "engine's EAGLE-3 class feeds [embedding; state] into layer 0's attention where this "
            "draft has an fc, so neither holds it. Fix: use --format vllm (the plugin's eagle3 "
            "drafter) or hf, or train with draft.fusion: none"
        )
    if arch.embed_scale != 1.0:
        out.append(
            f"{src} feeds the draft the target's embedding rows as stored, but this draft scales "
            f"them by {arch.embed_scale:.4g} as its target does (Gemma's sqrt(h)). Fix: use "
            "--format vllm (the plugin's drafter reads embed_scale) or hf"
        )
    if arch.output_norm and not rules.final_norm:
        out.append(
            f"{src} has no final norm before the LM head, but this draft has one "
            "(draft.output_norm: true). Fix: train with draft.output_norm: false, or use "
            "--format hf"
        )
    if arch.first_input_norm != rules.first_input_norm:
        has = "has no" if not rules.first_input_norm else "has an"
        out.append(
            f"{src} {has} input norm on decoder layer 0, but this draft "
            f"{'has one' if arch.first_input_norm else 'has none'}. Fix: train with "
            f"draft.input_norm: {str(rules.first_input_norm).lower()}, or use --format hf"
        )
    if rules.rope_theta is not None and arch.rope_theta != rules.rope_theta:
        out.append(
            f"{src} hard-codes RoPE base {rules.rope_theta:g}, but this draft uses "
            f"{arch.rope_theta:g}. Fix: train with draft.rope_theta: {rules.rope_theta:g}, or use "
            "--format sglang, vllm or hf (they read rope_theta from config.json)"
        )
    natural = arch.hidden_size // arch.num_attention_heads
    if not rules.head_dim_from_config and arch.head_dim != natural:
        out.append(
            f"{src} uses head_dim = hidden/heads = {natural}, but this draft has head_dim "
            f"{arch.head_dim}. Fix: use --format sglang, vllm or hf"
        )
    truncated = not draft.full_vocab or (
        target_vocab is not None and draft.draft_to_target.shape[0] != target_vocab
    )
    if truncated and not rules.token_map:
        out.append(
            f"{src} drafts over the target's full vocabulary, but this draft's LM head has "
            f"{draft.draft_to_target.shape[0]} tokens (draft.vocab_size). Fix: train with "
            "draft.vocab_size: 0, or use --format sglang (--speculative-token-map) or hf"
        )
    bias = draft.tensors.get("fc.bias")
    if not rules.fc_bias and bias is not None and bool(bias.abs().max() > 0):
        out.append(
            f"{src} builds fc without a bias, but this draft's fc.bias is nonzero "
            f"(max |b| = {float(bias.abs().max()):.3g}). Fix: use --format sglang or eagle "
            "(both load fc.bias), or --format hf"
        )
    return out


def check(draft: DraftWeights, fmt: str, *, target_vocab: int | None = None) -> None:
    """Raise :class:`ExportError` (one line, all problems) when ``fmt`` cannot load ``draft``."""
    found = problems(draft, fmt, target_vocab=target_vocab)
    if found:
        raise ExportError(
            f"--format {fmt} ({ENGINES[fmt].name}) cannot load this draft as is: "
            + "; ".join(found)
        )


def engine_state_dict(
    draft: DraftWeights, fmt: str, *, embed_weight: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The tensors of an engine export under the EAGLE-1 key names.

    ``embed_tokens.weight`` [V, h] (the target's embedding: cnets holds it; SGLang and vLLM
    replace it by the target's), ``fc.weight`` [h, 2h], ``fc.bias`` [h] (where the engine has
    one), and per layer N: ``layers.N.self_attn.{q,k,v,o}_proj.weight``,
    ``layers.N.mlp.{gate,up,down}_proj.weight``, ``layers.N.post_attention_layernorm.weight``,
    ``layers.N.input_layernorm.weight`` (N >= 1 only). Call :func:`check` first.
    """
    rules = ENGINES[fmt]
    out = {"embed_tokens.weight": embed_weight}
    for key, value in draft.tensors.items():
        if key == "fc.bias" and not rules.fc_bias:
            continue  # checked to be zero
        out[key] = value
    expected = expected_keys(draft.arch, fmt)
    assert set(out) == expected, f"keys {sorted(set(out) ^ expected)} differ from {fmt}'s"
    return out


def expected_keys(arch: DraftArch, fmt: str) -> set[str]:
    """The key set an engine's draft class has for ``arch`` (the EAGLE-1 layout)."""
    rules = ENGINES[fmt]
    keys = {"embed_tokens.weight", "fc.weight"} | ({"fc.bias"} if rules.fc_bias else set())
    for n in range(arch.layers):
        p = f"layers.{n}."
        keys |= {p + f"self_attn.{x}_proj.weight" for x in "qkvo"}
        keys |= {p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")}
        keys.add(p + "post_attention_layernorm.weight")
        if n > 0 or rules.first_input_norm:
            keys.add(p + "input_layernorm.weight")
    if rules.final_norm:
        keys.add("norm.weight")
    return keys


def engine_config(draft: DraftWeights, fmt: str, *, target_vocab: int, dtype: str) -> dict:
    """config.json of an engine export: LlamaConfig fields as EAGLE's published drafts have
    them, plus ``bias`` (eagle-llm's fc-bias switch, eagle only: SGLang and vLLM would read it
    as an attention bias) and ``head_dim`` where the engine reads it."""
    rules, a = ENGINES[fmt], draft.arch
    cfg: dict[str, object] = {
        "architectures": list(rules.architectures),
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": a.hidden_size,
        "intermediate_size": a.intermediate_size,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.num_attention_heads,
        "num_key_value_heads": a.num_key_value_heads,
        "max_position_embeddings": a.max_position_embeddings,
        "rms_norm_eps": a.rms_norm_eps,
        "rope_theta": a.rope_theta,
        "rope_scaling": None,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": target_vocab,
        "torch_dtype": dtype,
        "attention_bias": False,
    }
    if rules.bias_key:
        cfg["bias"] = rules.fc_bias
    if rules.head_dim_from_config:
        cfg["head_dim"] = a.head_dim
    return cfg


def hf_config(draft: DraftWeights, *, dtype: str) -> dict:
    """config.json of an ``hf`` export: every :class:`DraftArch` field plus the draft vocabulary
    size; LlamaConfig names for the decoder stack so other readers see the shape."""
    a = draft.arch
    return {
        "architectures": [HF_ARCHITECTURE],
        "model_type": "specscale_draft",
        "format_version": 1,
        "hidden_act": "silu",
        "num_hidden_layers": a.layers,
        "draft_vocab_size": int(draft.draft_to_target.shape[0]),
        "fc_bias": "fc.bias" in draft.tensors,
        "torch_dtype": dtype,
        **{f.name: getattr(a, f.name) for f in fields(DraftArch) if f.name != "layers"},
    }


def vllm_needs_plugin(draft: DraftWeights, *, target_vocab: int) -> bool:
    """True when stock ``EagleLlamaForCausalLM`` cannot hold ``draft`` (see
    :func:`stock_problems`), so the export names :data:`VLLM_PLUGIN_ARCHITECTURE`."""
    return bool(stock_problems(draft, "vllm", target_vocab=target_vocab))


def vllm_plugin_state_dict(
    draft: DraftWeights, *, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor | None
) -> dict[str, torch.Tensor]:
    """The tensors :data:`VLLM_PLUGIN_ARCHITECTURE` loads: the EAGLE-1 keys plus ``fc.bias``,
    ``layers.0.input_layernorm.weight`` and ``norm.weight`` where the draft has them, and for a
    truncated vocabulary ``lm_head.weight`` [N, h] (the target's LM head rows of the draft
    vocabulary) and ``d2t`` [N] int64 (target id - draft id, EAGLE-3's convention).

    Raises:
        ValueError: a truncated vocabulary without ``lm_head_weight`` [V, h].
    """
    out = {"embed_tokens.weight": embed_weight, **draft.tensors}
    v, vocab = int(embed_weight.shape[0]), draft.draft_to_target
    if not (draft.full_vocab and len(vocab) == v):
        if lm_head_weight is None or tuple(lm_head_weight.shape) != tuple(embed_weight.shape):
            raise ValueError(
                "--format vllm of a truncated draft vocabulary needs the target's LM head "
                f"[{v}, {embed_weight.shape[1]}]. Fix: pass the --target the sweep trained with"
            )
        out["lm_head.weight"] = lm_head_weight[vocab]
        out["d2t"] = vocab - torch.arange(len(vocab))
    return out


def vllm_plugin_config(draft: DraftWeights, *, target_vocab: int, dtype: str) -> dict:
    """config.json of a plugin export: the stock vLLM fields plus the plugin's switches
    (``fc_bias``, ``first_input_norm``, ``output_norm``, ``draft_vocab_size``, ``embed_scale``)."""
    cfg = engine_config(draft, "vllm", target_vocab=target_vocab, dtype=dtype)
    cfg["architectures"] = [VLLM_PLUGIN_ARCHITECTURE]
    bias = draft.tensors.get("fc.bias")
    cfg["fc_bias"] = bias is not None
    cfg["first_input_norm"] = draft.arch.first_input_norm
    cfg["output_norm"] = draft.arch.output_norm
    cfg["draft_vocab_size"] = int(draft.draft_to_target.shape[0])
    cfg["embed_scale"] = draft.arch.embed_scale  # the plugin scales the (shared) embedding rows
    layers = list(draft.arch.fusion_layers)
    if layers:  # vLLM gathers the target's states entering these layers, in this order
        cfg["architectures"] = [VLLM_FUSED_ARCHITECTURE]
        cfg["num_aux_hidden_states"] = len(layers)
        cfg["eagle_aux_hidden_state_layer_ids"] = layers
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": layers}
    return cfg


def vllm_method(draft: DraftWeights) -> str:
    """vLLM's ``speculative-config`` method of a ``vllm`` export: ``eagle3`` for a draft with
    hidden fusion (vLLM then gathers the fused layers' states), else ``eagle``."""
    return "eagle3" if draft.arch.fusion_layers else "eagle"


def exported_vllm_method(folder: Path) -> str:
    """:func:`vllm_method` of a ``vllm`` export already written to ``folder`` (from its
    config.json's architecture; ``eagle`` when it has none)."""
    path = folder / "config.json"
    archs = json.loads(path.read_text()).get("architectures") if path.exists() else None
    return "eagle3" if archs == [VLLM_FUSED_ARCHITECTURE] else "eagle"


VLLM_PLUGIN_USAGE = (
    "pip install workloads/serving/vllm_plugin into the vLLM environment (make serve-env does), "
    "then vllm serve <target> --speculative-config "
    '\'{{"method": "{method}", "model": "{out}", "num_speculative_tokens": 3}}\''
)
"""how to load a plugin export; ``{out}`` is the folder, ``{method}`` :func:`vllm_method`"""


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote.

    Attributes:
        out: the folder.
        files: file names written in it.
        usage: how to load it in the engine (one line).
    """

    out: Path
    files: tuple[str, ...]
    usage: str


def export_draft(
    draft: DraftWeights,
    fmt: str,
    out: Path,
    *,
    embed_weight: torch.Tensor | None = None,
    lm_head_weight: torch.Tensor | None = None,
    dtype: str = "float32",
    overwrite: bool = False,
) -> ExportResult:
    """Write ``draft`` in format ``fmt`` to the folder ``out``; nothing is written on error.

    Args:
        draft: the draft (:func:`read_draft`).
        fmt: one of :data:`FORMATS`.
        out: the folder to create (written to a temporary sibling, then renamed into place).
        embed_weight: [V, h] the target's token embedding; required for the engine formats.
        lm_head_weight: [V, h] the target's LM head; required for ``vllm`` of a draft with a
            truncated vocabulary (its rows are the draft's LM head).
        dtype: element type of the weights (:data:`DTYPES`).
        overwrite: replace an existing non-empty ``out``.

    Raises:
        ExportError: the format cannot load the draft as is (:func:`check`).
        ValueError: unknown format or dtype, missing or mismatched embedding, ``out`` not empty.
    """
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r} is not one of {list(FORMATS)}")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not one of {list(DTYPES)}")
    if fmt != "hf":
        if embed_weight is None:
            raise ValueError(f"--format {fmt} needs the target's token embedding")
        if embed_weight.shape[1] != draft.arch.hidden_size:
            raise ValueError(
                f"the target's hidden size is {embed_weight.shape[1]} but the draft was built for "
                f"{draft.arch.hidden_size}. Fix: pass the --target the sweep trained with"
            )
        if int(draft.draft_to_target.max()) >= embed_weight.shape[0]:
            raise ValueError(
                f"the draft's vocabulary map names token ids beyond the target's "
                f"{embed_weight.shape[0]}. Fix: pass the --target the sweep trained with"
            )
    target_vocab = None if embed_weight is None else int(embed_weight.shape[0])
    check(draft, fmt, target_vocab=target_vocab)
    check_out(out, overwrite=overwrite)

    cast = DTYPES[dtype]
    files: dict[str, object] = {}
    if fmt == "hf":
        tensors = {k: v.to(cast).contiguous() for k, v in draft.tensors.items()}
        tensors["draft_to_target"] = draft.draft_to_target.clone()
        files["model.safetensors"] = tensors
        files["config.json"] = hf_config(draft, dtype=dtype)
        usage = f"workloads.models.export.load_hf('{out}', embed_weight=..., lm_head_weight=...)"
    elif (
        fmt == "vllm"
        and embed_weight is not None
        and vllm_needs_plugin(draft, target_vocab=int(embed_weight.shape[0]))
    ):
        v = int(embed_weight.shape[0])
        state = vllm_plugin_state_dict(
            draft, embed_weight=embed_weight.detach(), lm_head_weight=lm_head_weight
        )
        files["model.safetensors"] = {
            k: (t if k == "d2t" else t.to(cast)).contiguous() for k, t in state.items()
        }
        files["config.json"] = vllm_plugin_config(draft, target_vocab=v, dtype=dtype)
        usage = VLLM_PLUGIN_USAGE.format(out=out, method=vllm_method(draft))
    else:
        assert embed_weight is not None and target_vocab is not None
        rules = ENGINES[fmt]
        state = engine_state_dict(draft, fmt, embed_weight=embed_weight.detach())
        state = {k: v.to(cast).contiguous() for k, v in state.items()}
        for name in rules.weight_files:
            files[name] = state
        files["config.json"] = engine_config(draft, fmt, target_vocab=target_vocab, dtype=dtype)
        token_map = ""
        if rules.token_map and not (
            draft.full_vocab and len(draft.draft_to_target) == target_vocab
        ):
            files[TOKEN_MAP_FILE] = [int(i) for i in draft.draft_to_target]
            token_map = f" --speculative-token-map {out / TOKEN_MAP_FILE}"
        usage = rules.usage.format(out=out, token_map=token_map)

    try:
        _write_atomically(out, files)
    except OSError as e:
        raise ValueError(
            f"--out {out} cannot be written ({e.strerror or e}). Fix: pass a folder you can write"
        ) from None
    return ExportResult(out=out, files=tuple(sorted(files)), usage=usage)


def check_out(out: Path, *, overwrite: bool = False) -> None:
    """Raise ``ValueError`` when ``out`` is a file, or a non-empty folder without ``overwrite``."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file. Fix: pass a folder path")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"--out {out} is not empty. Fix: pass a new folder or --overwrite")


def _write_atomically(out: Path, files: dict[str, object]) -> None:
    """Write ``files`` (name -> content) into a temporary sibling of ``out``, then rename it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name, content in files.items():
            path = tmp / name
            if name == "config.json":
                path.write_text(json.dumps(content, indent=2) + "\n")
            elif name.endswith(".safetensors"):
                save_file(content, str(path), metadata={"format": "pt"})  # type: ignore[arg-type]
            else:  # pytorch_model.bin (state dict) or the token map (list of ids)
                torch.save(content, path)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def load_hf(
    folder: Path, *, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor
) -> DraftModel:
    """Load an ``hf`` export back into a :class:`DraftModel` (weights cast to float32).

    Args:
        folder: written by :func:`export_draft` with ``fmt="hf"``.
        embed_weight: [V, h] the target's token embedding.
        lm_head_weight: [V, h] the target's LM head.

    Raises:
        ValueError: ``folder`` is not an ``hf`` export.
    """
    cfg = json.loads((folder / "config.json").read_text())
    if cfg.get("architectures") != [HF_ARCHITECTURE]:
        raise ValueError(f"{folder} is not an hf export of this project ({HF_ARCHITECTURE})")
    arch = DraftArch.from_fields(cfg | {"layers": int(cfg["num_hidden_layers"])})
    tensors = load_file(str(folder / "model.safetensors"))
    vocab = tensors.pop("draft_to_target")
    model = DraftModel(
        arch, embed_weight=embed_weight, lm_head_weight=lm_head_weight, draft_to_target=vocab
    )
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    return model
