"""The pretraining text stream: real text only (never synthetic, never evaluation prompts).

Sources (licenses in the README):

* ``"sharegpt"``: the ShareGPT conversations of the ``"pretrain"`` split
  (:func:`workloads.data.sharegpt.split_conversations`), rendered as plain text: turn texts
  joined by blank lines, no chat template (web-like prose and code).
* ``"stdlib"``: the Python standard library's ``.py`` files (the paper's 'GitHub' share), sorted,
  without ``test``/``tests``/``idlelib``/``lib2to3``/``site-packages`` directories.

:func:`iter_pretrain_documents` interleaves them so that the share of characters follows the mix;
:func:`pack_pretrain_rows` tokenizes and packs the stream into fixed-length rows, documents
isolated or joined (see :mod:`workloads.data.packing`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workloads.data.packing import PackedRows, Packing, pack_token_documents
from workloads.data.sharegpt import (
    Conversation,
    default_sharegpt_path,
    read_sharegpt,
    split_conversations,
)

__all__ = [
    "DEFAULT_MIX",
    "SOURCES",
    "Document",
    "corpus_fingerprint",
    "iter_pretrain_documents",
    "pack_documents",
    "pack_pretrain_rows",
    "stdlib_files",
    "tokenize_documents",
]

log = logging.getLogger(__name__)

DEFAULT_MIX: dict[str, float] = {"sharegpt": 0.8, "stdlib": 0.2}
"""share of characters per source"""

SOURCES: tuple[str, ...] = ("sharegpt", "stdlib")
"""the known pretraining sources"""

_RECIPE_VERSION = 1
_STDLIB_EXCLUDE = frozenset(
    {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages"}
)


@dataclass(frozen=True, slots=True)
class Document:
    """One pretraining document."""

    source: str
    """``"sharegpt"`` or ``"stdlib"``"""
    id: str
    """conversation id, or the file path relative to the stdlib root"""
    text: str
    """the plain text"""


def stdlib_files() -> list[Path]:
    """The standard library's ``.py`` files, sorted, excluding test/idle/lib2to3/site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p
        for p in root.rglob("*.py")
        if not _STDLIB_EXCLUDE.intersection(p.relative_to(root).parts[:-1])
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _sharegpt_text(conv: Conversation) -> str:
    return "\n\n".join(text.strip() for _, text in conv.turns if text.strip())


def _sharegpt_docs(convs: Sequence[Conversation], seed: int) -> Iterator[Document]:
    order = list(range(len(convs)))
    random.Random(f"sharegpt:{seed}").shuffle(order)
    for i in order:
        text = _sharegpt_text(convs[i])
        if text:
            yield Document("sharegpt", convs[i].id, text)


def _stdlib_docs(seed: int) -> Iterator[Document]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = stdlib_files()
    random.Random(f"stdlib:{seed}").shuffle(files)
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            yield Document("stdlib", p.relative_to(root).as_posix(), text)


def _check_mix(mix: Mapping[str, float]) -> dict[str, float]:
    unknown = sorted(set(mix) - set(SOURCES))
    if unknown:
        raise ValueError(
            f"mix has unknown sources {unknown}. Fix: use only {list(SOURCES)}, "
            'e.g. {"sharegpt": 0.8, "stdlib": 0.2}.'
        )
    if any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"mix {dict(mix)} needs weights >= 0 with a positive sum.")
    total = sum(mix.values())
    return {k: w / total for k, w in sorted(mix.items()) if w > 0}


def iter_pretrain_documents(
    *,
    mix: Mapping[str, float] = DEFAULT_MIX,
    seed: int = 0,
    sharegpt_pretrain: Sequence[Conversation] | None = None,
) -> Iterator[Document]:
    """Interleave the sources deterministically so that the share of characters follows ``mix``.

    Weighted round robin by characters: the next document comes from the source with the least
    characters emitted per unit weight (ties by name). Within a source the document order is a
    shuffle seeded by ``seed``. The stream ends when any source with a positive weight runs out
    (so the mix holds over every prefix, up to one document).

    Args:
        mix: share of characters per source (normalised), keys from :data:`SOURCES`.
        seed: shuffles document order within each source.
        sharegpt_pretrain: the conversations of the ``"pretrain"`` split; default
            ``split_conversations(read_sharegpt()[0])["pretrain"]`` (the default split, so no
            held-out conversation is ever in the stream).

    Raises:
        ValueError: unknown source or bad weights in ``mix``.
    """
    weights = _check_mix(mix)
    streams: dict[str, Iterator[Document]] = {}
    if "sharegpt" in weights:
        if sharegpt_pretrain is None:
            sharegpt_pretrain = split_conversations(read_sharegpt()[0])["pretrain"]
        streams["sharegpt"] = _sharegpt_docs(sharegpt_pretrain, seed)
    if "stdlib" in weights:
        streams["stdlib"] = _stdlib_docs(seed)
    emitted = dict.fromkeys(weights, 0)
    while True:
        name = min(weights, key=lambda k: (emitted[k] / weights[k], k))
        doc = next(streams[name], None)
        if doc is None:
            log.info("pretraining stream ends: source %r exhausted; chars %s", name, emitted)
            return
        emitted[name] += len(doc.text)
        yield doc


def tokenize_documents(
    tokenizer: Any, docs: Iterable[Document], *, max_tokens: int | None = None
) -> Iterator[tuple[list[int], list[int]]]:
    """Token ids of each document followed by the EOS token, with an all-ones loss mask.

    ``max_tokens`` (the tokens a packer can still use in all) lets a long file be tokenized only
    as far as it can be used (>= 1 token per 16 characters is safe): the cut-off text always
    yields more tokens than are left, so the cut never reaches a row.

    Raises:
        ValueError: the tokenizer has no EOS token.
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id. Fix: set tokenizer.eos_token.")
    used = 0
    for doc in docs:
        text = doc.text if max_tokens is None else doc.text[: (max_tokens - used) * 16 + 16]
        ids = list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        ids.append(eos)
        used += len(ids)
        yield ids, [1] * len(ids)


def pack_documents(
    tokenizer: Any,
    docs: Iterable[Document],
    *,
    seq_len: int,
    n_sequences: int,
    packing: Packing = "joined",
) -> torch.Tensor:
    """Tokenize documents, each followed by the EOS token, and cut the stream into rows.

    The token ids of :func:`pack_pretrain_rows` without the mask and positions (``joined`` by
    default: the documents end to end).

    Returns:
        ``torch.LongTensor`` of shape ``[n_sequences, seq_len]`` (token ids).

    Raises:
        ValueError: see :func:`pack_pretrain_rows`.
    """
    rows = pack_pretrain_rows(
        tokenizer, docs, seq_len=seq_len, n_sequences=n_sequences, packing=packing
    )
    return rows.input_ids


def pack_pretrain_rows(
    tokenizer: Any,
    docs: Iterable[Document],
    *,
    seq_len: int,
    n_sequences: int,
    packing: Packing,
) -> PackedRows:
    """Tokenize documents, each followed by the EOS token, and pack them into rows (no padding).

    The token stream is cut into ``n_sequences`` rows of ``seq_len`` tokens and the remainder is
    discarded; every token is in the loss. ``isolated`` packing makes each document (and each
    piece of a document cut by a row end) a segment of its own, positions from 0 (see
    :mod:`workloads.data.packing`). Deterministic for a deterministic ``docs``; consumes only
    as many documents as needed.

    Raises:
        ValueError: ``seq_len`` or ``n_sequences`` < 1, no EOS token, or the documents run out
            before ``n_sequences * seq_len`` tokens (Fix: fewer sequences or more sources).
    """
    if seq_len < 1 or n_sequences < 1:
        raise ValueError(f"seq_len={seq_len}, n_sequences={n_sequences}: both must be >= 1.")
    need = seq_len * n_sequences
    try:
        return pack_token_documents(
            tokenize_documents(tokenizer, docs, max_tokens=need),
            seq_len=seq_len,
            n_rows=n_sequences,
            packing=packing,
        )
    except ValueError as exc:
        if "fewer than" not in str(exc):
            raise
        raise ValueError(
            f"{exc}. Fix: ask for fewer sequences or add sources to the mix."
        ) from None


def corpus_fingerprint(mix: Mapping[str, float] = DEFAULT_MIX, seed: int = 0) -> str:
    """Short hash (16 hex chars) of the corpus recipe and its sources, for use as a cache key.

    Covers the normalised mix, the seed, the recipe version, the Python version and stdlib path
    (the stdlib files), and the ShareGPT file name and size.
    """
    weights = _check_mix(mix)
    sources: dict[str, Any] = {}
    if "stdlib" in weights:
        sources["stdlib"] = [sys.version, sysconfig.get_paths()["stdlib"]]
    if "sharegpt" in weights:
        path = default_sharegpt_path()
        sources["sharegpt"] = [path.name, path.stat().st_size]
    recipe = {"v": _RECIPE_VERSION, "mix": weights, "seed": seed, "sources": sources}
    blob = json.dumps(recipe, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
