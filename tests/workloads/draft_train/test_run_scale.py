"""Paper-scale settings through a whole draft_train trial on the CPU: a random-weight bfloat16
target, bf16 training, a local jsonl corpus and online features (nothing downloaded).

And a trial's corpus resumes where it was: rows come from the memory-mapped token stream by
position, so a retried stage trains on exactly the rows an uninterrupted one would.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import pickle
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from workloads.data.shards import corpus_rows
from workloads.draft_train import run as draft_train
from workloads.draft_train.config import CorpusSource, DraftTrainConfig
from workloads.models.draft import DraftArch, DraftModel
from workloads.models.target import _builtin_tokenizer
from workloads.models.target_source import TOKENIZER_VOCAB
from workloads.training.features import tokenizer_fingerprint
from workloads.training.loop import StageLog, StageSettings, make_optimizer, train_stage
from workloads.training.online_features import OnlineFeatures, TargetSpec


@pytest.fixture
def one_thread():  # noqa: ANN201 - a generator fixture
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny_target(folder: Path) -> Path:
    LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=TOKENIZER_VOCAB, max_position_embeddings=512,
        tie_word_embeddings=True,
    ).save_pretrained(folder)  # fmt: skip
    return folder


def _corpus(path: Path) -> Path:
    """Real text: this repository's Python sources, one document each."""
    root = Path(__file__).resolve().parents[3] / "workloads"
    with path.open("w") as f:
        for p in sorted(root.glob("*.py")):
            f.write(json.dumps({"text": p.read_text()}) + "\n")
    return path


def test_a_bf16_random_target_trial_on_a_local_corpus_online(
    tmp_path: Path, cache_dir: Path, one_thread: None
) -> None:
    cfg = DraftTrainConfig.model_validate(
        {
            "device": "cpu",
            "features": {"mode": "online"},
            "target": {"model": str(_tiny_target(tmp_path / "tiny")), "weights": "random",
                       "dtype": "bfloat16"},
            "pretrain": {"tokens": 2048, "seq_len": 128,
                         "corpus": [{"source": str(_corpus(tmp_path / "code.jsonl"))}]},
            "sft": {"tokens": 0},
            "draft": {"vocab_size": 512},
            "train": {"batch_size": 4, "precision": "bf16", "checkpoint_every": 2,
                      "keep_checkpoints": 1},
            "eval": {"prompt_sets": ["humaneval"], "num_prompts": 2, "max_new_tokens": 12,
                     "depth": 2, "topk": 2, "num_draft_tokens": 4},
        }
    )  # fmt: skip
    out = tmp_path / "trial"
    res = draft_train.run(cfg, cache_dir=cache_dir, out_dir=out)
    m = res.metrics
    assert m["target.random_weights"] == 1.0
    assert m["features/pretrain_online"] == 1.0
    assert "features/pretrain_misses" not in m  # nothing cached on disk
    assert not any((cache_dir / "features").glob("*tiny*"))
    assert m["pretrain.steps"] == 4 and m["pretrain.tokens_seen"] == 2048
    losses = res.series["pretrain/loss"]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    # greedy equality with the bf16 target, near-ties excused by the bf16 rule and counted
    assert m["mismatches"] == 0, res.metrics
    assert m["near_ties"] >= 0 and m["eval.tokens"] > 0
    assert 1.0 <= m["acceptance_length"] <= 4.0
    with gzip.open(out / "series.json.gz", "rt") as f:
        assert json.load(f)["pretrain/loss"] == losses  # 4 points: nothing averaged
    assert out / "series.json.gz" in res.artifact_paths


def test_a_retried_stage_continues_the_corpus_where_it_was(
    tmp_path: Path, cache_dir: Path, one_thread: None
) -> None:
    tokenizer = _builtin_tokenizer(cache_dir)
    rows = corpus_rows(
        [CorpusSource(source=str(_corpus(tmp_path / "code.jsonl")))], tokenizer,
        tokenizer_fp=tokenizer_fingerprint(tokenizer), cache_dir=cache_dir, seq_len=64,
        packing="isolated", n_rows=24, repeat=False,
    )  # fmt: skip
    spec = TargetSpec(name=str(_tiny_target(tmp_path / "tiny")), cache_dir=cache_dir,
                      weights="random", seed=3)  # fmt: skip
    s = StageSettings(epochs=1, batch_size=4, lr=1e-3, warmup_steps=1, weight_decay=0.0,
                      grad_clip=0.5, w_reg=1.0, w_cls=0.1, seed=0, order="stream")  # fmt: skip

    def fresh() -> DraftModel:
        target = spec.load()
        embed, head = target.frozen_weights()
        torch.manual_seed(0)
        arch = DraftArch.from_target(target.model.config, layers=1, output_norm=True)
        return DraftModel(arch, embed_weight=embed, lm_head_weight=head)

    whole = train_stage(fresh(), OnlineFeatures(rows, spec), s)
    assert len(whole.loss) == 6
    first = fresh()
    opt = make_optimizer(first, s)
    log = train_stage(first, OnlineFeatures(rows, spec), s, opt=opt, stop=3)
    # the retry: another process's objects (as a checkpoint gives them), the same positions
    weights, opt_state, log = copy.deepcopy((first.trainable_state(), opt.state_dict(), log))
    retry = fresh()
    retry.load_state_dict(weights, strict=False)
    opt2 = make_optimizer(retry, s)
    opt2.load_state_dict(opt_state)
    feats = pickle.loads(pickle.dumps(OnlineFeatures(rows, spec)))
    done: StageLog = train_stage(retry, feats, s, opt=opt2, log=log, start=3)
    assert done.loss == whole.loss and done.tokens_seen == whole.tokens_seen


def test_an_sft_only_trial_with_a_corpus_reads_no_corpus(
    tmp_path: Path, cache_dir: Path, one_thread: None
) -> None:
    """pretrain.tokens 0 (the grid's SFT-only baseline) with pretrain.corpus: no pretraining rows
    and nothing tokenised (it used to ask the corpus for 0 rows and fail)."""
    from workloads.training.stage_data import stage_data, target_spec

    for mode in ("online", "cached"):
        cfg = DraftTrainConfig.model_validate(
            {"device": "cpu", "features": {"mode": mode},
             "target": {"model": str(_tiny_target(tmp_path / "tiny")), "weights": "random"},
             "pretrain": {"tokens": 0, "corpus": [{"source": str(tmp_path / "none.jsonl")}]}}
        )  # fmt: skip
        spec = target_spec(cfg, cache_dir, torch.device("cpu"))
        data = stage_data(cfg, spec.load(), spec, cache_dir, "pretrain", 0, lambda _: None)
        assert data.feats.rows == 0 and data.feats.tokens == 0
