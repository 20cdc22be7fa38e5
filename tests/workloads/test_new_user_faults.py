"""What a new user tripped over (issue 23, "Faults found ..."), each refused at submit by a
registry preflight naming its field (so the spec's line), with a fix; each with its passing twin.

The checks run on real files in tmp_path and the builtin target's real tokenizer (read from its
GGUF once, saved once per module, then copied into each test's cache).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from workloads.checks import check_bench_prompts, check_targets
from workloads.config import ConfigError
from workloads.decode_bench.checks import check_decode
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.draft_train.checks import (
    check_corpora,
    check_eval_prompts,
    check_feature_disks,
    check_prompt_sets,
    check_sft_budgets,
    check_tree_vocab,
)
from workloads.draft_train.config import DraftTrainConfig
from workloads.models.target_source import DEFAULT_TARGET, looks_like_path

TEXT = "The draft model predicts the target's next hidden state. "


@pytest.fixture(scope="module")
def saved_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The builtin tokenizer saved as a trial leaves it (``<cache>/tokenizers/<target>``), from
    the GGUF read that a check with an empty cache makes too (once per process)."""
    from workloads.models.target import _gguf_tokenizer

    out = tmp_path_factory.mktemp("tok") / "tokenizers" / DEFAULT_TARGET
    _gguf_tokenizer().save_pretrained(out)  # type: ignore[attr-defined]
    return out


def _seeded(cache: Path, saved_tokenizer: Path) -> Path:
    """A cache dir holding the builtin tokenizer only."""
    shutil.copytree(saved_tokenizer, cache / "tokenizers" / DEFAULT_TARGET)
    return cache


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _corpus(tmp_path: Path, records: list[Any] | None = None) -> Path:
    path = tmp_path / "corpus.jsonl"
    records = records or [{"text": TEXT * (i + 1)} for i in range(12)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _train(**fields: Any) -> DraftTrainConfig:
    return DraftTrainConfig.model_validate(fields)


def _on_corpus(corpus: Path | str, tokens: int, **fields: Any) -> DraftTrainConfig:
    pretrain = {"tokens": tokens, "seq_len": 64, "corpus": [{"source": str(corpus)}]}
    return _train(pretrain=pretrain, **fields)


def _preflight(spec: Path, run_root: Path) -> tuple[str, str]:
    """The submit's preflight (orchestrator/driving/preflight.py): (the spec line it names,
    the message)."""
    from orchestrator.driving import preflight
    from orchestrator.errors import SpecError
    from orchestrator.spec.grid import expand
    from orchestrator.spec.sweep import load_spec

    sweep = load_spec(spec)
    with pytest.raises(SpecError) as info:
        preflight.preflight(spec, sweep, [t.config for t in expand(sweep)], run_root)
    msg = str(info.value)
    line = int(msg.split(f"{spec}:", 1)[1].split(":", 1)[0])
    return spec.read_text().splitlines()[line - 1].strip(), msg


def _spec(tmp_path: Path, base: str, workload: str = "draft_train") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nworkload: {workload}\nbase:\n{base}")
    return path


# -- 1, 2: a dry run stops where a submit stops ----------------------------------------------


def test_the_checks_a_dry_run_skipped_refuse_with_dry_run(tmp_path: Path) -> None:
    """eval.topk over draft.vocab_size and an unknown glob, in the dry-run mode of the checks."""
    with pytest.raises(ConfigError) as err:
        cfg = _train(draft={"vocab_size": 4}, eval={"topk": 8})
        check_tree_vocab([cfg], tmp_path, dry_run=True)
    assert err.value.field == ("eval", "topk")
    with pytest.raises(ConfigError) as err:
        check_corpora([_on_corpus(tmp_path / "no-*.jsonl", 256)], tmp_path, dry_run=True)
    assert err.value.field == ("pretrain", "corpus") and "matches no corpus file" in str(err.value)


@pytest.mark.parametrize(
    "base",
    [
        "  draft: {vocab_size: 4}\n  eval: {topk: 8}\n",
        "  pretrain: {tokens: 256, corpus: [{source: /no/x-*.jsonl}]}\n",
    ],
    ids=["topk-over-vocab", "unknown-glob"],
)
def test_a_dry_run_refuses_what_a_submit_refuses(tmp_path: Path, base: str) -> None:
    from orchestrator.cli import app

    spec = _spec(tmp_path, base)
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["submit", str(spec), "--dry-run", "--run-root", str(run)])
    assert res.exit_code == 2, res.output
    assert "Fix:" in res.output and "Nothing was run" not in res.output
    assert not run.exists()


# -- 3, 4, 7: the corpus check writes where the trials read, and only when accepted ------------


def test_a_dry_run_corpus_check_writes_nothing(tmp_path: Path) -> None:
    corpus, run = _corpus(tmp_path), tmp_path / "run"
    check_corpora([_on_corpus(corpus, 256)], run, dry_run=True)  # exact: tokenised
    with pytest.raises(ConfigError) as err:
        check_corpora([_on_corpus(corpus, 100_000)], run, dry_run=True)
    assert err.value.field == ("pretrain", "tokens") and "but the corpus holds" in str(err.value)
    assert not run.exists()  # no cache/tokenizers, no cache/tokens


def test_the_corpus_check_tokenises_into_the_trials_cache_dir(
    tmp_path: Path, saved_tokenizer: Path
) -> None:
    from transformers import AutoTokenizer

    from workloads.data.shards import WORK, corpus_rows
    from workloads.training.features import tokenizer_fingerprint

    corpus, run = _corpus(tmp_path), tmp_path / "run"
    cache = _seeded(tmp_path / "elsewhere", saved_tokenizer)  # --cache-dir
    cfg = _on_corpus(corpus, 256)
    check_corpora([cfg], run, cache_dir=cache)
    assert not run.exists() and not list(cache.glob(".corpus-check-*"))
    assert len(list((cache / "tokens").glob("mix-*/mix.json"))) == 1
    before = _tree(cache)
    check_corpora([cfg], run, cache_dir=cache, dry_run=True)  # read from the cache
    assert _tree(cache) == before
    tok = AutoTokenizer.from_pretrained(cache / "tokenizers" / DEFAULT_TARGET)
    docs = WORK.documents
    assert cfg.pretrain.corpus is not None
    rows = corpus_rows(
        cfg.pretrain.corpus, tok, tokenizer_fp=tokenizer_fingerprint(tok), cache_dir=cache,
        seq_len=64, packing="isolated", n_rows=4, repeat=False,
    )  # fmt: skip
    assert rows.rows == 4 and WORK.documents == docs  # the trial tokenises nothing again


def test_a_record_of_the_wrong_type_is_blamed_on_the_corpus_and_leaves_nothing(
    tmp_path: Path, saved_tokenizer: Path
) -> None:
    records: list[Any] = [{"text": TEXT}, {"text": TEXT * 2}, {"text": 5}, {"text": TEXT}]
    corpus, run = _corpus(tmp_path, records), tmp_path / "run"
    _seeded(run / "cache", saved_tokenizer)
    before = _tree(run)
    spec = _spec(tmp_path, f"  pretrain:\n    tokens: 256\n    corpus: [{{source: {corpus}}}]\n")
    line, msg = _preflight(spec, run)
    assert line.startswith("corpus:"), msg
    assert "record 3: field 'text' holds a int, not text" in msg and "Fix: " in msg
    assert _tree(run) == before  # no shards, no staging folder, no tokenizer copy


# -- 5: prompt sets ----------------------------------------------------------------------------


def test_unknown_eval_prompt_sets_are_refused_at_submit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        cfg = _train(eval={"prompt_sets": ["humaneval", "mtbench"]})
        check_prompt_sets([cfg], tmp_path)
    assert err.value.field == ("eval", "prompt_sets")
    msg = str(err.value)
    assert "unknown prompt sets ['mtbench']" in msg and "['humaneval', 'sharegpt']" in msg
    with pytest.raises(ConfigError, match="is not a directory"):
        check_prompt_sets([_train(eval={"prompt_sets": str(tmp_path / "no")})], tmp_path)
    check_prompt_sets([_train(), _train(eval={"prompt_sets": ["sharegpt"]})], tmp_path)


def test_a_prompt_directory_written_as_a_list_is_that_directory(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text('{"turns": ["Write a haiku."]}\n')
    cfg = DecodeBenchConfig.model_validate({"prompts": {"prompt_sets": [str(tmp_path)]}})
    assert cfg.prompts.prompt_sets == tmp_path
    check_decode([cfg], tmp_path)
    assert _train(eval={"prompt_sets": [str(tmp_path)]}).eval.prompt_sets == tmp_path


def test_a_list_may_mix_builtin_names_and_directories(tmp_path: Path) -> None:
    """Issue 24: ``[humaneval, sharegpt, <dir>]`` is kept as written and checked at submit; a
    missing directory in it is refused, naming the field."""
    (tmp_path / "q.jsonl").write_text('{"turns": ["Write a haiku."]}\n')
    mixed = ["humaneval", "sharegpt", str(tmp_path)]
    cfg = DecodeBenchConfig.model_validate({"prompts": {"prompt_sets": mixed}})
    assert cfg.prompts.prompt_sets == mixed
    check_decode([cfg], tmp_path)
    check_prompt_sets([_train(eval={"prompt_sets": mixed})], tmp_path)
    with pytest.raises(ConfigError, match="eval.prompt_sets: .* is not a directory") as err:
        bad = _train(eval={"prompt_sets": ["humaneval", str(tmp_path / "no")]})
        check_prompt_sets([bad], tmp_path)
    assert err.value.field == ("eval", "prompt_sets")


# -- 8: prompts longer than the target's positions ---------------------------------------------


def _long_prompts(tmp_path: Path, words: int) -> Path:
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "long.jsonl").write_text(
        json.dumps({"turns": ["Summarise this."]}) + "\n"
        + json.dumps({"turns": [" ".join(["word"] * words)]}) + "\n"
    )  # fmt: skip
    return folder


def test_a_prompt_past_the_targets_positions_is_refused_at_submit(
    tmp_path: Path, saved_tokenizer: Path
) -> None:
    folder = _long_prompts(tmp_path, 9_000)
    cache = _seeded(tmp_path / "cache", saved_tokenizer)
    cfg = _train(eval={"prompt_sets": str(folder), "num_prompts": 2})
    with pytest.raises(ConfigError) as err:
        check_eval_prompts([cfg], tmp_path, cache_dir=cache)
    assert err.value.field == ("eval", "prompt_sets")
    msg = str(err.value)
    assert "eval.prompt_sets 'long' prompt 2 is 9," in msg and "more than the 8,192" in msg
    assert "Fix: leave out or shorten prompts over 8,141 tokens" in msg  # 8192 - 48 - 3
    bench = DecodeBenchConfig.model_validate({"prompts": {"prompt_sets": str(folder)}})
    with pytest.raises(ConfigError) as err:
        check_bench_prompts([bench], tmp_path, cache_dir=cache)
    assert err.value.field == ("prompts", "prompt_sets")
    assert "decode.max_new_tokens" in str(err.value)
    short = _train(eval={"prompt_sets": str(folder), "num_prompts": 1})  # the first prompt only
    check_eval_prompts([short, _train()], tmp_path, cache_dir=cache)


def test_a_trial_fails_before_decoding_a_prompt_past_its_positions(
    tmp_path: Path, saved_tokenizer: Path
) -> None:
    from transformers import AutoTokenizer

    from tests.workloads.tiny import tiny_draft, tiny_target
    from workloads.data import load_prompt_sets
    from workloads.data.prompts import PromptTooLong
    from workloads.engine.tree_decode import TreeShape
    from workloads.training.evaluation import evaluate

    target, tok = tiny_target(), AutoTokenizer.from_pretrained(saved_tokenizer)  # 256 positions
    sets = load_prompt_sets(_long_prompts(tmp_path, 300), n=2)
    shape = TreeShape(depth=3, topk=2, num_draft_tokens=4)
    with pytest.raises(PromptTooLong, match=r"'long' prompt 2 is 3\d\d tokens .* than the 256"):
        evaluate(
            target, tok, tiny_draft(target), sets, shape=shape, max_new_tokens=8,
            eos_ids=frozenset({0}), cache_dir=tmp_path, target_name="tiny",
        )  # fmt: skip
    assert not (tmp_path / "greedy").exists()  # nothing decoded


# -- 9: a target path that does not exist ------------------------------------------------------


@pytest.mark.parametrize("name", ["/no/such/model", "./models/mine", "~/nope", "a/b/c"])
def test_a_target_path_that_does_not_exist_is_refused(tmp_path: Path, name: str) -> None:
    assert looks_like_path(name)
    with pytest.raises(ConfigError) as err:
        check_targets([_train(target={"model": name})], tmp_path)
    assert err.value.field == ("target", "model")
    assert f"target.model {name!r} looks like a local path, and nothing is there. Fix:" in str(
        err.value
    )


def test_hub_ids_and_existing_folders_are_not_paths(tmp_path: Path) -> None:
    assert not looks_like_path("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert not looks_like_path("gpt2")
    (tmp_path / "config.json").write_text("{}")
    check_targets([_train(target={"model": str(tmp_path)})], tmp_path)


# -- 10: SFT budgets against the split ---------------------------------------------------------


def test_an_sft_budget_over_the_split_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        check_sft_budgets([_train(sft={"tokens": 10**9}), _train()], tmp_path)
    assert err.value.field == ("sft", "tokens")
    msg = str(err.value)
    assert "sft.tokens 1,000,000,000 needs 1,000,000,000 tokens" in msg
    assert "SFT split (5,369 ShareGPT conversations with the target's replies" in msg
    assert "holds well under" in msg and "Fix: sft.tokens well under" in msg
    check_sft_budgets([_train(), _train(sft={"tokens": 1_000_000})], tmp_path)


# -- 11: free disk for cached features ---------------------------------------------------------


def test_cached_features_larger_than_the_free_disk_are_refused(tmp_path: Path) -> None:
    huge = {"pretrain": {"tokens": 10**13}}
    with pytest.raises(ConfigError) as err:
        check_feature_disks(
            [_train(features={"mode": "cached"}, **huge)], tmp_path, cache_dir=tmp_path / "c"
        )
    assert err.value.field == ("features", "mode")
    msg = str(err.value)
    assert "TiB not cached yet under" in msg and " free. Fix: features.mode: online" in msg
    assert "--cache-dir on a disk with room" in msg
    online = _train(features={"mode": "online"}, **huge)  # and auto goes online at this size
    check_feature_disks([online, _train(**huge), _train()], tmp_path)
    assert not (tmp_path / "c").exists()


def test_a_dry_run_with_a_local_corpus_writes_nothing(tmp_path: Path) -> None:
    """Through the CLI: the corpus is tokenised for its exact size, and no cache is left."""
    from orchestrator.cli import app

    corpus = _corpus(tmp_path)
    spec = _spec(
        tmp_path, f"  pretrain: {{tokens: 256, seq_len: 64, corpus: [{{source: {corpus}}}]}}\n"
    )
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["submit", str(spec), "--dry-run", "--run-root", str(run)])
    assert res.exit_code == 0, res.output
    assert "Nothing was run or written" in res.output
    assert not run.exists()


@pytest.mark.parametrize("sets", [["humaneval", "humaneval"], ["sharegpt", "/tmp/x", "/tmp/x"]])
def test_a_prompt_set_listed_twice_is_refused(sets: list[str]) -> None:
    """A new user's `[humaneval, humaneval]` ran the same prompts twice under one name."""
    from workloads.draft_train.config import EvalConfig

    with pytest.raises(ValueError, match="twice.*Fix: list each set or directory once"):
        EvalConfig(prompt_sets=sets)
