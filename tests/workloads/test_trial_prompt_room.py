"""A prompt longer than the target's positions fails the trial with the reason: ``decode_bench``
before anything is decoded, ``draft_train`` right after the target loads (before training)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.workloads.tiny import tiny_target
from workloads.data.prompts import PromptTooLong
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.draft_train import run as draft_train
from workloads.draft_train.config import DraftTrainConfig
from workloads.measure import decode as engine_bench


class _WordTokenizer:
    """One token per word; a chat template that adds nothing: enough for ``chat_prompt_ids``."""

    all_special_ids: list[int] = []
    chat_template = "{{ messages }}"  # has one, so ``chat_template_of`` keeps it

    def apply_chat_template(self, messages: list[dict[str, str]], **_: Any) -> str:
        return " ".join(m["content"] for m in messages)

    def __call__(self, text: str, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": [1] * len(text.split())}


def _prompt_dir(tmp_path: Path, words: int) -> Path:
    folder = tmp_path / "prompts"
    folder.mkdir()
    lines = [{"turns": ["Summarise this."]}, {"turns": [" ".join(["word"] * words)]}]
    (folder / "long.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def _target() -> Any:
    """The tiny target (256 positions) with a word tokenizer, as a trial's ``Target``."""
    model = tiny_target()
    return SimpleNamespace(
        model=model, tokenizer=_WordTokenizer(), random_weights=True, input_device=model.device
    )


def test_decode_bench_refuses_a_prompt_past_the_targets_positions(tmp_path: Path) -> None:
    folder = _prompt_dir(tmp_path, 250)  # 250 + 8 new + depth 3 > 256
    cfg = DecodeBenchConfig.model_validate(
        {
            "prompts": {"prompt_sets": str(folder), "num_prompts": 2},
            "decode": {"max_new_tokens": 8, "depth": 3, "num_draft_tokens": 4},
        }
    )
    with pytest.raises(PromptTooLong, match=r"'long' prompt 2 is 250 tokens .* than the 256"):
        engine_bench.bench_prompts(cfg, _target())
    fits = cfg.model_copy(update={"prompts": cfg.prompts.model_copy(update={"num_prompts": 1})})
    assert engine_bench.bench_prompts(fits, _target()) == [[1, 1]]  # the short one only


def test_draft_train_fails_before_training_on_a_too_long_eval_prompt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _prompt_dir(tmp_path, 250)
    cfg = DraftTrainConfig.model_validate(
        {"device": "cpu", "eval": {"prompt_sets": str(folder), "num_prompts": 2}}
    )
    loaded = SimpleNamespace(load=_target)
    monkeypatch.setattr(draft_train, "target_spec", lambda *_: loaded)
    monkeypatch.setattr(draft_train, "splits", lambda: {"heldout": []})

    def no_training(*_: object) -> None:
        raise AssertionError("the stage data was built: the prompt check came too late")

    monkeypatch.setattr(draft_train, "stage_data", no_training)
    with pytest.raises(PromptTooLong, match=r"eval.prompt_sets 'long' prompt 2 .*eval.max_new"):
        draft_train.run(cfg, cache_dir=tmp_path / "cache", out_dir=tmp_path / "out")
