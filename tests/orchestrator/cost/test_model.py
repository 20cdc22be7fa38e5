"""Predicted trial costs (orchestrator/cost/model.py) on a hand-built results DB: stage
seconds fitted linear in their work, with R² and the trials used; the basis of every figure;
trials of other hardware (or none recorded) not used, and said; unknown where there is no model;
a sweep's shared work counted once; wall time, GPU-hours, hardware names."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cost import model as costing
from orchestrator.cost.hardware import check_hardware_name, slots_for
from orchestrator.cost.schedule import Step, simulate, wall_time
from orchestrator.errors import OrchestratorError
from orchestrator.spec.grid import expand
from orchestrator.spec.sweep import SweepSpec, load_spec
from orchestrator.store.results import ResultsStore
from workloads.draft_train.cost import DRAFT_TRAIN_COST
from workloads.protocol import CostContext
from workloads.roofline.hardware import HardwareProfile, fingerprint_id, hardware_fingerprint

HW = HardwareProfile(
    name="local-cpu", peak_flops=1e11, bandwidth=2e10, dtype="float32", bytes_per_element=4,
    source="fixed for the test",
)  # fmt: skip
HERE = fingerprint_id(hardware_fingerprint(device="cpu", threads=1))

BASE = """base:
  pretrain: {seq_len: 128}
  sft: {tokens: 512, seq_len: 128, epochs: 1, responses: dataset}
  eval: {num_prompts: 1, max_new_tokens: 8, depth: 2, topk: 2, num_draft_tokens: 4}
resources: {num_cpus: 1}
"""


def _spec(
    tmp_path: Path, name: str, budgets: list[int], workload: str = "draft_train"
) -> SweepSpec:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nworkload: {workload}\ngrid:\n  pretrain.tokens: {budgets}\n" + BASE
    )
    return load_spec(path)


def _record(
    store: ResultsStore,
    spec: SweepSpec,
    *,
    hw_id: float | None = HERE,
    a: float = 3.0,
    b: float = 2.0,
    setup: float = 5.0,
    extra: dict[str, float] | None = None,
) -> dict[str, float]:
    """Completed trials of ``spec`` whose pretraining took a + b * work seconds (work: its
    seconds at utilisation 1 on HW), SFT 2 x work, and ``setup`` seconds beside the stages."""
    sweep_id = store.upsert_sweep(spec.name, spec.workload, "", f"{spec.name}.yaml")
    trials = expand(spec)
    store.add_trials(
        sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides) for t in trials]
    )
    works = {}
    for t in trials:
        cfg = t.config
        m = {
            "pretrain.tokens_trained": float(cfg.pretrain.tokens),
            "sft.tokens_trained": float(cfg.sft.tokens),
        }
        done = DRAFT_TRAIN_COST.done(cfg, m, HW)
        m["wall_s/pretrain"] = a + b * done["pretrain"]
        m["wall_s/sft"] = 2.0 * done["sft"]
        if hw_id is not None:
            m["hardware.id"] = hw_id
        m.update(extra or {})
        info = store.trial(sweep_id, t.key)
        assert info is not None
        store.mark_running(info.id, None)
        store.log_metrics(info.id, m)
        store.mark_completed(info.id, m["wall_s/pretrain"] + m["wall_s/sft"] + setup)
        works[t.key] = done["pretrain"]
    return works


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    s = ResultsStore(f"sqlite:///{tmp_path / 'results.db'}")
    yield s  # type: ignore[misc]
    s.close()


def test_stage_seconds_are_fitted_linear_in_their_work(tmp_path: Path, store: ResultsStore) -> None:
    _record(store, _spec(tmp_path, "calib", [1024, 2048, 4096, 8192]))
    spec = _spec(tmp_path, "big", [16384])
    pred = costing.predictor(store, spec, profile=HW)
    (trial,) = expand(spec)
    cost = pred(trial.config)
    pre = cost.stage("pretrain")
    assert pre is not None and pre.basis == "calibrated"
    x = DRAFT_TRAIN_COST.done(trial.config, {"pretrain.tokens_trained": 16384.0}, HW)["pretrain"]
    assert pre.seconds == pytest.approx(3.0 + 2.0 * x)
    fit = pred.fits()[next(iter(pred.fits()))]
    assert fit["pretrain"].method == "ols" and fit["pretrain"].n == 4
    assert fit["pretrain"].r2 == pytest.approx(1.0)
    assert "OLS on the work, n=4, R² 1.000" in pre.detail
    sft = cost.stage("sft")  # one SFT budget in all: a ratio through the origin
    assert sft is not None and sft.basis == "calibrated" and fit["sft"].method == "ratio"
    assert fit["sft"].b == pytest.approx(2.0)
    setup = cost.stage(costing.SETUP)
    assert setup is not None and setup.seconds == pytest.approx(5.0) and setup.basis == "calibrated"
    ev = cost.stage("eval")  # no trial recorded its evaluation: modelled
    assert ev is not None and ev.basis == "modelled" and ev.seconds is not None and ev.seconds > 0
    assert cost.basis == "calibrated+modelled"
    assert cost.total_s == pytest.approx(sum(s.seconds or 0 for s in cost.stages))
    assert pred.matched() == 4


def test_trials_of_other_hardware_or_none_are_not_used_and_said(
    tmp_path: Path, store: ResultsStore
) -> None:
    _record(store, _spec(tmp_path, "elsewhere", [1024, 2048, 4096]), hw_id=HERE + 1)
    _record(store, _spec(tmp_path, "unmarked", [1024, 2048, 4096, 8192]), hw_id=None)
    spec = _spec(tmp_path, "big", [16384])
    pred = costing.predictor(store, spec, profile=HW)
    cost = pred(expand(spec)[0].config)
    assert cost.basis == "modelled" and pred.matched() == 0
    assert costing.SETUP not in {s.stage for s in cost.stages}
    notes = " ".join(pred.notes)
    assert "4 completed trials in the results DB record no hardware" in notes
    assert "3 completed trials ran on other hardware" in notes
    assert "start-up" in notes and "acceptance length 1" in notes
    anyhw = costing.predictor(store, spec, profile=HW, match_hardware=False)
    assert anyhw(expand(spec)[0].config).basis == "calibrated+modelled"
    assert anyhw.matched() == 7 and "hardware not matched" in " ".join(anyhw.notes)


def test_unknown_where_nothing_models_the_trial(tmp_path: Path, store: ResultsStore) -> None:
    path = tmp_path / "sleep.yaml"
    path.write_text("name: s\nworkload: sleep\ngrid:\n  seconds: [0.1]\n")
    sleep = load_spec(path)
    cost = costing.predictor(store, sleep, profile=HW)(expand(sleep)[0].config)
    assert cost.total_s is None and cost.basis == "unknown"
    assert "no cost model for workload sleep" in cost.stages[0].detail
    unknown = _spec(tmp_path, "hub", [1024])
    cfg = expand(unknown)[0].config.model_copy(
        update={"target": unknown.config_model.model_validate({}).target.model_copy(
            update={"model": str(tmp_path / "no-such-model")})}
    )  # fmt: skip
    cost = costing.predictor(None, unknown, profile=HW)(cfg)
    assert cost.total_s is None and {s.basis for s in cost.stages} == {"unknown"}
    assert "not known here" in cost.stages[0].detail


def _slots(pred: costing.Predictor, n: int) -> costing.Predictor:
    """``pred`` with ``n`` trials at once (whatever this machine's cores)."""
    pred.hardware = dataclasses.replace(pred.hardware, slots=n)
    return pred


def test_a_sweep_counts_its_shared_work_once(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "nested", [4096, 8192])
    pred = _slots(costing.predictor(None, spec, profile=HW), 1)
    small, large = (t.config for t in expand(spec))
    alone = pred(large).stage("features_pretrain")
    sweep = pred.sweep([("a", small), ("b", large)])
    after = sweep.trials[1][1].stage("features_pretrain")
    assert alone is not None and after is not None and alone.seconds and after.seconds
    assert after.seconds == pytest.approx(alone.seconds / 2)  # only the tokens beyond 4096
    again = pred.sweep([("a", large), ("b", small)]).trials[1][1].stage("features_pretrain")
    assert again is not None and again.seconds == 0 and "done already" in again.detail
    assert sweep.serial_s == pytest.approx(sum(c.total_s or 0 for _, c in sweep.trials))
    assert sweep.wall_s == pytest.approx(sweep.serial_s)  # one at a time
    assert sweep.gpu_hours is None and sweep.hardware.kind == "cpu"
    # at once, the two split the first 4096 tokens, then the larger builds the rest alone
    both = _slots(pred, 2).sweep([("a", small), ("b", large)])
    first, second = (c.stage("features_pretrain") for _, c in both.trials)
    assert first is not None and second is not None and alone.seconds
    assert first.seconds == pytest.approx(alone.seconds / 4)
    assert second.seconds == pytest.approx(alone.seconds * 3 / 4)
    assert "split with 1 trial" in first.detail
    assert both.wall_s is not None and both.serial_s is not None
    assert both.wall_s < both.serial_s
    # the simpler rule (benchmarks/cost_bench.py): each priced alone, in order, then packed
    apart = _slots(pred, 2).sweep_apart([("a", small), ("b", large)])
    one, two = (c.stage("features_pretrain") for _, c in apart.trials)
    assert one is not None and two is not None
    assert one.seconds == pytest.approx(alone.seconds / 2) and two.seconds == after.seconds
    assert apart.wall_s == pytest.approx(max(c.total_s or 0 for _, c in apart.trials))


def _two_seeds(tmp_path: Path, store: ResultsStore, extra: str = "") -> tuple[SweepSpec, Any]:
    """A calibrated spec of one budget and two seeds, and its trials' configs."""
    _record(store, _spec(tmp_path, "calib", [1024, 2048, 4096]))
    path = tmp_path / "seeds.yaml"
    path.write_text(
        "name: seeds\nworkload: draft_train\nseeds: [0, 1]\n"
        "grid:\n  pretrain.tokens: [4096]\n" + BASE + extra
    )
    spec = load_spec(path)
    return spec, [(t.key, t.config) for t in expand(spec)]


def test_trials_at_once_both_pay_a_shared_build_and_sequential_ones_do_not(
    tmp_path: Path, store: ResultsStore
) -> None:
    """The wait rule: two seeds of a budget running at once both spend the greedy references'
    seconds in their evaluation (one computes each reference while the other waits for it) and
    split the features (a lock per chunk); one after the other, the second finds them built."""
    spec, trials = _two_seeds(tmp_path, store)
    pred = _slots(costing.predictor(store, spec, profile=HW), 2)
    alone = pred(trials[0][1])
    a_eval, a_feat = alone.stage("eval"), alone.stage("features_pretrain")
    assert a_eval is not None and a_feat is not None and a_eval.seconds and a_feat.seconds
    par = pred.sweep(trials)
    (_, p0), (_, p1) = par.trials
    for cost in (p0, p1):
        ev, feat = cost.stage("eval"), cost.stage("features_pretrain")
        assert ev is not None and feat is not None
        assert ev.seconds == pytest.approx(a_eval.seconds)  # both pay the references
        assert feat.seconds == pytest.approx(a_feat.seconds / 2)  # the chunks split
    ev1 = p1.stage("eval")
    assert ev1 is not None and "waiting for another trial's greedy" in ev1.detail
    assert p0.total_s == pytest.approx(p1.total_s)  # seeds of a budget cost alike
    assert par.wall_s == pytest.approx(p0.total_s)
    assert par.serial_s == pytest.approx((p0.total_s or 0) + (p1.total_s or 0))

    seq = _slots(costing.predictor(store, spec, profile=HW), 1).sweep(trials)
    (_, s0), (_, s1) = seq.trials
    ev0, ev1 = s0.stage("eval"), s1.stage("eval")
    f1 = s1.stage("features_pretrain")
    assert ev0 is not None and ev1 is not None and f1 is not None
    assert ev0.seconds == pytest.approx(a_eval.seconds)
    util = pred.utilisation(trials[1][1])
    assert util is not None
    spec_part, _greedy = (w for w in DRAFT_TRAIN_COST.plan(trials[1][1], CostContext(hw=HW))
                          if w.stage == "eval")  # fmt: skip
    assert ev1.seconds == pytest.approx(spec_part.ideal_s / util.share("decode"))
    assert f1.seconds == 0 and "done already" in f1.detail
    assert seq.wall_s == pytest.approx(seq.serial_s)


def test_replies_built_together_cost_one_batch_more(tmp_path: Path, store: ResultsStore) -> None:
    """Regenerated replies are split too, and the trial that waits for the other's last batch
    generates the next one meanwhile (regenerate.py's look-ahead): 16 chats more in all."""
    spec, trials = _two_seeds(tmp_path, store, "")
    path = tmp_path / "regen.yaml"
    path.write_text(path.with_name("seeds.yaml").read_text().replace("dataset", "target"))
    spec = load_spec(path)
    trials = [(t.key, t.config) for t in expand(spec)]
    pred = _slots(costing.predictor(store, spec, profile=HW), 2)
    alone = pred(trials[0][1]).stage("regenerate")
    plan = DRAFT_TRAIN_COST.plan(trials[0][1], CostContext(hw=HW))
    (regen,) = [w for w in plan if w.stage == "regenerate"]
    assert regen.split and regen.lookahead == 16
    assert alone is not None and alone.seconds
    for _, cost in pred.sweep(trials).trials:
        both = cost.stage("regenerate")
        assert both is not None
        assert both.seconds == pytest.approx(alone.seconds * (regen.units + 16) / regen.units / 2)


def test_the_wait_rule_of_the_schedule() -> None:
    """One lock (a wsd-fork trunk): a trial that needs less waits for the builder to finish;
    one that needs more waits, then builds the rest; a trial after them finds it built."""
    k = "trunk:x"

    def trunk(units: float) -> list[Step]:
        return [Step("pretrain", key=k, units=units, per_unit=1.0),
                Step("pretrain", seconds=2.0)]  # fmt: skip

    start, end, runs = simulate([trunk(10), trunk(5), trunk(15)], 3, {})
    assert end == pytest.approx([12.0, 12.0, 17.0])  # 10 s built; 5 s more by the third
    assert runs[1]["pretrain"].waited == pytest.approx(10.0)
    assert runs[2]["pretrain"].waited == pytest.approx(10.0)
    start, end, runs = simulate([trunk(10), trunk(10)], 1, {k: 4.0})
    assert start == [0.0, 8.0] and end == pytest.approx([8.0, 10.0])  # the cache held 4
    assert runs[1]["pretrain"].touched is False

    def feats(units: float) -> list[Step]:
        return [Step("features", key="f", units=units, per_unit=1.0, split=True)]

    _, end, runs = simulate([feats(8), feats(8), feats(4)], 2, {})
    assert end == pytest.approx([4.0, 4.0, 4.0])  # split in two; the third finds it built
    assert runs[0]["features"].company == 2 and runs[2]["features"].touched is False


def test_the_acceptance_length_of_other_prompt_sets(tmp_path: Path, store: ResultsStore) -> None:
    """Matched trials on other prompt sets: each set's own acceptance length, or their pooled
    one, rather than 1."""
    calib = _spec(tmp_path, "calib", [1024, 2048])
    _record(store, calib, extra={"acceptance_length": 2.0, "acceptance_length/humaneval": 1.5,
                                 "acceptance_length/sharegpt": 2.5})  # fmt: skip

    def note_for(sets: str) -> str:
        path = tmp_path / "other.yaml"
        path.write_text(
            "name: other\nworkload: draft_train\ngrid:\n  pretrain.tokens: [4096]\n"
            + BASE.replace("eval: {", f"eval: {{prompt_sets: {sets}, ")
        )
        spec = load_spec(path)
        pred = costing.predictor(store, spec, profile=HW)
        pred(expand(spec)[0].config)
        return next(n for n in pred.notes if n.startswith("evaluation at"))

    assert note_for("[humaneval, sharegpt]").startswith("evaluation at acceptance length 2:")
    assert "same prompt sets" in note_for("[humaneval, sharegpt]")
    only = note_for("[sharegpt]")
    assert only.startswith("evaluation at acceptance length 2.5:") and "(sharegpt)" in only


def test_wall_time_and_slots() -> None:
    assert wall_time([3.0, 1.0, 2.0], 2) == 3.0
    assert wall_time([3.0, 1.0, 2.0], 1) == 6.0
    assert wall_time([1.0, None], 2) is None
    assert slots_for(1, 0, cpus=2, gpus=0) == 2
    assert slots_for(8, 1, cpus=64, gpus=8) == 8
    assert slots_for(4, 2, cpus=2, gpus=0) == 1


def test_gpu_hours_on_named_hardware(tmp_path: Path) -> None:
    path = tmp_path / "gpu.yaml"
    path.write_text(
        "name: g\nworkload: draft_train\ngrid:\n  pretrain.tokens: [1000000, 2000000]\n"
        "base:\n  target: {model: llama-3-8b, weights: random, dtype: bfloat16}\n"
        "  features: {mode: online}\nresources: {num_cpus: 1, num_gpus: 1}\n"
    )
    spec = load_spec(path)
    pred = costing.predictor(None, spec, hardware="H200-SXM", devices=8)
    cost = pred.sweep([(t.key, t.config) for t in expand(spec)])
    assert cost.hardware.label == "h200" and cost.hardware.slots == 8
    assert cost.serial_s is not None and cost.gpu_hours == pytest.approx(cost.serial_s / 3600)
    assert cost.wall_s == pytest.approx(max(c.total_s or 0 for _, c in cost.trials))
    prof = pred.profile(expand(spec)[0].config)
    assert prof is not None and prof.name == "h200" and prof.dtype == "bfloat16"


def test_hardware_names() -> None:
    assert check_hardware_name("H200-SXM") == "h200"
    assert check_hardware_name("cpu") == "local-cpu"
    with pytest.raises(OrchestratorError, match="Did you mean 'h200'.*Fix: use one of"):
        check_hardware_name("h2000")


def test_the_first_trials_of_a_sweep_start_its_ray_workers(
    tmp_path: Path, store: ResultsStore
) -> None:
    from datetime import UTC, datetime, timedelta

    from orchestrator.store.history import CompletedTrial

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def trial(key: str, start: int, end: int) -> CompletedTrial:
        return CompletedTrial(
            sweep="s", key=key, config={}, wall_s=float(end - start),
            started_at=t0 + timedelta(seconds=start), finished_at=t0 + timedelta(seconds=end),
            metrics={},
        )  # fmt: skip

    # a and b start together on two fresh workers; c and d follow on them
    found = costing._cold_trials([trial("a", 0, 90), trial("b", 1, 95), trial("c", 90, 120),
                                  trial("d", 95, 130)])  # fmt: skip
    assert found == {("s", "a"), ("s", "b")}
    _record(store, _spec(tmp_path, "calib", [1024, 2048, 4096]))
    spec = _spec(tmp_path, "two", [1024, 2048, 4096])
    pred = costing.predictor(store, spec, profile=HW)
    cost = pred.sweep([(t.key, t.config) for t in expand(spec)])
    slots = pred.hardware.slots
    details = [c.stage(costing.SETUP).detail for _, c in cost.trials]  # type: ignore[union-attr]
    assert all("started a Ray worker" in d for d in details[:slots])
    assert all("after the first" in d for d in details[slots:])


def test_a_submit_records_its_prediction_and_the_banner_prints_it(
    tmp_path: Path, store: ResultsStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """service.submit's step after registering the trials: the trials not completed yet are
    predicted, written beside the sweep and told to the listener (the console prints totals)."""
    import json

    from orchestrator.commands.render import SweepConsole
    from orchestrator.driving import service
    from orchestrator.driving.events import CostPredicted
    from orchestrator.driving.runner import register

    spec = _spec(tmp_path, "calib", [1024, 2048, 4096])
    _record(store, spec)  # completed: a resubmit predicts none of them
    more = _spec(tmp_path, "calib", [1024, 2048, 4096, 8192])
    sweep_id, trials = register(store, more, tmp_path / "calib.yaml", "", expand(more))
    events: list[object] = []
    dest = service.Destinations(run_root=tmp_path / "run")
    service._predict_cost(store, more, sweep_id, dest, trials, events.append)
    (event,) = events
    assert isinstance(event, CostPredicted)
    assert [k for k, _ in event.cost.trials] == [trials[-1].key]  # the one not completed
    saved = json.loads((tmp_path / "run" / "calib" / "cost_prediction.json").read_text())
    assert list(saved["trials"]) == [trials[-1].key]
    assert saved["trials"][trials[-1].key]["basis"] == "calibrated+modelled"
    SweepConsole(more.workload_info)(event)
    assert "predicted cost on local-cpu" in capsys.readouterr().out
