"""Corpus sources and the token-shard cache: real files in tmp_path, a real (small) tokenizer."""

from __future__ import annotations

import gzip
import json
import pickle
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from workloads.data.corpus import _stdlib_docs
from workloads.data.packing import RowSource, pack_token_documents
from workloads.data.shards import (
    WORK,
    CorpusTooSmall,
    StreamRows,
    corpus_recipe,
    corpus_rows,
    corpus_tokens,
)
from workloads.data.sources import iter_source_documents, source_fingerprint
from workloads.draft_train.config import CorpusSource

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "boxing",
    "matches",
    "in",
    "paris",
    "and",
    "berlin;",
    "def",
    "return",
    "import",
    "class",
    "lambda",
    "yield",
    "ünïcödé",
    "42",
    "3.14",
]
TOK_FP = "testtok"


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60))) for _ in range(n)]


@pytest.fixture(scope="module")
def tok() -> Any:
    """A byte-level BPE tokenizer trained on the test words, with an EOS token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_texts(99, 200), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="</s>")


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    """A jsonl, a jsonl.gz, a parquet file (field ``content``) and a folder of .txt files."""
    data = tmp_path / "data"
    (data / "txt").mkdir(parents=True)
    a = data / "a.jsonl"
    a.write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(_texts(1, 60)))
    )
    b = data / "b.jsonl.gz"
    with gzip.open(b, "wt") as f:
        for t in _texts(2, 40):
            f.write(json.dumps({"text": t}) + "\n")
    c = data / "c.parquet"
    pq.write_table(pa.table({"content": _texts(3, 40) + [""]}), c)
    for i, t in enumerate(_texts(4, 6)):
        (data / "txt" / f"doc{i}.txt").write_text(t)
    return {"a": a, "b": b, "c": c, "txt": data / "txt"}


def _mixed_docs(corpus: Sequence[CorpusSource], tok: Any) -> list[list[int]]:
    """The reference mix: tokenise every document, greedy round robin by tokens (ties by
    source order), stop when the chosen source runs out."""
    streams = []
    for src in corpus:
        texts = [d.text for d in iter_source_documents(src)]
        ids = tok(texts, add_special_tokens=False)["input_ids"] if texts else []
        streams.append(iter([x + [tok.eos_token_id] for x in ids]))
    total = sum(s.weight for s in corpus)
    weights = [s.weight / total for s in corpus]
    emitted = [0] * len(corpus)
    out: list[list[int]] = []
    while True:
        i = min(range(len(corpus)), key=lambda k: (emitted[k] / weights[k], k))
        doc = next(streams[i], None)
        if doc is None:
            return out
        emitted[i] += len(doc)
        out.append(doc)


def _reference(docs: list[list[int]], seq_len: int, n_rows: int, packing: Any) -> Any:
    return pack_token_documents(
        ((d, [1] * len(d)) for d in docs), seq_len=seq_len, n_rows=n_rows, packing=packing
    )


def _all_rows(rows: StreamRows) -> Any:
    return rows.packed(torch.arange(rows.rows))


def _corpus(files: dict[str, Path]) -> list[CorpusSource]:
    return [
        CorpusSource(source=str(files["a"]), weight=2.0),
        CorpusSource(source=str(files["b"])),
        CorpusSource(source=str(files["c"]), text_field="content", weight=1.5),
        CorpusSource(source=str(files["txt"] / "*.txt"), weight=0.5),
    ]


@pytest.mark.parametrize("packing", ["isolated", "joined"])
def test_rows_equal_pack_token_documents(
    files: dict[str, Path], tok: Any, tmp_path: Path, packing: str
) -> None:
    corpus = _corpus(files)
    docs = _mixed_docs(corpus, tok)
    total = sum(len(d) for d in docs)
    seq_len, n_rows = 32, total // 32 - 3
    rows = corpus_rows(
        corpus,
        tok,
        tokenizer_fp=TOK_FP,
        cache_dir=tmp_path / "cache",
        seq_len=seq_len,
        packing=packing,
        n_rows=n_rows,
        repeat=False,
        num_proc=1,
        shard_tokens=300,
    )
    assert isinstance(rows, RowSource)
    assert (rows.rows, rows.seq_len) == (n_rows, seq_len)
    got, want = _all_rows(rows), _reference(docs, seq_len, n_rows, packing)
    assert torch.equal(got.input_ids, want.input_ids)
    assert torch.equal(got.position_ids, want.position_ids)
    assert bool(got.loss_mask.all())
    # any order, any subset
    idx = torch.tensor([5, 0, n_rows - 1, 5])
    sub = rows.packed(idx)
    assert torch.equal(sub.input_ids, want.input_ids[idx])
    assert torch.equal(sub.position_ids, want.position_ids[idx])


def test_num_proc_does_not_change_the_stream(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    corpus = _corpus(files)
    built = []
    for num_proc in (1, 2):
        size = corpus_tokens(
            corpus,
            tok,
            tokenizer_fp=TOK_FP,
            cache_dir=tmp_path / f"c{num_proc}",
            need=10**9,
            num_proc=num_proc,
            shard_tokens=250,
        )
        rows = corpus_rows(
            corpus,
            tok,
            tokenizer_fp=TOK_FP,
            cache_dir=tmp_path / f"c{num_proc}",
            seq_len=24,
            packing="isolated",
            n_rows=size.tokens // 24,
            repeat=False,
            num_proc=num_proc,
        )
        built.append((size, _all_rows(rows)))
        assert size.complete
    (s1, r1), (s2, r2) = built
    assert s1 == s2
    assert torch.equal(r1.input_ids, r2.input_ids)
    assert torch.equal(r1.position_ids, r2.position_ids)
    assert s1.tokens == sum(len(d) for d in _mixed_docs(corpus, tok))


def test_weights_share_tokens(files: dict[str, Path], tok: Any, tmp_path: Path) -> None:
    corpus = [
        CorpusSource(source=str(files["a"]), weight=3.0),
        CorpusSource(source=str(files["b"]), weight=1.0),
    ]
    size = corpus_tokens(
        corpus, tok, tokenizer_fp=TOK_FP, cache_dir=tmp_path / "cache", need=2000, num_proc=1
    )
    assert not size.complete and size.tokens == 2000
    a, b = size.per_source
    longest = max(len(d) for d in _mixed_docs(corpus, tok))
    assert abs(a - 3 * b) <= 3 * longest  # the weighted round robin is off by one document at most
    assert a + b >= 2000


def test_mixed_stream_ends_when_a_source_runs_out(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    small = CorpusSource(source=str(files["txt"]), weight=1.0)  # a folder: 6 short documents
    corpus = [CorpusSource(source=str(files["a"])), small]
    size = corpus_tokens(
        corpus, tok, tokenizer_fp=TOK_FP, cache_dir=tmp_path, need=10**9, num_proc=1
    )
    docs = _mixed_docs(corpus, tok)
    assert size.complete and size.tokens == sum(len(d) for d in docs)
    assert size.per_source[1] == sum(
        len(tok(d.text, add_special_tokens=False)["input_ids"]) + 1
        for d in iter_source_documents(small)
    )


def test_repeat_wraps_to_the_first_document(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    corpus = [CorpusSource(source=str(files["txt"] / "doc*.txt"))]
    docs = _mixed_docs(corpus, tok)
    total = sum(len(d) for d in docs)
    seq_len = 16
    n_rows = 3 * total // seq_len + 2  # three passes and a bit
    rows = corpus_rows(
        corpus,
        tok,
        tokenizer_fp=TOK_FP,
        cache_dir=tmp_path,
        seq_len=seq_len,
        packing="isolated",
        n_rows=n_rows,
        repeat=True,
        num_proc=1,
        shard_tokens=100,
    )
    want = _reference(docs * 4, seq_len, n_rows, "isolated")
    got = _all_rows(rows)
    assert torch.equal(got.input_ids, want.input_ids)
    assert torch.equal(got.position_ids, want.position_ids)
    flat_pos = got.position_ids.reshape(-1)
    assert int(flat_pos[total]) == 0  # the first document starts again at position 0
    assert torch.equal(
        got.input_ids.reshape(-1)[total : 2 * total], got.input_ids.reshape(-1)[:total]
    )


def test_budget_over_the_corpus_is_refused_with_both_sizes(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    corpus = [CorpusSource(source=str(files["b"]))]
    total = sum(len(d) for d in _mixed_docs(corpus, tok))
    n_rows = total // 32 + 1
    with pytest.raises(CorpusTooSmall) as err:
        corpus_rows(
            corpus,
            tok,
            tokenizer_fp=TOK_FP,
            cache_dir=tmp_path,
            seq_len=32,
            packing="isolated",
            n_rows=n_rows,
            repeat=False,
            num_proc=1,
        )
    msg = str(err.value)
    assert f"{n_rows * 32:,} tokens" in msg and f"holds {total:,} tokens" in msg
    assert "pretrain.repeat: true" in msg and "pretrain.tokens" in msg
    assert isinstance(err.value, ValueError)


def test_missing_text_field_names_file_field_and_fields(tmp_path: Path) -> None:
    path = tmp_path / "posts.jsonl"
    path.write_text(json.dumps({"body": "hello", "id": 1}) + "\n")
    src = CorpusSource(source=str(path), text_field="text")
    with pytest.raises(ValueError, match=r"posts\.jsonl.*'text'.*\['body', 'id'\]"):
        list(iter_source_documents(src))


def test_glob_matching_nothing_is_named(tmp_path: Path) -> None:
    src = CorpusSource(source=str(tmp_path / "none" / "*.parquet"))
    with pytest.raises(ValueError, match=r"none/\*\.parquet.*matches no corpus file"):
        source_fingerprint(src)


def test_sources_read_every_kind_and_skip_empty_texts(files: dict[str, Path]) -> None:
    docs = list(iter_source_documents(CorpusSource(source=str(files["c"]), text_field="content")))
    assert [d.text for d in docs] == _texts(3, 40)  # the empty record is skipped
    gz = list(iter_source_documents(CorpusSource(source=str(files["b"]))))
    assert [d.text for d in gz] == _texts(2, 40)
    txt = list(iter_source_documents(CorpusSource(source=str(files["txt"] / "*.txt"))))
    assert [d.id for d in txt] == [f"doc{i}.txt" for i in range(6)]
    stdlib = iter_source_documents(CorpusSource(source="stdlib"))
    assert [next(stdlib).text for _ in range(2)] == [
        d.text for d, _ in zip(_stdlib_docs(0), range(2), strict=False)
    ]


def test_resume_tokenises_only_new_documents(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    corpus = _corpus(files)
    kw: dict[str, Any] = {"tokenizer_fp": TOK_FP, "num_proc": 1, "shard_tokens": 200}
    before = WORK.documents
    first = corpus_tokens(corpus, tok, cache_dir=tmp_path / "r", need=600, **kw)
    part = WORK.documents - before
    second = corpus_tokens(corpus, tok, cache_dir=tmp_path / "r", need=10**9, **kw)
    resumed = WORK.documents - before
    again = corpus_tokens(corpus, tok, cache_dir=tmp_path / "r", need=10**9, **kw)
    assert WORK.documents - before == resumed  # a complete cache tokenises nothing
    fresh0 = WORK.documents
    fresh = corpus_tokens(corpus, tok, cache_dir=tmp_path / "f", need=10**9, **kw)
    n_fresh = WORK.documents - fresh0
    assert first.tokens == 600 and not first.complete
    assert 0 < part < n_fresh  # only as far as needed ...
    assert resumed == n_fresh  # ... and every document once in all
    assert second == again == fresh
    shared = dict(kw, seq_len=20, packing="isolated", n_rows=fresh.tokens // 20, repeat=False)
    r1 = _all_rows(corpus_rows(corpus, tok, cache_dir=tmp_path / "r", **shared))
    r2 = _all_rows(corpus_rows(corpus, tok, cache_dir=tmp_path / "f", **shared))
    assert torch.equal(r1.input_ids, r2.input_ids)


def test_rows_are_read_lazily_from_memory_maps(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    corpus = [CorpusSource(source=str(files["a"]))]
    messages: list[str] = []
    rows = corpus_rows(
        corpus,
        tok,
        tokenizer_fp=TOK_FP,
        cache_dir=tmp_path,
        seq_len=16,
        packing="joined",
        n_rows=100,
        repeat=False,
        num_proc=1,
        shard_tokens=100,
        progress=messages.append,
    )
    shards = sorted((tmp_path / "tokens").glob("*/shard-*.bin"))
    assert len(shards) >= 3 and len(messages) == len(shards)
    assert "tokens so far" in messages[-1] and "tokens/s" in messages[-1]
    src = rows._sources[0]
    assert not [k for k in src._maps if k.endswith(".bin")]  # no token read yet
    rows.packed(torch.tensor([99]))
    assert 1 <= len([k for k in src._maps if k.endswith(".bin")]) <= 2  # only the shards it needs
    assert all(isinstance(m, np.memmap) for m in src._maps.values())
    assert len(pickle.dumps(rows)) < 4096  # the shard tables, not the tokens
    again = pickle.loads(pickle.dumps(rows))
    assert torch.equal(
        again.packed(torch.tensor([3])).input_ids, rows.packed(torch.tensor([3])).input_ids
    )
    with pytest.raises(IndexError):
        rows.packed(torch.tensor([100]))


def test_fingerprints_follow_the_files_and_the_recipe(files: dict[str, Path]) -> None:
    src = CorpusSource(source=str(files["a"]))
    fp = source_fingerprint(src)
    assert len(fp) == 16 and fp == source_fingerprint(src)
    assert source_fingerprint(CorpusSource(source=str(files["a"]), text_field="body")) != fp
    with files["a"].open("a") as f:
        f.write(json.dumps({"text": "one more"}) + "\n")
    assert source_fingerprint(src) != fp
    two = [src, CorpusSource(source=str(files["b"]))]
    assert corpus_recipe(two, "t") != corpus_recipe(two, "u")
    heavier = [src, CorpusSource(source=str(files["b"]), weight=2.0)]
    assert corpus_recipe(two, "t") != corpus_recipe(heavier, "t")
    assert source_fingerprint(CorpusSource(source="hf:org/set")) != source_fingerprint(
        CorpusSource(source="hf:org/set", split="test")
    )


def test_mixing_in_small_windows_and_growing_the_index(
    files: dict[str, Path], tok: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workloads.data import shards

    monkeypatch.setattr(shards, "_MIX_WINDOW", 37)  # many merge windows, each a few documents
    monkeypatch.setattr(shards, "_FIRST_TARGET", 50)  # and many tokenisation rounds
    read = WORK.read
    corpus = _corpus(files)[:3]
    docs = _mixed_docs(corpus, tok)
    kw: dict[str, Any] = {"tokenizer_fp": TOK_FP, "cache_dir": tmp_path, "num_proc": 1}
    for n_rows in (7, 40, sum(len(d) for d in docs) // 32):  # the index grows between calls
        rows = corpus_rows(
            corpus, tok, seq_len=32, packing="isolated", n_rows=n_rows, repeat=False, **kw
        )
        want = _reference(docs, 32, n_rows, "isolated")
        got = _all_rows(rows)
        assert torch.equal(got.input_ids, want.input_ids)
        assert torch.equal(got.position_ids, want.position_ids)
    n_docs = sum(len(list(iter_source_documents(src))) for src in corpus)
    assert WORK.read - read <= n_docs  # one pass over each source, however many rounds


def test_resume_in_another_process_reads_up_to_the_position(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    from workloads.data import source_shards

    corpus = [CorpusSource(source=str(files["a"]))]
    kw: dict[str, Any] = {"tokenizer_fp": TOK_FP, "cache_dir": tmp_path, "num_proc": 1}
    read0, docs0 = WORK.read, WORK.documents
    corpus_tokens(corpus, tok, need=300, **kw)
    first = WORK.documents - docs0
    source_shards._READERS.clear()  # as a new process would start
    corpus_tokens(corpus, tok, need=10**9, **kw)
    assert WORK.documents - docs0 == 60  # each document tokenised once
    assert WORK.read - read0 == 60 + first  # read again up to the position, not tokenised


def test_an_empty_source_empties_the_corpus(
    files: dict[str, Path], tok: Any, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps({"text": "  "}) + "\n")
    corpus = [CorpusSource(source=str(empty)), CorpusSource(source=str(files["a"]))]
    with pytest.raises(CorpusTooSmall, match="holds no tokens.*ends where"):
        corpus_rows(
            corpus,
            tok,
            tokenizer_fp=TOK_FP,
            cache_dir=tmp_path,
            seq_len=16,
            packing="joined",
            n_rows=2,
            repeat=True,
            num_proc=1,
        )
