"""Documents of one ``pretrain.corpus`` source: builtin, local files, or a Hugging Face dataset.

A :class:`~workloads.draft_train.config.CorpusSource` names where its documents come from (its
``kind``):

* **builtin** ``sharegpt`` (the conversations of ShareGPT's ``"pretrain"`` split as plain text,
  never a held-out one) or ``stdlib`` (the Python standard library), exactly as in
  :mod:`workloads.data.corpus`;
* **files**: a file, a folder (every corpus file under it) or a glob, expanded and sorted by
  path. A ``.txt`` file is one document; ``.jsonl``, ``.jsonl.gz``, ``.json`` and ``.parquet``
  files are read with the ``datasets`` library (streamed, never loaded whole), one document per
  record, its text in the ``text_field`` column;
* **hf** ``hf:<dataset id>``: ``datasets.load_dataset(id, subset, split=split, streaming=True)``,
  the only case in which anything is downloaded.

Empty texts are skipped. :func:`source_fingerprint` keys the token-shard cache
(:mod:`workloads.data.shards`) by what the documents are made of.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from workloads.data.corpus import Document, _sharegpt_docs, _stdlib_docs
from workloads.data.encodings import NotUtf8, decode_utf8, find_not_utf8
from workloads.data.sharegpt import default_sharegpt_path, read_sharegpt, split_conversations
from workloads.draft_train.config import CORPUS_SUFFIXES, CorpusSource

__all__ = ["check_utf8", "expand_files", "iter_source_documents", "source_fingerprint"]

log = logging.getLogger(__name__)

_FINGERPRINT_VERSION = 1
_GLOB_CHARS = "*?["


def expand_files(source: str) -> list[Path]:
    """The corpus files a ``files`` source names, sorted by path.

    Args:
        source: a file, a folder (every file under it, recursively, whose name ends in one of
            :data:`~workloads.draft_train.config.CORPUS_SUFFIXES`) or a glob (``**`` recurses);
            ``~`` is expanded.

    Raises:
        ValueError: the file does not exist, or the folder or glob holds no corpus file.
    """
    expanded = str(Path(source).expanduser())
    if any(ch in source for ch in _GLOB_CHARS):
        found = [Path(p) for p in glob.glob(expanded, recursive=True)]
        files = sorted(p for p in found if p.is_file() and p.name.endswith(CORPUS_SUFFIXES))
        if not files:
            raise ValueError(
                f"pretrain.corpus glob {source!r} matches no corpus file "
                f"({', '.join(CORPUS_SUFFIXES)}). Fix: check the pattern and the folder"
            )
        return files
    path = Path(expanded)
    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*") if p.is_file() and p.name.endswith(CORPUS_SUFFIXES)
        )
        if not files:
            raise ValueError(
                f"pretrain.corpus folder {source!r} holds no corpus file "
                f"({', '.join(CORPUS_SUFFIXES)}). Fix: name a folder of such files"
            )
        return files
    if not path.is_file():
        raise ValueError(f"pretrain.corpus file {source!r} does not exist. Fix: check the path")
    return [path]


def _records_text(
    records: Iterable[dict[str, Any]], *, where: str, text_field: str
) -> Iterator[tuple[int, str]]:
    """``(record number, text)`` of each record with a non-empty text in ``text_field``; records
    are numbered from 1 (a JSONL file's line numbers, when it has no blank lines).

    Raises:
        ValueError: the first record has no ``text_field`` (naming ``where``, the field and the
            fields it has), or a text is not a string (naming the record).
    """
    for i, rec in enumerate(records, start=1):
        if text_field not in rec:
            if i == 1:
                raise ValueError(
                    f"{where}: no field {text_field!r}; its records have the fields "
                    f"{sorted(rec)}. Fix: set text_field in pretrain.corpus to one of them"
                )
            continue  # a later record without the field (json schemas are unified: rare)
        text = rec[text_field]
        if text is None:
            continue
        if not isinstance(text, str):
            raise ValueError(
                f"{where}: record {i}: field {text_field!r} holds a {type(text).__name__}, not "
                "text. Fix: set text_field in pretrain.corpus to a field of strings"
            )
        if text.strip():
            yield i, text


_WHAT = "pretrain.corpus file"
"""how encoding errors name a corpus file"""


def _file_documents(path: Path, *, source: str, text_field: str) -> Iterator[Document]:
    """The documents of one corpus file (see the module docstring).

    Raises:
        NotUtf8: a text file (``.txt``, JSON) that is not UTF-8, naming the byte offset.
        ValueError: a record without ``text_field`` or of another type, or a malformed file.
    """
    if path.name.endswith(".txt"):
        text = decode_utf8(path.read_bytes(), path, what=_WHAT)
        if text.strip():
            yield Document(source, path.name, text)
        return
    if path.stat().st_size == 0:
        log.warning("pretrain.corpus: %s is empty; it holds no document", path)
        return
    import datasets

    kind = "parquet" if path.name.endswith(".parquet") else "json"
    try:
        ds = datasets.load_dataset(kind, data_files=str(path), split="train", streaming=True)
        for i, text in _records_text(ds, where=str(path), text_field=text_field):
            yield Document(source, f"{path.name}:{i}", text)
    except UnicodeDecodeError as exc:  # where in the file: the codec saw one block of it
        raise find_not_utf8(path, what=_WHAT) or NotUtf8(
            path, exc.start, exc.object[exc.start : exc.end], exc.reason, what=_WHAT
        ) from None
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets/pyarrow errors of a malformed file
        if kind == "json" and (bad := find_not_utf8(path, what=_WHAT)) is not None:
            raise bad from None
        raise ValueError(
            f"{path} cannot be read as {kind} ({type(exc).__name__}: {exc}). Fix: repair the "
            "file or leave it out of pretrain.corpus"
        ) from exc


def check_utf8(files: Sequence[Path], *, head_bytes: int = 1 << 20, total: int = 1 << 26) -> None:
    """The first ``head_bytes`` of each text file (``.txt``, JSON, gzipped JSON) are UTF-8, up
    to ``total`` bytes in all: cheap, whatever the corpus's size (a submit-time check; the
    trial reads every byte strictly).

    Raises:
        NotUtf8: naming the file, the byte offset and the fix.
    """
    left = total
    for path in files:
        if left <= 0:
            return
        if path.name.endswith(".parquet"):
            continue  # binary; arrow checks its strings
        bad = find_not_utf8(path, what=_WHAT, limit=min(head_bytes, left))
        if bad is not None:
            raise bad
        left -= head_bytes


def _hf_documents(src: CorpusSource) -> Iterator[Document]:
    """The documents of a Hugging Face dataset, streamed (downloads)."""
    import datasets

    name = src.source[3:]
    log.info("streaming hf dataset %s (subset %s, split %s)", name, src.subset, src.split)
    ds = datasets.load_dataset(name, src.subset, split=src.split, streaming=True)
    where = f"hf:{name} ({src.subset or 'default'} / {src.split})"
    for i, text in _records_text(ds, where=where, text_field=src.text_field):
        yield Document(src.source, str(i), text)


def iter_source_documents(src: CorpusSource, *, seed: int = 0) -> Iterator[Document]:
    """The non-empty documents of one corpus source, in a deterministic order.

    Builtins follow :mod:`workloads.data.corpus` (document order shuffled by ``seed``; ShareGPT's
    ``"pretrain"`` split only); files are read in path order, records in file order (``seed``
    is unused); a hub dataset in its streaming order.

    Raises:
        ValueError: a file, folder or glob that names no corpus file, or a missing or non-text
            ``text_field`` (naming the file, the field and the fields that exist).
    """
    if src.kind == "builtin":
        if src.source == "sharegpt":
            convs = split_conversations(read_sharegpt()[0])["pretrain"]
            yield from _sharegpt_docs(convs, seed)
        else:
            yield from _stdlib_docs(seed)
    elif src.kind == "hf":
        yield from _hf_documents(src)
    else:
        for path in expand_files(src.source):
            yield from _file_documents(path, source=src.source, text_field=src.text_field)


def _recipe(src: CorpusSource) -> dict[str, Any]:
    """What a source's documents are made of (see :func:`source_fingerprint`)."""
    if src.kind == "builtin":
        if src.source == "sharegpt":
            path = default_sharegpt_path()
            return {"builtin": "sharegpt", "file": [path.name, path.stat().st_size]}
        return {"builtin": "stdlib", "python": [sys.version, sysconfig.get_paths()["stdlib"]]}
    if src.kind == "hf":
        return {
            "hf": src.source[3:],
            "subset": src.subset,
            "split": src.split,
            "text_field": src.text_field,
        }
    files = []
    for p in expand_files(src.source):
        st = p.stat()
        files.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
    return {"files": files, "text_field": src.text_field}


def source_fingerprint(src: CorpusSource) -> str:
    """Short hash (16 hex chars) of a source's recipe, for the token-shard cache key.

    Builtin: the ShareGPT file's name and size, or the Python version and stdlib path; files:
    each file's resolved path, size and modification time (ns), sorted, and ``text_field``;
    hub: the dataset id, subset, split and ``text_field`` (a hub dataset that changes under the
    same id is not noticed). The weight is not part of it.

    Raises:
        ValueError: see :func:`expand_files`.
    """
    recipe = {"v": _FINGERPRINT_VERSION, "source": _recipe(src)}
    blob = json.dumps(recipe, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
