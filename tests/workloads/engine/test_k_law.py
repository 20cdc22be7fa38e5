"""Batch-adaptive k (``decode.num_draft_tokens: auto``): the roofline and Eq. 4 laws, the
hardware a trial's law uses, the sweep fit file, the submit-time check, and the engine following
the law as rows leave the batch (lossless)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from analysis.eq4 import fit_eq4
from tests.workloads.stubs import StubDraft, StubTarget, V
from workloads.config import ConfigError
from workloads.decode_bench.config import DecodeConfig
from workloads.engine.k_law import (
    K_LAW_FILE,
    KLaw,
    check_k_law,
    eq4_k_law,
    make_k_law,
    read_sweep_k_law,
    resolve_hardware,
    roofline_k_law,
    shape_of,
    tree_capacity,
    write_sweep_k_law,
)
from workloads.engine.tree import max_nodes
from workloads.engine.tree_decode import TreeShape, generate
from workloads.roofline import HardwareProfile, eq4_paper, get_profile, k_opt, load_model_shape
from workloads.roofline.hardware import datasheet_name

LLAMA3_8B = LlamaConfig(
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14336,
    vocab_size=128256,
)
"""the llama-3-8b shape as a Hugging Face config (no weights are built)"""

CPU = HardwareProfile(
    name="local-cpu",
    peak_flops=100e9,
    bandwidth=10e9,
    dtype="float32",
    bytes_per_element=4,
    source="fixed for the test",
)


def auto(**kw: object) -> DecodeConfig:
    """An auto decode config; the EAGLE-2 tree (depth 6, topk 10: 511 nodes) unless given."""
    return DecodeConfig(**{"num_draft_tokens": "auto", "depth": 6, "topk": 10, **kw})  # type: ignore[arg-type]


def write_fit(run_root: Path, name: str, bs: list[float], ks: list[float]) -> dict:
    eq4 = fit_eq4(bs, ks).to_dict()
    write_sweep_k_law(run_root / name, eq4, sweep=name, target="smollm2-135m-instruct")
    return eq4


# -- the laws ------------------------------------------------------------------------------------


def test_roofline_law_is_k_opt_clamped_and_falls_with_b() -> None:
    shape, hw = load_model_shape("llama-3-8b"), get_profile("h200")
    law = roofline_k_law(shape, hw, context_len=1000, k_max=64)
    ks = [law(b) for b in (1, 2, 4, 8, 16, 32, 64)]
    for b, k in zip((1, 2, 4, 8, 16, 32, 64), ks, strict=True):
        assert k == max(2, k_opt(shape, hw, b, 1000, k_max=64).k)
    assert ks == sorted(ks, reverse=True) and ks[0] == 64 and ks[-1] < 16
    assert law.cache == dict(zip((1, 2, 4, 8, 16, 32, 64), ks, strict=True))
    assert "llama-3-8b on h200" in law.description and "s=1000" in law.description


def test_law_clamps_to_two_and_k_max_and_rounds_half_up() -> None:
    law = KLaw(lambda b: {1: 500.0, 2: 7.5, 3: 7.49, 4: 0.3, 5: -4.0}[b], k_max=32, description="t")
    assert [law(b) for b in (1, 2, 3, 4, 5)] == [32, 8, 7, 2, 2]
    with pytest.raises(ValueError, match="b=0"):
        law(0)
    bad = KLaw(lambda b: math.nan, k_max=8, description="broken")
    with pytest.raises(ValueError, match="broken"):
        bad(1)


def test_eq4_law_reproduces_the_paper_formula() -> None:
    law = eq4_k_law(27904.0, 0.034, 27897.0, k_max=1024, source="paper")
    assert (
        [law(b) for b in (1, 8, 64)]
        == [math.floor(eq4_paper(b) + 0.5) for b in (1, 8, 64)]
        == [477, 66, 14]
    )
    with pytest.raises(ValueError, match="finite"):
        eq4_k_law(math.inf, 1.0, 0.0)


def test_fixed_num_draft_tokens_gives_a_constant_law() -> None:
    law = make_k_law(
        DecodeConfig(num_draft_tokens=12), model_config=LLAMA3_8B, device="cpu",
        dtype="float32", run_root=None, context_len=100,
    )  # fmt: skip
    assert [law(b) for b in (1, 7, 64)] == [12, 12, 12]


def test_shape_of_a_hf_config_matches_the_builtin_shape() -> None:
    got, want = shape_of(LLAMA3_8B), load_model_shape("llama-3-8b")
    fields = ("hidden", "layers", "heads", "kv_heads", "head_dim", "mlp_inner", "vocab")
    assert all(getattr(got, f) == getattr(want, f) for f in fields)
    with pytest.raises(ValueError, match="intermediate_size"):
        shape_of(type("Cfg", (), {"hidden_size": 8, "num_attention_heads": 2})())


def test_auto_k_is_capped_at_the_nodes_of_the_tree() -> None:
    assert all(tree_capacity(d, t) == max_nodes(d, t) for d in (1, 2, 6) for t in (1, 2, 10))
    law = make_k_law(
        auto(hardware="h200", depth=2, topk=2), model_config=LLAMA3_8B, device="cpu",
        dtype="bfloat16", run_root=None, context_len=1000,
    )  # fmt: skip
    assert law.k_max == 7 and law(1) == 7 and law(64) == 6  # 1 + 2 + 4 nodes; k_opt(64) = 6


# -- hardware --------------------------------------------------------------------------------------


def test_explicit_datasheet_hardware_gives_its_roofline() -> None:
    law = make_k_law(
        auto(hardware="h200", k_max=64), model_config=LLAMA3_8B, device="cpu",
        dtype="torch.bfloat16", run_root=None, context_len=1000,
    )  # fmt: skip
    ref = roofline_k_law(load_model_shape("llama-3-8b"), get_profile("h200"), context_len=1000)
    assert [law(b) for b in (1, 8, 64)] == [ref(b) for b in (1, 8, 64)]


def test_auto_hardware_on_cpu_is_the_measured_local_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str | None]] = []

    def fake(
        name: str, *, dtype: str | None = None, threads: int | None = None, cache_dir: object = None
    ):
        asked.append((name, dtype))
        return CPU

    monkeypatch.setattr("workloads.engine.k_law.get_profile", fake)
    law = make_k_law(
        auto(k_max=64), model_config=LLAMA3_8B, device=torch.device("cpu"), dtype="float32",
        run_root=None, context_len=100,
    )  # fmt: skip
    assert asked == [("local-cpu", "float32")]
    assert law(1) == roofline_k_law(shape_of(LLAMA3_8B), CPU, context_len=100)(1)
    assert "local-cpu" in law.description


def test_auto_hardware_on_cpu_is_measured_once_per_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workloads.roofline import hardware

    calls: list[str] = []

    def fake(dtype: str = "float32", threads: int | None = None) -> HardwareProfile:
        calls.append(dtype)
        return CPU

    hardware._measured.cache_clear()
    monkeypatch.setattr(hardware, "measure_local_cpu", fake)
    try:
        for _ in range(2):  # two trials of one run, in two processes
            hardware._measured.cache_clear()
            law = make_k_law(
                auto(k_max=64), model_config=LLAMA3_8B, device=torch.device("cpu"),
                dtype="float32", run_root=None, context_len=100, cache_dir=tmp_path,
            )  # fmt: skip
            assert law(1) == roofline_k_law(shape_of(LLAMA3_8B), CPU, context_len=100)(1)
    finally:
        hardware._measured.cache_clear()
    assert calls == ["float32"]
    assert list((tmp_path / "hardware").glob("local-cpu-float32-*.json"))


def test_auto_hardware_on_cuda_names_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workloads.engine.k_law._gpu_name", lambda _d: "NVIDIA H200")
    hw = resolve_hardware("auto", device="cuda:0", dtype="bfloat16")
    assert hw.name == "h200" and hw.bytes_per_element == 2
    with pytest.raises(ValueError, match="float32.*decode.hardware auto on cuda"):
        resolve_hardware("auto", device=torch.device("cuda", 0), dtype="float32")
    monkeypatch.setattr("workloads.engine.k_law._gpu_name", lambda _d: "Tesla T4")
    with pytest.raises(ValueError, match="'Tesla T4' has no datasheet profile.*Fix"):
        resolve_hardware("auto", device="cuda:0", dtype="bfloat16")


@pytest.mark.parametrize(
    ("gpu", "profile"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA H800", "h800"),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA L40S", None),
    ],
)
def test_gpu_names_map_to_datasheets(gpu: str, profile: str | None) -> None:
    assert datasheet_name(gpu) == profile


def test_datasheet_profile_in_float32_is_refused() -> None:
    with pytest.raises(ValueError, match="float32.*Fix: target.dtype bfloat16"):
        resolve_hardware("h100", device="cpu", dtype="float32")


# -- sweep:NAME ------------------------------------------------------------------------------------


def test_sweep_law_follows_the_fitted_eq4(tmp_path: Path) -> None:
    bs = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    ks = [eq4_paper(b) / 8 for b in bs]  # a smooth Eq. 4 curve: the fit recovers it
    eq4 = write_fit(tmp_path, "batch", bs, ks)
    assert eq4["status"] == "ok"
    law = make_k_law(
        auto(k_law="sweep:batch", k_max=64), model_config=None, device="cpu", dtype="float32",
        run_root=tmp_path, context_len=100,
    )  # fmt: skip
    for b in (1, 4, 16, 32):
        want = eq4["A"] * math.sqrt(1 + eq4["B"] / b) - eq4["C"]
        assert law(b) == min(64, max(2, math.floor(want + 0.5)))
    assert law(1) == 60 and law(32) == 3  # 477/8 -> 60; 22/8 -> 3
    assert "fitted on sweep batch" in law.description
    check_k_law(auto(k_law="sweep:batch"), tmp_path)  # passes


def test_sweep_law_file_is_json_without_nan(tmp_path: Path) -> None:
    write_fit(tmp_path, "few", [1.0, 2.0], [8.0, 4.0])  # too few b: status says so, NaN A
    text = (tmp_path / "few" / K_LAW_FILE).read_text()
    data = json.loads(text)
    assert data["sweep"] == "few" and data["eq4"]["A"] is None
    assert "NaN" not in text


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("none", "no sweep 'batch' under the run root.*usable Eq. 4 fit there: other\\)"),
        ("folder", "k_law.json does not exist.*Fix: let it finish"),
        ("few", "not usable \\(status: 'too few points.*Fix"),
        ("garbage", "is not a k-law file.*Fix: refit"),
    ],
)
def test_sweep_law_refusals_name_the_problem(tmp_path: Path, setup: str, message: str) -> None:
    write_fit(tmp_path, "other", [1.0, 2.0, 4.0, 8.0, 16.0], [60.0, 31.0, 16.0, 9.0, 5.0])
    if setup == "folder":
        (tmp_path / "batch" / "trials").mkdir(parents=True)
    elif setup == "few":
        write_fit(tmp_path, "batch", [1.0, 2.0], [8.0, 4.0])
    elif setup == "garbage":
        (tmp_path / "batch").mkdir()
        (tmp_path / "batch" / K_LAW_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError, match=message):
        read_sweep_k_law(tmp_path, "batch")
    with pytest.raises(ConfigError, match=message) as info:
        check_k_law(auto(k_law="sweep:batch"), tmp_path)
    assert info.value.field == ("decode", "k_law")
    with pytest.raises(ValueError, match=message):
        make_k_law(
            auto(k_law="sweep:batch"), model_config=None, device="cpu", dtype="float32",
            run_root=tmp_path, context_len=10,
        )  # fmt: skip


def test_unknown_sweep_lists_only_usable_fits(tmp_path: Path) -> None:
    write_fit(tmp_path, "good", [1.0, 2.0, 4.0, 8.0, 16.0], [60.0, 31.0, 16.0, 9.0, 5.0])
    write_fit(tmp_path, "few", [1.0, 2.0], [8.0, 4.0])  # status: too few points
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / K_LAW_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError) as info:
        read_sweep_k_law(tmp_path, "typo")
    text = str(info.value)
    assert "usable Eq. 4 fit there: good;" in text
    assert "2 unusable fits left out (few: status 'too few points" in text
    assert "junk: unreadable" in text


def test_sweep_law_without_a_run_root_is_refused() -> None:
    with pytest.raises(ValueError, match="needs the run root"):
        make_k_law(
            auto(k_law="sweep:batch"), model_config=None, device="cpu", dtype="float32",
            run_root=None, context_len=10,
        )  # fmt: skip


# -- the submit-time check -------------------------------------------------------------------------


def test_check_passes_fixed_k_and_known_hardware(tmp_path: Path) -> None:
    check_k_law(DecodeConfig(num_draft_tokens=8, k_law="sweep:nothing"), tmp_path)  # not auto
    for hw in ("auto", "h200", "H100", "local-cpu", "a100-sxm"):
        check_k_law(auto(hardware=hw), tmp_path, dtype="bfloat16")
    check_k_law(auto(hardware="h200"), tmp_path, dtype="auto")  # dtype known on the worker only


@pytest.mark.parametrize(
    ("hardware", "dtype", "message"),
    [
        ("tpu-v5", "bfloat16", "decode.hardware 'tpu-v5' is not a hardware profile"),
        ("h200", "float32", "float32.*Fix: target.dtype bfloat16"),
    ],
)
def test_check_refuses_bad_hardware(
    tmp_path: Path, hardware: str, dtype: str, message: str
) -> None:
    cfg = DecodeConfig.model_construct(num_draft_tokens="auto", k_law="roofline", hardware=hardware)
    with pytest.raises(ConfigError, match=message) as info:
        check_k_law(cfg, tmp_path, dtype=dtype)
    assert info.value.field == ("decode", "hardware")


# -- the engine follows the law --------------------------------------------------------------------


F = {t: (t + 1) % V for t in range(V)}


def test_generate_follows_the_law_as_rows_leave_and_stays_lossless() -> None:
    """EOS 10 ends row 1 (8, 9, 10) in cycle 1 and row 0 (3, ..., 10) in cycle 2; row 2 goes on.
    Every proposal is right, so k must follow b on the next cycle: 3 rows, then 2, then 1."""
    law = KLaw(lambda b: {3: 8.0, 2: 4.0, 1: 3.0}[b], k_max=64, description="test law")
    seen: list[int] = []

    def shape(b: int) -> TreeShape:
        seen.append(b)
        return TreeShape(depth=3, topk=2, num_draft_tokens=law(b))

    prompts = [[0, 1, 2], [7], [9, 10, 11, 12, 13]]
    res = generate(
        StubTarget(F), StubDraft(F), prompts, max_new_tokens=14, shape=shape,
        eos_ids=frozenset({10}),
    )  # fmt: skip

    def greedy(start: int, n: int) -> list[int]:
        out, tok = [], start
        for _ in range(n):
            tok = F[tok]
            out.append(tok)
            if tok == 10:
                break
        return out

    assert res.tokens == [greedy(p[-1], 14) for p in prompts]  # lossless at T = 0
    assert [len(t) for t in res.tokens] == [8, 3, 13]
    ks = res.num_draft_tokens
    assert len(ks) == res.cycles and ks[:2] == [8, 4] and set(ks[2:]) == {3}
    assert {3, 2, 1} <= set(seen)
