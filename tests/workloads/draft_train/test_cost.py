"""The work of a draft_train trial's stages (workloads/draft_train/cost.py): which stages a
config runs, what the cache already holds (features, replies, a wsd-fork trunk), and what a
finished trial did by its metrics. A fixed hardware profile, no torch model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.draft_train.config import DraftTrainConfig
from workloads.draft_train.cost import (
    DRAFT_TRAIN_STAGES,
    cached_feature_tokens,
    done_draft_train,
    plan_draft_train,
)
from workloads.protocol import CostContext, CostUnknown
from workloads.roofline.hardware import HardwareProfile
from workloads.roofline.train_cost import target_forward_flops

HW = HardwareProfile(
    name="local-cpu", peak_flops=1e11, bandwidth=2e10, dtype="float32", bytes_per_element=4,
    source="fixed for the test",
)  # fmt: skip


def _cfg(**over: object) -> DraftTrainConfig:
    raw: dict[str, object] = {
        "pretrain": {"tokens": 8192, "seq_len": 256},
        "sft": {"tokens": 4096, "seq_len": 512, "epochs": 2, "responses": "target"},
        "eval": {"num_prompts": 3, "max_new_tokens": 16},
    }
    for key, value in over.items():
        block, field = key.split("__")
        raw.setdefault(block, {})[field] = value  # type: ignore[index]
    return DraftTrainConfig.model_validate(raw)


def _by_stage(works: tuple) -> dict[str, list]:  # type: ignore[type-arg]
    out: dict[str, list] = {}  # type: ignore[type-arg]
    for w in works:
        out.setdefault(w.stage, []).append(w)
    return out


def test_the_stages_of_a_trial_and_their_work() -> None:
    works = _by_stage(plan_draft_train(_cfg(), CostContext(hw=HW)))
    assert set(works) == set(DRAFT_TRAIN_STAGES) - {"checks"}  # no checks during training asked
    (fp,) = works["features_pretrain"]
    assert fp.units == 8192 and fp.shared and fp.cached == 0
    assert fp.ideal_s == pytest.approx(target_forward_flops_smol(8192, 256) / HW.peak_flops)
    (sft,) = works["sft"]
    assert sft.units == 4096 * 2  # epochs counted
    (regen,) = works["regenerate"]
    assert regen.unit == "chats" and regen.kind == "decode" and regen.units == pytest.approx(16)
    assert len(works["eval"]) == 2  # tree decoding and the greedy reference (shared)
    assert all(w.ideal_s > 0 for ws in works.values() for w in ws)
    none = _by_stage(plan_draft_train(_cfg(pretrain__tokens=0, sft__responses="dataset"),
                                      CostContext(hw=HW)))  # fmt: skip
    assert "features_pretrain" not in none and "regenerate" not in none
    assert none["pretrain"][0].units == 0


def target_forward_flops_smol(tokens: int, seq_len: int) -> float:
    from workloads.roofline import load_model_shape

    return target_forward_flops(load_model_shape("smollm2-135m"), tokens, seq_len)


def test_online_features_go_into_the_training_stage() -> None:
    cached = _by_stage(plan_draft_train(_cfg(), CostContext(hw=HW)))
    online = _by_stage(plan_draft_train(_cfg(features__mode="online"), CostContext(hw=HW)))
    assert "features_pretrain" not in online and "features_sft" not in online
    extra = online["pretrain"][0].ideal_s - cached["pretrain"][0].ideal_s
    assert extra == pytest.approx(target_forward_flops_smol(8192, 256) / HW.peak_flops)
    # SFT features online are recomputed every epoch
    extra_sft = online["sft"][0].ideal_s - cached["sft"][0].ideal_s
    assert extra_sft == pytest.approx(2 * target_forward_flops_smol(4096, 512) / HW.peak_flops)


def test_the_cache_folder_says_what_is_done(tmp_path: Path) -> None:
    cfg = _cfg()
    from workloads.training.feature_cache import feature_dir

    folder = feature_dir(
        tmp_path, target=cfg.target.model, stage="pretrain", recipe="mix-abc-isolated",
        seq_len=256,
    )  # fmt: skip
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"token_range": [0, 4096]}))
    joined = folder.with_name("pretrain-mix-abc-L256")  # the other packing: not counted
    joined.mkdir()
    (joined / "manifest.json").write_text(json.dumps({"token_range": [0, 99999]}))
    assert cached_feature_tokens(tmp_path, cfg, "pretrain") == 4096
    (tmp_path / "regenerated").mkdir()
    (tmp_path / "regenerated" / "x.jsonl").write_text('{"id": 1}\n' * 7)
    works = _by_stage(plan_draft_train(cfg, CostContext(hw=HW, cache_dir=tmp_path)))
    assert works["features_pretrain"][0].cached == 4096
    assert works["regenerate"][0].cached == 7


def test_a_wsd_fork_trial_trains_its_decay_and_the_trunk_beyond_the_cache(tmp_path: Path) -> None:
    cfg = _cfg(pretrain__schedule="wsd-fork", draft__vocab_tokens=8192)
    works = _by_stage(plan_draft_train(cfg, CostContext(hw=HW, cache_dir=tmp_path)))
    trunk, decay = works["pretrain"]
    # 32 rows, batch 4: 8 steps, 2 of them (0.2) the decay
    assert trunk.shared and trunk.units == 6 * 4 * 256 and trunk.cached == 0
    assert decay.shared is None and decay.units == 2 * 4 * 256
    from workloads.training.stages import trunk_key

    (tmp_path / "trunks" / trunk_key(cfg) / "trunk-step-0000004").mkdir(parents=True)
    (tmp_path / "trunks" / trunk_key(cfg) / "trunk-step-0000007").mkdir()  # beyond the branch
    trunk, _ = _by_stage(plan_draft_train(cfg, CostContext(hw=HW, cache_dir=tmp_path)))["pretrain"]
    assert trunk.cached == 4 * 4 * 256


def test_what_a_finished_trial_did_by_its_metrics() -> None:
    cfg = _cfg()
    m = {
        "features/pretrain_misses": 1.0,
        "features/pretrain_online": 0.0,
        "pretrain.tokens_trained": 8192.0,
        "sft.tokens_trained": 8192.0,
        "sft.regen_generated": 10.0,
        "eval.tokens": 96.0,
        "eval.prompts": 6.0,  # 3 a set, 2 sets
        "acceptance_length": 1.5,
        "wall_s/eval": 10.0,
        "tokens_per_s/speculative": 96.0 / 6.0,  # 6 s decoding: 4 s of greedy references
        "tokens_per_s/greedy": 96.0 / 8.0,  # that took 8 s: half of them computed here
    }
    done = done_draft_train(cfg, m, HW)
    assert done["features_pretrain"] == pytest.approx(
        target_forward_flops_smol(16 * 256, 256) / HW.peak_flops  # one chunk of 16 rows
    )
    plan = _by_stage(plan_draft_train(cfg, CostContext(hw=HW, tau=1.5)))
    assert done["pretrain"] == pytest.approx(plan["pretrain"][0].ideal_s)
    assert done["regenerate"] == pytest.approx(plan["regenerate"][0].ideal_of(10))
    spec_part, greedy = plan["eval"]
    assert done["eval"] == pytest.approx(spec_part.ideal_s + 0.5 * greedy.ideal_s)


def test_an_unknown_target_shape_is_unknown(tmp_path: Path) -> None:
    cfg = _cfg(target__model=str(tmp_path / "no-such-model"))
    with pytest.raises(CostUnknown, match="not known here"):
        plan_draft_train(cfg, CostContext(hw=HW))


def test_how_trials_at_once_share_the_work() -> None:
    """Feature chunks and batches of replies are split between trials building them at once
    (a lock per chunk or batch, taken without waiting), replies in whole batches with one batch
    of look-ahead; a wsd-fork trunk and the greedy references are waited for (one lock)."""
    works = _by_stage(plan_draft_train(_cfg(sft__tokens=5000), CostContext(hw=HW)))
    assert works["features_pretrain"][0].split and works["features_sft"][0].split
    (regen,) = works["regenerate"]
    assert regen.split and regen.lookahead == 16 and regen.units == 32  # 19.5 chats: 2 batches
    spec_part, greedy = works["eval"]
    assert greedy.shared and not greedy.split and spec_part.shared is None
    wsd = _cfg(pretrain__schedule="wsd-fork", draft__vocab_tokens=8192)
    fork = _by_stage(plan_draft_train(wsd, CostContext(hw=HW)))
    trunk, _ = fork["pretrain"]
    assert trunk.shared and not trunk.split


def test_the_prompt_sets_of_the_acceptance_lengths(tmp_path: Path) -> None:
    from workloads.draft_train.cost import DRAFT_TRAIN_COST

    folder = tmp_path / "bench"
    folder.mkdir()
    for stem in ("sum", "humaneval", "alpaca"):
        (folder / f"{stem}.jsonl").write_text('{"turns": ["hi"]}\n')
    cfg = _cfg(eval__prompt_sets=["humaneval", "sharegpt", str(folder)])
    assert DRAFT_TRAIN_COST.tau_sets(cfg) == (
        "humaneval", "sharegpt", "alpaca", "bench/humaneval", "sum"
    )  # fmt: skip
    assert DRAFT_TRAIN_COST.tau_sets(_cfg(eval__prompt_sets=folder)) == (
        "alpaca", "humaneval", "sum"
    )  # fmt: skip
    other = _cfg(eval__prompt_sets=["sharegpt"])
    assert DRAFT_TRAIN_COST.tau_group(other) == DRAFT_TRAIN_COST.tau_group(cfg)  # sets apart


def test_only_the_trials_own_reply_recipe_counts_as_cached(tmp_path: Path) -> None:
    """The replies a trial would regenerate are cached only in the file of its recipe (engine,
    temperature, cap, target, dtype), told apart by the ``.recipe.json`` each cache writes;
    another recipe's replies (here: the AR loop's for a vLLM trial) count for nothing."""
    from workloads.draft_train.cost import regen_recipe
    from workloads.training.regenerate import RegenSettings, recipe_of
    from workloads.training.stage_data import regen_target_key

    cfg = _cfg(sft__regen_engine="vllm", sft__regen_temperature=0.3)
    cap = cfg.sft.regen_reply_tokens
    settings = RegenSettings(max_new_tokens=cap, temperature=0.3, engine="vllm",
                             max_prompt_tokens=cfg.sft.seq_len - cap)  # fmt: skip
    # what the cache writes is what the cost model looks for (the two are written apart)
    assert recipe_of(regen_target_key(cfg), cfg.target.dtype, settings) == regen_recipe(cfg)
    folder = tmp_path / "regenerated"
    folder.mkdir()
    engine = _cfg(sft__regen_temperature=0.3)
    for name, recipe, chats in (("a", regen_recipe(engine), 48), ("b", regen_recipe(cfg), 16)):
        (folder / f"{name}.recipe.json").write_text(json.dumps(recipe))
        (folder / f"{name}.jsonl").write_text('{"id": 1}\n' * chats)
    vllm, ar = (
        _by_stage(plan_draft_train(c, CostContext(hw=HW, cache_dir=tmp_path)))["regenerate"][0]
        for c in (cfg, engine)
    )
    assert vllm.cached == 16 and ar.cached == 48
    assert vllm.shared != ar.shared  # trials of the two never share replies
    assert "vLLM server" in vllm.note
    greedy = _by_stage(plan_draft_train(_cfg(), CostContext(hw=HW, cache_dir=tmp_path)))
    assert greedy["regenerate"][0].cached == 0  # neither file is its recipe


def test_checks_during_training_are_counted_per_stage_and_from_the_metrics() -> None:
    cfg = _cfg(eval__during_training_every=3000, eval__during_training_prompts=2)
    (checks,) = _by_stage(plan_draft_train(cfg, CostContext(hw=HW)))["checks"]
    # pretrain 8,192 tokens: 2 multiples of 3,000 and the end; sft 8,192 trained alike: 6 checks
    # of 2 prompts in each of the 2 default sets
    assert checks.units == 6 * 2 * 2 and checks.unit == "prompts" and checks.ideal_s > 0
    (ev, _) = _by_stage(plan_draft_train(cfg, CostContext(hw=HW)))["eval"]
    assert checks.ideal_s == pytest.approx(ev.ideal_s * 24 / ev.units)
    m = {"pretrain.acceptance_checks": 3.0, "sft.acceptance_checks": 3.0,
         "acceptance_length": 1.0}  # fmt: skip
    assert done_draft_train(cfg, m, HW)["checks"] == pytest.approx(checks.ideal_s)
    assert "checks" not in done_draft_train(_cfg(), {"acceptance_length": 1.0}, HW)


def test_a_fused_draft_counts_only_the_features_of_its_own_layers(tmp_path: Path) -> None:
    from workloads.training.feature_cache import feature_dir

    def folder(recipe: str, tokens: int) -> None:
        f = feature_dir(tmp_path, target="smollm2-135m-instruct", stage="pretrain",
                        recipe=recipe, seq_len=256)  # fmt: skip
        f.mkdir(parents=True)
        (f / "manifest.json").write_text(json.dumps({"token_range": [0, tokens]}))

    folder("mix-abc-isolated", 4096)  # the last layer only
    folder("mix-abc-isolated-F2.15.27", 8192)  # EAGLE-3's default layers of SmolLM2
    folder("mix-abc-isolated-F1.2", 12288)  # other layers
    plain, fused = _cfg(), _cfg(draft__fusion="eagle3")
    assert cached_feature_tokens(tmp_path, plain, "pretrain") == 4096
    assert cached_feature_tokens(tmp_path, fused, "pretrain") == 8192
    other = _cfg(draft__fusion="eagle3", draft__fusion_layers=[2, 1])  # sorted: F1.2
    assert cached_feature_tokens(tmp_path, other, "pretrain") == 12288
    (pf,) = _by_stage(plan_draft_train(plain, CostContext(hw=HW)))["features_pretrain"]
    (ff,) = _by_stage(plan_draft_train(fused, CostContext(hw=HW)))["features_pretrain"]
    assert pf.shared != ff.shared  # a fused draft never waits on the plain features
