"""``orchestrator roofline`` through typer's CliRunner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.commands.roofline import parse_batch_sizes
from workloads.roofline import HardwareProfile, hardware

runner = CliRunner()


def test_default_run_prints_table_and_fits(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = runner.invoke(
        app,
        [
            "roofline",
            "--model",
            "qwen2.5-72b",
            "--hardware",
            "h800",
            "--prefix",
            "10000",
            "--json-out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    text = res.output
    for needle in (
        "k_opt",
        "Eq. 4",
        "I(b,k_opt)",
        "I_crit = 295.2",
        "Eq. 4 form fit",
        "R²",
        "Thm 1.3 fit",
        "log2(b)",
    ):
        assert needle in text
    data = json.loads(out.read_text())
    assert [r["batch_size"] for r in data["rows"]] == [1, 2, 4, 8, 16, 32, 64]
    assert [r["k_opt"] for r in data["rows"]] == [290, 149, 78, 42, 24, 15, 11]
    assert data["eq4_fit"]["r2"] > 0.99 and data["thm13_fit"]["status"] == "ok"
    eq4 = data["eq4_fit"]  # analysis.throughput.fit_eq4: the numbers the command always printed
    fitted = [eq4["A"], eq4["B"], eq4["C"]]
    assert fitted == pytest.approx([10639.3, 0.05406, 10633.1], rel=1e-4)
    assert data["hardware"]["i_crit"] == pytest.approx(989 / 3.35)


def test_list_of_batch_sizes_and_other_hardware() -> None:
    res = runner.invoke(
        app, ["roofline", "--model", "llama-3-8b", "--hardware", "a100", "--batch-sizes", "1,4,16"]
    )
    assert res.exit_code == 0, res.output
    assert "llama-3-8b on a100" in res.output and "I_crit = 153.0" in res.output
    assert "Eq. 4 form fit: not fitted (too few points" in res.output  # 3 b for 3 parameters


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-5"], "unknown model 'gpt-5'"),
        (["--hardware", "tpu"], "'tpu' is not a hardware profile"),
        (["--batch-sizes", "8-x"], "--batch-sizes '8-x'"),
        (["--dtype", "float32"], "Fix: --dtype bfloat16"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["roofline", *args])
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output


@pytest.fixture
def fake_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int | None]]]:
    calls: list[tuple[str, int | None]] = []

    def fake(dtype: str = "float32", threads: int | None = None, seconds: float = 2.0) -> Any:
        calls.append((dtype, threads))
        return HardwareProfile(
            name="local-cpu",
            peak_flops=1e11,
            bandwidth=2e10,
            dtype=dtype,
            bytes_per_element=4,
            source="fake",
        )

    hardware._measured.cache_clear()
    monkeypatch.setattr(hardware, "measure_local_cpu", fake)
    yield calls
    hardware._measured.cache_clear()


def test_local_cpu_measures_once_with_a_message(fake_cpu: list[tuple[str, int | None]]) -> None:
    args = [
        "roofline",
        "--hardware",
        "local-cpu",
        "--model",
        "smollm2-135m",
        "--dtype",
        "float32",
        "--threads",
        "2",
        "--batch-sizes",
        "1-8",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "measuring local CPU" in res.output and "I_crit = 5.0" in res.output
    assert runner.invoke(app, args).exit_code == 0
    assert fake_cpu == [("float32", 2)]  # cached per (dtype, threads) in-process


def test_parse_batch_sizes() -> None:
    assert parse_batch_sizes("1-64") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_batch_sizes("3-20") == [3, 6, 12, 20]
    assert parse_batch_sizes("8, 1,2,2") == [1, 2, 8]
    assert parse_batch_sizes("5") == [5]
    for bad in ("0-4", "4-1", "", "a,b", "1,-2"):
        with pytest.raises(ValueError, match="--batch-sizes"):
            parse_batch_sizes(bad)
