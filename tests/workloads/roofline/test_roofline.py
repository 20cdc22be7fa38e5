"""Roofline model (Scylla arXiv 2505.07858, Sec. 3.2, Appendix C, Eq. 4, Eq. 8, Thm 1.3)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workloads.roofline import (
    Cost,
    ModelShape,
    decoding_step,
    default_t_acc,
    draft_decode,
    draft_prefill,
    eq4_paper,
    get_profile,
    intensity,
    k_opt,
    load_model_shape,
    measure_local_cpu,
    peak_throughput,
    step_time,
    target_step,
    tau_eq8,
    theoretical_throughput,
)

# h=4, l=1, 2 heads of dim 2, 1 kv head (h_kv=2), h_m=8, V=10
TINY = ModelShape(
    name="tiny", hidden=4, layers=1, heads=2, kv_heads=1, head_dim=2, mlp_inner=8, vocab=10
)
QWEN = load_model_shape("qwen2.5-72b")
H800 = get_profile("h800")
S = 10_000
BS = [1, 2, 4, 8, 16, 32, 64]


def test_target_step_by_hand() -> None:
    # b=2, n=3, s=5 (so bn=6, bnh=24), bf16
    c = target_step(TINY, 2, 3, 5, bytes_per_element=2)
    # FLOPs = 2bnh[V + l(2h + 2n + 2s + 2h_kv + 3h_m)] = 48 * [10 + (8+6+10+4+24)] = 48*62
    assert c.flops == 2976
    # reads = l[11bnh=264 + 2b(n+s)h_kv=64 + 3bnh_m=144 + 2h^2=32 + 2h h_kv=16 + 3h h_m=96
    #          + 3h=12 + 2h_kv=4] + bnh=24 + hV=40 = 632 + 64 = 696 elements
    assert c.bytes_read == 696 * 2
    # writes = l(8bnh=192 + 2bnh_kv=24 + 3bnh_m=144) + bnV=60 = 420 elements
    assert c.bytes_written == 420 * 2
    assert c.bytes == (696 + 420) * 2
    assert c.intensity == pytest.approx(2976 / 2232)


def test_draft_decode_by_hand() -> None:
    # b=2, k=3, s=5, D=2 steps, fp32
    c = draft_decode(TINY, 2, 3, 5, 2, bytes_per_element=4)
    # FLOPs = D*2bkh(V + 4h + 2k + 2s + 2h_kv + 3h_m) = 2*48*(10+16+6+10+4+24) = 96*70
    assert c.flops == 6720
    # reads = D[13bkh=312 + 2b(k+s)h_kv=64 + 3bkh_m=144 + 4h^2=64 + 2h h_kv=16 + 3h h_m=96
    #           + 3h=12 + 2h_kv=4 + bkh=24 + hV=40] = 2*776 elements
    assert c.bytes_read == 2 * 776 * 4
    # writes = D(9bkh=216 + 2bkh_kv=24 + 3bkh_m=144 + bkV=60) = 2*444 elements
    assert c.bytes_written == 2 * 444 * 4


def test_draft_prefill_is_one_draft_step_of_t_tokens() -> None:
    assert draft_prefill(QWEN, 4, 6, S) == draft_decode(QWEN, 4, 6, S, 1)


def test_decoding_step_is_prefill_plus_five_draft_steps_plus_target() -> None:
    b, k = 3, 40
    t = default_t_acc(k)
    total = decoding_step(QWEN, b, k, S, 2)
    parts = (
        draft_prefill(QWEN, b, t, S) + draft_decode(QWEN, b, k, S, 5) + target_step(QWEN, b, k, S)
    )
    assert total == parts
    assert decoding_step(QWEN, b, k, S, 2, t_acc=1, draft_steps=2) == (
        draft_prefill(QWEN, b, 1, S) + draft_decode(QWEN, b, k, S, 2) + target_step(QWEN, b, k, S)
    )
    assert intensity(QWEN, b, k, S) == pytest.approx(total.flops / total.bytes)


def test_bytes_scale_with_element_size() -> None:
    c2 = decoding_step(QWEN, 2, 8, S, 2)
    c4 = decoding_step(QWEN, 2, 8, S, 4)
    assert c4.flops == c2.flops and c4.bytes == pytest.approx(2 * c2.bytes)


def test_intensity_grows_with_k_and_with_b() -> None:
    by_k = [intensity(QWEN, 8, k, S) for k in range(1, 200)]
    assert all(b > a for a, b in zip(by_k, by_k[1:], strict=False))
    by_b = [intensity(QWEN, b, 32, S) for b in BS]
    assert all(b > a for a, b in zip(by_b, by_b[1:], strict=False))


def test_k_opt_is_first_k_reaching_i_crit_and_decreases_with_b() -> None:
    opts = [k_opt(QWEN, H800, b, S) for b in BS]
    for o in opts:
        assert o.reached and o.intensity >= H800.i_crit
        assert intensity(QWEN, o.b, o.k - 1, S) < H800.i_crit
    ks = [o.k for o in opts]
    assert all(b < a for a, b in zip(ks, ks[1:], strict=False))
    # regression (golden): Appendix C formulas, H800 datasheet, s = 10K
    assert ks == [290, 149, 78, 42, 24, 15, 11]


def test_k_opt_flags_an_unreached_bound() -> None:
    o = k_opt(QWEN, H800, 1, S, k_max=5)
    assert o.k == 5 and not o.reached and o.intensity < H800.i_crit
    with pytest.raises(ValueError, match="k_max"):
        k_opt(QWEN, H800, 1, S, k_max=0)


def test_eq4_and_eq8_values() -> None:
    assert eq4_paper(1) == pytest.approx(477.4, abs=0.1)
    assert eq4_paper(8) == pytest.approx(66.2, abs=0.1)
    assert eq4_paper(64) == pytest.approx(14.4, abs=0.1)
    assert tau_eq8(0) == pytest.approx(-0.25)
    assert tau_eq8(30) == pytest.approx(-6.25 * 0.2 + 6)
    assert tau_eq8(1000) == pytest.approx(6.0)
    assert default_t_acc(1) == 1 and default_t_acc(300) == 6
    with pytest.raises(ValueError):
        eq4_paper(0)


def test_roofline_time_and_throughput() -> None:
    assert H800.i_crit == pytest.approx(989e12 / 3.35e12)
    c = Cost(flops=1e12, bytes_read=1e9, bytes_written=0.0)
    assert step_time(c, H800) == pytest.approx(1e12 / 989e12)  # compute-bound
    c = Cost(flops=1e9, bytes_read=1e9, bytes_written=1e9)
    assert step_time(c, H800) == pytest.approx(2e9 / 3.35e12)  # memory-bound
    b, k = 4, 64
    tps = theoretical_throughput(QWEN, H800, b, k, S)
    assert tps == pytest.approx(b * tau_eq8(k) / step_time(decoding_step(QWEN, b, k, S, 2), H800))
    assert theoretical_throughput(QWEN, H800, b, k, S, tau=3.0) == pytest.approx(
        b * 3.0 / step_time(decoding_step(QWEN, b, k, S, 2, t_acc=3), H800)
    )
    peak = peak_throughput(QWEN, H800, b, S, k_max=256)
    assert peak.tokens_per_s >= tps and 1 <= peak.k <= 256


def test_bad_sizes_raise() -> None:
    with pytest.raises(ValueError, match="b=0"):
        target_step(QWEN, 0, 1, S)
    with pytest.raises(ValueError, match="s=-1"):
        draft_decode(QWEN, 1, 1, -1, 5)


def test_builtin_shapes_and_aliases() -> None:
    assert (QWEN.h, QWEN.layers, QWEN.heads, QWEN.h_kv, QWEN.h_m, QWEN.vocab) == (
        8192,
        80,
        64,
        1024,
        29568,
        152064,
    )
    assert load_model_shape("Qwen2.5-72B") is QWEN
    assert load_model_shape("meta-llama/Meta-Llama-3-8B-Instruct").name == "llama-3-8b"
    assert load_model_shape("VICUNA_7B").h_kv == 4096
    smol = load_model_shape("smollm2-135m")
    assert (smol.h, smol.layers, smol.h_kv, smol.h_m, smol.vocab) == (576, 30, 192, 1536, 49152)
    with pytest.raises(ValueError, match="qwen2.5-72b"):
        load_model_shape("gpt-5")
    with pytest.raises(ValueError, match="does not exist"):
        load_model_shape("./missing/config.json")


def test_hf_config_json(tmp_path: Path) -> None:
    cfg = {
        "_name_or_path": "org/tiny",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 100,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for arg in (tmp_path, tmp_path / "config.json", str(tmp_path / "config.json")):
        m = load_model_shape(arg)
        assert (m.name, m.h, m.layers, m.head_dim, m.h_kv, m.h_m, m.vocab) == (
            "org/tiny",
            64,
            2,
            16,
            32,
            128,
            100,
        )
    # no GQA key -> kv heads = heads; explicit head_dim wins; multimodal text_config
    mm = tmp_path / "mm"
    mm.mkdir()
    text = {k: v for k, v in cfg.items() if k != "num_key_value_heads"} | {"head_dim": 8}
    (mm / "config.json").write_text(json.dumps({"text_config": text}))
    m = load_model_shape(mm)
    assert m.kv_heads == 4 and m.h_kv == 32
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({k: v for k, v in cfg.items() if k != "vocab_size"}))
    with pytest.raises(ValueError, match="vocab_size"):
        load_model_shape(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_model_shape(bad)


def test_hardware_profiles() -> None:
    assert get_profile("H200").bandwidth == 4.8e12
    assert get_profile("a100").peak_flops == 312e12
    assert get_profile("h100", dtype="fp16").bytes_per_element == 2
    with pytest.raises(ValueError, match="local-cpu"):
        get_profile("tpu-v5")
    with pytest.raises(ValueError, match="float32"):
        get_profile("h800", dtype="float32")
    with pytest.raises(ValueError, match="int3"):
        get_profile("h800", dtype="int3")


def test_local_cpu_micro_benchmark() -> None:
    import torch  # noqa: F401 - import time is not the benchmark's

    start = time.perf_counter()
    p = measure_local_cpu(dtype="float32", threads=2, seconds=1.0)
    assert time.perf_counter() - start < 3.0
    assert p.name == "local-cpu" and p.bytes_per_element == 4
    for v in (p.peak_flops, p.bandwidth, p.i_crit):
        assert math.isfinite(v) and v > 0
    with pytest.raises(ValueError, match="threads"):
        measure_local_cpu(threads=0)


@pytest.fixture
def fake_measure(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    """``measure_local_cpu`` replaced by a counter (each call returns other numbers)."""
    from workloads.roofline import hardware

    calls: list[tuple[str, int | None]] = []

    def fake(dtype: str = "float32", threads: int | None = None) -> hardware.HardwareProfile:
        calls.append((dtype, threads))
        return hardware.HardwareProfile(
            name="local-cpu", peak_flops=1e11 * len(calls), bandwidth=2e10, dtype=dtype,
            bytes_per_element=hardware.DTYPE_BYTES[dtype], source="fake",
        )  # fmt: skip

    hardware._measured.cache_clear()
    monkeypatch.setattr(hardware, "measure_local_cpu", fake)
    yield calls
    hardware._measured.cache_clear()


def test_local_cpu_profile_is_measured_once_per_cache_dir(
    tmp_path: Path, fake_measure: list[tuple[str, int | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from workloads.roofline import hardware

    first, cached = hardware.cached_local_cpu(tmp_path, dtype="float32", threads=2)
    assert not cached and fake_measure == [("float32", 2)]
    (file,) = (tmp_path / "hardware").glob("local-cpu-float32-2t-*.json")
    assert json.loads(file.read_text())["cpu"] == hardware.cpu_model_name()
    hardware._measured.cache_clear()  # another process: reads the file, measures nothing
    again, cached = hardware.cached_local_cpu(tmp_path, dtype="fp32", threads=2)
    assert cached and again == first and len(fake_measure) == 1
    assert get_profile("local-cpu", threads=2, cache_dir=tmp_path) == first
    assert len(fake_measure) == 1
    file.write_text("{not json")  # a damaged file is measured over
    hardware._measured.cache_clear()
    fresh, cached = hardware.cached_local_cpu(tmp_path, dtype="float32", threads=2)
    assert not cached and len(fake_measure) == 2 and fresh.peak_flops == 2e11
    assert json.loads(file.read_text())["profile"]["peak_flops"] == 2e11
    hardware.cached_local_cpu(tmp_path, dtype="bfloat16", threads=2)  # another dtype: measured
    assert len(fake_measure) == 3
    monkeypatch.setattr(hardware, "cpu_model_name", lambda: "Another CPU")
    hardware._measured.cache_clear()  # a process on another machine sharing the folder
    _, cached = hardware.cached_local_cpu(tmp_path, dtype="float32", threads=2)
    assert not cached and len(fake_measure) == 4  # measured anew, in a file of its own
    assert len(list((tmp_path / "hardware").glob("local-cpu-float32-2t-*.json"))) == 2
    assert not list((tmp_path / "hardware").glob("*.tmp"))


def test_package_import_pulls_in_no_torch() -> None:
    code = (
        "import sys, workloads.roofline\n"
        "bad = {'torch', 'scipy', 'statsmodels'} & set(sys.modules)\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
