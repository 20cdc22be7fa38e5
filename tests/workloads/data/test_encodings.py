"""Text files that are not UTF-8 (issue 23): a latin-1 corpus or prompt file is refused naming
the file, the byte offset and the fix, never read with replacement characters."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from workloads.config import ConfigError
from workloads.data import encodings, load_prompt_sets
from workloads.data.encodings import NotUtf8, find_not_utf8
from workloads.data.sources import check_utf8, iter_source_documents
from workloads.draft_train.checks import check_corpora
from workloads.draft_train.config import CorpusSource, DraftTrainConfig

LATIN1 = "Crème brûlée au café, déjà vu à Noël.\n"


def _latin1_txt(tmp_path: Path) -> tuple[Path, int]:
    """A latin-1 text file and the offset of its first non-UTF-8 byte (the è of Crème)."""
    path = tmp_path / "notes.txt"
    path.write_bytes(("Plain ASCII first. " * 5 + LATIN1 * 20).encode("latin-1"))
    return path, len("Plain ASCII first. " * 5) + 2


def _refused(exc: pytest.ExceptionInfo[NotUtf8], path: Path, offset: int) -> str:
    msg = str(exc.value)
    assert str(path) in msg and f"byte {offset:,} (0xe8" in msg, msg
    assert "is not UTF-8 text" in msg and "Fix: convert it to UTF-8" in msg
    assert exc.value.offset == offset
    return msg


def test_a_latin1_txt_corpus_is_refused_not_replaced(tmp_path: Path) -> None:
    path, offset = _latin1_txt(tmp_path)
    with pytest.raises(NotUtf8) as err:
        list(iter_source_documents(CorpusSource(source=str(path))))
    msg = _refused(err, path, offset)
    assert f"iconv -f latin1 -t utf-8 {path} > {tmp_path / 'notes.utf8.txt'}" in msg
    path.write_text(LATIN1, encoding="utf-8")  # the converted file reads as it is
    (doc,) = iter_source_documents(CorpusSource(source=str(path)))
    assert doc.text == LATIN1 and "\ufffd" not in doc.text


def test_a_latin1_jsonl_corpus_names_the_file_and_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "web.jsonl"
    lines = [json.dumps({"text": f"line {i}"}) + "\n" for i in range(50)]
    head = "".join(lines).encode()
    path.write_bytes(head + b'{"text": "caf\xe9"}\n')
    with pytest.raises(NotUtf8) as err:
        list(iter_source_documents(CorpusSource(source=str(path))))
    msg = str(err.value)
    assert str(path) in msg and f"byte {len(head) + 13:,} (0xe9" in msg, msg
    assert "Fix: convert it to UTF-8, e.g. iconv -f latin1 -t utf-8" in msg


def test_a_gzipped_corpus_counts_decompressed_bytes(tmp_path: Path) -> None:
    path = tmp_path / "web.jsonl.gz"
    head = (json.dumps({"text": "ok"}) + "\n").encode()
    path.write_bytes(gzip.compress(head + b'{"text": "na\xefve"}\n'))
    bad = find_not_utf8(path, what="pretrain.corpus file")
    assert bad is not None and bad.offset == len(head) + 12
    assert f"zcat {path} | iconv -f latin1 -t utf-8 | gzip >" in str(bad)


@pytest.mark.parametrize("block", [1, 2, 3, 7, 1 << 20])
def test_the_offset_is_exact_across_read_blocks(
    tmp_path: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encodings, "READ_BLOCK", block)
    good = "ünïcödé 日本語 🙂 ".encode() * 3  # characters cut by every block size
    path = tmp_path / "t.txt"
    path.write_bytes(good)
    assert find_not_utf8(path, what="f") is None
    path.write_bytes(good + b"ok \xff rest")
    bad = find_not_utf8(path, what="f")
    assert bad is not None and bad.offset == len(good) + 3
    path.write_bytes(good + "é".encode()[:1])  # a character cut by the end of the file
    bad = find_not_utf8(path, what="f")
    assert bad is not None and bad.offset == len(good)


def test_the_submit_check_reads_the_head_of_each_file(tmp_path: Path) -> None:
    good = tmp_path / "a.txt"
    good.write_text("fine\n", encoding="utf-8")
    path, offset = _latin1_txt(tmp_path)
    check_utf8([good])
    with pytest.raises(NotUtf8) as err:
        check_utf8([good, path])
    _refused(err, path, offset)
    check_utf8([good, path], head_bytes=offset)  # only the head is read


def test_a_latin1_corpus_is_refused_at_submit_on_the_corpus_line(tmp_path: Path) -> None:
    path, offset = _latin1_txt(tmp_path)
    cfg = DraftTrainConfig.model_validate(
        {"pretrain": {"tokens": 10**9, "corpus": [{"source": str(path)}]}}
    )
    with pytest.raises(ConfigError) as err:
        check_corpora([cfg], tmp_path / "run", dry_run=True)
    assert err.value.field == ("pretrain", "corpus")
    assert f"{path} is not UTF-8 text: byte {offset:,}" in str(err.value)
    assert not (tmp_path / "run").exists()


def test_a_latin1_prompt_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_bytes(b'{"turns": ["caf\xe9?"]}\n')
    with pytest.raises(NotUtf8, match=r"prompt file .*q.jsonl is not UTF-8 text: byte 15 "):
        load_prompt_sets(tmp_path, n=2)
