"""The bad input catalogue: every wrong input a user can feed ``orchestrator``
ends in one line on stderr, exit code 2, no traceback, and nothing written (no run root, no
results DB, no MLflow runs, no stray files in the working directory).

``CASES`` has one entry per bad input, run through the real CLI (a corrupt cached feature file
is not refused but repaired: tests/workloads/training/test_features.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.orchestrator.spec.test_spec import (
    GOOD,  # a valid spec, for the cases whose bad input is a flag
)

ROOT = Path(__file__).resolve().parents[3]


def _bomb(levels: int = 7) -> str:
    """Aliases of aliases: 10**levels values from a few lines ("billion laughs")."""
    lines = ["name: t", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


BIG = (
    "name: big\nseeds: ["
    + ", ".join(map(str, range(60)))
    + "]\ngrid:\n  pretrain.tokens: ["
    + ", ".join(map(str, range(200)))
    + "]\n"
)
"""60 seeds x 200 budgets = 12,000 trials"""

DECODE = "name: d\nworkload: decode_bench\nbase:\n"
SEARCH = (
    "name: s\nsearch:\n  metric: acceptance_length\n  space:\n    draft.layers: {int: [1, 4]}\n"
)


@dataclass(frozen=True)
class Case:
    """One bad input: the spec file's content (None: no file at all), extra arguments and
    environment, and the hint the one-line error must contain."""

    spec: str | bytes | None
    needle: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    command: str = "submit"
    file: str = "sweep.yaml"


CASES: dict[str, Case] = {
    # -- the spec file ------------------------------------------------------------------------
    "missing-file": Case(None, "no such file"),
    "markup-in-file-name": Case(None, "[bold]nope.yaml: no such file", file="[bold]nope.yaml"),
    "directory": Case(None, "is a directory", args=("{tmp}",)),
    "empty-file": Case("", "a sweep spec is a YAML mapping"),
    "binary-file": Case(b"\xff\xfe\x00\x89PNG\r\n", "cannot read it as UTF-8"),
    "not-yaml": Case("name: t\ngrid: [1, 2\n", "not valid YAML"),
    "not-a-mapping": Case("- 1\n- 2\n", "a sweep spec is a YAML mapping"),
    "python-object-tag": Case("name: !!python/object/apply:os.system ['true']\n", "safe loading"),
    "alias-bomb": Case(_bomb(), "expands to more than 200,000 values"),
    "deep-nesting": Case("name: t\nbase: " + "[" * 1000 + "]" * 1000 + "\n", "nests too deeply"),
    # -- keys and types -----------------------------------------------------------------------
    "unknown-key": Case("name: t\nbase:\n  sft:\n    tokenz: 5\n", "did you mean 'tokens'"),
    "unknown-top-level-key": Case("name: t\nseed: [0]\n", "did you mean 'seeds'"),
    "wrong-type": Case("name: t\nbase:\n  sft:\n    tokens: [1, 2]\n", "valid integer"),
    "bool-as-resource-number": Case(
        "name: t\nresources: {num_cpus: true}\n",
        "sweep.yaml:2: resources.num_cpus: Input should be a number, not a boolean",
    ),
    "bool-as-config-number": Case(
        "name: t\nbase:\n  draft: {layers: yes}\n",
        "sweep.yaml:3: base.draft.layers: Input should be a number, not a boolean",
    ),
    "bool-as-search-number": Case(
        SEARCH + "  n_trials: on\n", "sweep.yaml:6: search.n_trials: Input should be a number"
    ),
    "unknown-workload": Case("name: t\nworkload: draft_trian\n", "'serve_bench' or 'sleep'"),
    "bad-sweep-name": Case("name: 'a b/c'\n", "may use only ASCII letters, digits"),
    # -- budgets --------------------------------------------------------------------------------
    "negative-budget": Case(
        "name: t\ngrid:\n  pretrain.tokens: [0, -5]\n", "greater than or equal to 0"
    ),
    "non-numeric-budget": Case("name: t\ngrid:\n  pretrain.tokens: [1024, 16k]\n", "'16k'"),
    "fractional-budget": Case("name: t\nbase:\n  pretrain: {tokens: 1.5}\n", "fractional"),
    "zero-cpu-budget": Case("name: t\nresources: {num_cpus: 0}\n", "greater than 0"),
    "zero-trial-budget": Case(SEARCH + "  n_trials: 0\n", "greater than or equal to 1"),
    "regen-engine-without-regeneration": Case(
        "name: t\nbase:\n  sft: {responses: dataset, regen_engine: vllm}\n",
        "nothing is regenerated",
    ),
    "absurd-learning-rate": Case(
        "name: t\nbase:\n  pretrain: {lr: 1e9}\n", "pretrain.lr: Input should be less than"
    ),
    "ttt-depth-zero": Case(
        "name: t\nbase:\n  train: {ttt_steps: 0}\n", "train.ttt_steps: Input should be greater"
    ),
    "ttt-on-workers": Case(
        "name: t\nbase:\n  train: {ttt_steps: 2, workers: 2}\n", "Fix: train.workers: 1"
    ),
    "ttt-longer-than-rows": Case(
        "name: t\nbase:\n  pretrain: {seq_len: 16}\n  sft: {seq_len: 16}\n"
        "  train: {ttt_steps: 15}\n",
        "Fix: train.ttt_steps: 14",
    ),
    "fusion-layer-outside-target": Case(
        "name: t\nbase:\n  draft: {fusion: eagle3, fusion_layers: [2, 30]}\n",
        "the target has 30 decoder layers",
    ),
    "fusion-layers-without-fusion": Case(
        "name: t\nbase:\n  draft: {fusion_layers: [2, 15]}\n", "Fix: add draft.fusion: eagle3"
    ),
    "fusion-unknown": Case("name: t\nbase:\n  draft: {fusion: eagle4}\n", "draft.fusion"),
    "checks-with-more-prompts-than-evaluated": Case(
        "name: t\nbase:\n  eval: {num_prompts: 4, during_training_every: 512, "
        "during_training_prompts: 6}\n",
        "Fix: eval.during_training_prompts: 4 or fewer",
    ),
    "checks-on-training-workers": Case(
        "name: t\nbase:\n  eval: {during_training_every: 8192}\n  train: {workers: 2}\n",
        "eval.during_training_every: 0, or train.workers: 1",
    ),
    "impossible-tree": Case(
        "name: t\nbase:\n  eval:\n    num_draft_tokens: 1\n", "greater than or equal to 2"
    ),
    # -- the grid -------------------------------------------------------------------------------
    "empty-grid": Case("name: t\ngrid:\n", "valid dictionary"),
    "empty-grid-axis": Case("name: t\ngrid:\n  pretrain.tokens: []\n", "has no values"),
    "duplicate-axis": Case(
        "name: t\ngrid:\n  pretrain.tokens: [1]\n  pretrain.tokens: [2]\n", "repeats the one"
    ),
    "unknown-axis": Case(
        "name: t\ngrid:\n  pretrain.tokenz: [1]\n", "did you mean 'pretrain.tokens'"
    ),
    "seed-as-axis": Case("name: t\ngrid:\n  seed: [0, 1]\n", "list seeds under 'seeds:'"),
    "duplicate-seeds": Case("name: t\nseeds: [0, 0]\n", "seeds repeat"),
    "grid-and-search": Case(
        SEARCH + "  n_trials: 4\ngrid:\n  pretrain.tokens: [0]\n", "either grid"
    ),
    "over-10000-trials": Case(BIG, "12,000 trials, more than 10,000. Fix: pass --yes"),
    "search-over-10000-trials": Case(SEARCH + "  n_trials: 20000\n", "less than or equal to"),
    # -- what the trials would load -------------------------------------------------------------
    "unknown-target-offline": Case(
        "name: t\nbase:\n  target: {model: smollm2-135m}\n",
        "'smollm2-135m' (did you mean 'smollm2-135m-instruct'?)",
        args=("--db-url", "sqlite:///{tmp}/shared/results.db"),  # no DB file either
        env={"HF_HUB_OFFLINE": "1"},
    ),
    "hub-target-without-network": Case(
        "name: t\nbase:\n  target: {model: acme/no-such-model}\n",
        "cannot reach 127.0.0.1:1",
        env={"HF_ENDPOINT": "http://127.0.0.1:1"},
    ),
    "missing-draft": Case(
        DECODE + "  draft: {source: path, path: /nonexistent/draft}\n", "does not exist"
    ),
    "misspelt-draft-sweep": Case(
        DECODE + "  draft:\n    source: trial\n    sweep: gemma-tokenz\n    trial_key: best\n",
        "sweep.yaml:6: draft.sweep 'gemma-tokenz' has no trials under",
        args=("--run-root", "{tmp}/drafts"),  # holds gemma-tokens/trials (_argv)
    ),
    "gemma-in-float16": Case(
        "name: t\nbase:\n  target:\n    model: gemma-3-270m\n    dtype: float16\n",
        "sweep.yaml:5: target.model 'gemma-3-270m' overflows float16",
    ),
    "gemma-in-float16-decoding": Case(
        DECODE + "  draft: {source: oracle}\n  target: {model: gemma-3-270m, dtype: float16}\n",
        "overflows float16 (its logits are not finite, measured). Fix: target.dtype: bfloat16",
    ),
    "serve-in-float16": Case(  # a validator of the whole config: no "<top>:" before it
        "name: s\nworkload: serve_bench\ngrid:\n  target.dtype: [float16]\n",
        "sweep.yaml:4: target.dtype 'float16': serve_bench serves",
    ),
    "unknown-prompt-set": Case(
        DECODE + "  prompts: {prompt_sets: [nope]}\n", "prompts.prompt_sets: unknown"
    ),
    # -- flags ----------------------------------------------------------------------------------
    "malformed-db-url": Case(GOOD, "is not a database URL", args=("--db-url", "mysql:/x")),
    "unreachable-db-url": Case(
        GOOD,
        "cannot reach the results database",
        args=("--db-url", "postgresql://postgres@127.0.0.1:1/test"),
    ),
    "malformed-address": Case(GOOD, "is not a Ray address", args=("--address", "nonsense")),
    "unreachable-address": Case(
        GOOD, "cannot reach the Ray cluster", args=("--address", "127.0.0.1:1")
    ),
    "unreachable-tracking-uri": Case(
        GOOD, "MLflow at", args=("--tracking-uri", "http://127.0.0.1:1")
    ),
    "run-root-is-a-file": Case(GOOD, "is a file, not a folder", args=("--run-root", "{tmp}/f")),
    "cache-dir-under-a-file": Case(
        GOOD, "is a file, not a folder", args=("--cache-dir", "{tmp}/f/cache")
    ),
    "tracking-store-under-a-file": Case(
        GOOD, "create the store's folder failed", args=("--tracking-uri", "sqlite:///{tmp}/f/m.db")
    ),
    "status-without-db": Case(None, "no results DB", args=("nope",), command="status"),
    # -- the draft recipe (issue 13) ----------------------------------------------------------
    "target-without-chat-template": Case(
        "name: t\nbase:\n  target: {model: plain-lm}\n  sft: {responses: target}\n",
        "sweep.yaml:3: target.model 'plain-lm' has no chat template and no EOS token",
    ),
    "negative-regen-temperature": Case(
        "name: t\nbase:\n  sft:\n    responses: target\n    regen_temperature: -0.5\n",
        "sweep.yaml:5:",
    ),
    "unknown-packing": Case("name: t\nbase:\n  pretrain:\n    packing: packed\n", "sweep.yaml:4:"),
    # -- constraints between fields (issue 16) ------------------------------------------------
    "draft-vocab-over-the-targets": Case(
        "name: t\nbase:\n  draft: {vocab_size: 10000000}\n",
        "sweep.yaml:3: draft.vocab_size 10000000 is not below the target's vocabulary (49152)",
    ),
    "eval-topk-over-draft-vocab": Case(
        "name: t\nbase:\n  draft: {vocab_size: 16}\n  eval:\n    topk: 32\n",
        "sweep.yaml:5: eval.topk 32 is larger than the draft vocabulary (draft.vocab_size 16)",
    ),
    "decode-topk-over-draft-vocab": Case(
        DECODE + "  draft: {source: path, path: small-draft}\n  decode:\n    topk: 4\n",
        "sweep.yaml:6: decode.topk 4 is larger than the vocabulary of the draft",
    ),
    "cuda-graphs-on-cpu": Case(
        DECODE + "  device: cpu\n  decode:\n    compile: graphs\n",
        "sweep.yaml:6: decode.compile 'graphs' captures CUDA graphs and needs a CUDA GPU",
    ),
    "k-law-field-without-auto": Case(
        DECODE + "  decode:\n    k_max: 32\n",
        "sweep.yaml:5: decode.k_max 32 only applies to decode.num_draft_tokens: auto",
    ),
    "unknown-hardware-profile": Case(
        DECODE + "  decode:\n    num_draft_tokens: auto\n    hardware: h900\n",
        "sweep.yaml:6: decode.hardware 'h900' is not a hardware profile",
    ),
}


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _small_draft(folder: Path) -> None:
    """A saved draft folder with a 3-token vocabulary (the files preflight reads)."""
    import numpy as np
    from safetensors.numpy import save_file

    if folder.exists():
        return
    folder.mkdir()
    (folder / "arch.json").write_text("{}")
    save_file({"draft_to_target": np.arange(3, dtype=np.int64)}, str(folder / "draft.safetensors"))


def _argv(case: Case, tmp: Path) -> list[str]:
    spec = tmp / case.file
    if isinstance(case.spec, bytes):
        spec.write_bytes(case.spec)
    elif case.spec is not None:
        spec.write_text(case.spec)
    (tmp / "f").write_text("a file where a folder should be\n")
    (tmp / "plain-lm").mkdir(exist_ok=True)  # a local target whose tokenizer has no chat template
    (tmp / "plain-lm" / "tokenizer_config.json").write_text('{"model_max_length": 2048}\n')
    _small_draft(tmp / "small-draft")
    (tmp / "drafts" / "gemma-tokens" / "trials").mkdir(parents=True, exist_ok=True)
    args = [a.replace("{tmp}", str(tmp)) for a in case.args]
    if case.command == "status":
        return ["status", *args, "--run-root", str(tmp / "runs")]
    if "--run-root" not in args:
        args += ["--run-root", str(tmp / "runs")]
    first = [] if case.args[:1] == ("{tmp}",) else [str(spec)]
    return ["submit", *first, *args]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A working directory of its own (so stray writes are seen) and no hub or proxy settings
    from the machine."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    for var in ("SPECSCALE_DB_URL", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case_id: str, clean_env: Path) -> None:
    case = CASES[case_id]
    argv = _argv(case, clean_env)
    before = _files(clean_env)
    res = CliRunner().invoke(app, argv, env=case.env)
    message = res.output.strip()
    assert res.exit_code == 2, message
    assert len(message.splitlines()) == 1, message
    assert message.startswith("error: ") and "Traceback" not in message, message
    assert case.needle in message, message
    assert "Fix:" in message or "did you mean" in message.lower(), message  # the way out
    assert _files(clean_env) == before  # no run root, no DB, no MLflow store, no cache


def test_bad_input_from_a_shell_goes_to_stderr(tmp_path: Path) -> None:
    """The real process: exit status 2, one line on stderr, nothing on stdout."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for case_id in ("python-object-tag", "over-10000-trials", "unknown-target-offline"):
        case = CASES[case_id]
        cmd = [sys.executable, "-m", "orchestrator.cli", *_argv(case, tmp_path)]
        res = subprocess.run(
            cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
        )
        assert res.returncode == 2, case_id + res.stderr[-2000:]
        assert res.stdout == ""
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert case.needle in res.stderr
        assert not (tmp_path / "runs").exists()


def test_a_big_grid_is_counted_by_dry_run_and_passed_by_yes(clean_env: Path) -> None:
    argv = _argv(CASES["over-10000-trials"], clean_env)
    before = _files(clean_env)
    res = CliRunner().invoke(app, [*argv, "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "12,000 trials (not listed" in res.output and "--yes" in res.output
    # --yes passes the gate: this submit stops only at the next check (the Ray address)
    res = CliRunner().invoke(app, [*argv, "--yes", "--address", "127.0.0.1:1"])
    assert res.exit_code == 2, res.output
    assert "cannot reach the Ray cluster" in res.output
    assert _files(clean_env) == before


def test_dry_run_refuses_an_unknown_target_as_the_submit_does(clean_env: Path) -> None:
    argv = _argv(CASES["unknown-target-offline"], clean_env)
    res = CliRunner().invoke(app, [*argv, "--dry-run"], env={"HF_HUB_OFFLINE": "1"})
    assert res.exit_code == 2, res.output
    assert "smollm2-135m" in res.output and "Nothing was run" not in res.output


# -- command-line mistakes typer finds before a command runs (issue 33) ----------------------

NUMBERS = {
    "plan-budget-hours-word": (
        ("plan", "--budget-hours", "abc"),
        "--budget-hours 'abc' must be a number. Fix: e.g. --budget-hours 2",
    ),
    "roofline-prefix-negative": (
        ("roofline", "--prefix", "-1"),
        "--prefix -1 must be a whole number >= 0. Fix: e.g. --prefix 10000 (the default)",
    ),
    "roofline-prefix-equals-word": (("roofline", "--prefix=x"), "--prefix 'x' must be a whole"),
    "roofline-k-max-zero": (("roofline", "--k-max", "0"), "--k-max 0 must be a whole number >= 1"),
    "roofline-threads-fraction": (
        ("roofline", "--threads", "1.5"),
        "--threads 1.5 must be a whole number >= 1. Fix: e.g. --threads 1",
    ),
    "plan-resamples-fraction": (
        ("plan", "--resamples", "1.5"),
        "--resamples 1.5 must be a whole number. Fix: e.g. --resamples 1000 (the default)",
    ),
    "plan-holdout-word": (("plan", "--holdout", "big"), "Fix: e.g. --holdout 32768"),
    "cancel-wait-word": (
        ("cancel", "s", "--wait", "soon"),
        "--wait 'soon' must be a number. Fix: e.g. --wait 60 (the default)",
    ),
    "submit-devices-word": (
        ("submit", "{spec}", "--dry-run", "--hardware", "h100", "--devices", "two"),
        "--devices 'two' must be a whole number",
    ),
}


def _one_line_refusal(argv: list[str], folder: Path) -> str:
    """Run ``argv``; assert exit 2, one ``error:`` line with a ``Fix:``, nothing written."""
    before = _files(folder)
    res = CliRunner().invoke(app, argv, env={"COLUMNS": "80"})
    message = res.output.strip()
    assert res.exit_code == 2, message
    assert len(message.splitlines()) == 1 and message.startswith("error: "), message
    assert "Fix:" in message and "╭" not in message and "Traceback" not in message, message
    assert _files(folder) == before
    return message


@pytest.mark.parametrize("case_id", sorted(NUMBERS))
def test_a_bad_value_of_a_numeric_flag_is_one_line_with_a_fix(
    case_id: str, clean_env: Path
) -> None:
    args, needle = NUMBERS[case_id]
    (clean_env / "s.yaml").write_text(GOOD)
    argv = [a.replace("{spec}", str(clean_env / "s.yaml")) for a in args]
    if argv[0] != "roofline":
        argv += ["--run-root", str(clean_env / "runs")]
    assert needle in _one_line_refusal(argv, clean_env)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["status"], "Missing argument 'SWEEP'. Fix: root status [OPTIONS] SWEEP"),
        (["status", "s", "--bogus"], "No such option: --bogus. Fix: root status [OPTIONS] SWEEP"),
        (["plan", "--prefix"], "Option '--prefix' requires an argument. Fix: root plan"),
        (["stauts", "s"], "No such command 'stauts'. Did you mean 'status'? Fix: root [OPTIONS]"),
        (
            ["status", "s", "postgresql://u:hunter2@db/x"],
            "unexpected extra argument(s) (postgresql://u:***@db/x)",
        ),
    ],
    ids=["missing-argument", "unknown-option", "option-without-value", "unknown-command", "url"],
)
def test_other_command_line_mistakes_are_one_line_with_the_usage(
    argv: list[str], needle: str, clean_env: Path
) -> None:
    message = _one_line_refusal(argv, clean_env)
    assert needle in message and "hunter2" not in message, message


def test_bare_orchestrator_still_prints_the_help() -> None:
    res = CliRunner().invoke(app, [])
    assert "Usage:" in res.output and "submit" in res.output and "error:" not in res.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--holdout", "-5"), "--holdout -5 must be a positive pretraining-token budget"),
        (("--holdout", "nan"), "--holdout nan must be a positive"),
        (
            ("--name", "."),
            "--name '.' must start with a letter or digit and use only letters, digits",
        ),
        (("--name", "-x"), "must start with a letter or digit"),
    ],
    ids=["holdout-negative", "holdout-nan", "name-dot", "name-dash"],
)
def test_plan_checks_its_flags_before_it_opens_the_db(
    args: tuple[str, ...], needle: str, clean_env: Path
) -> None:
    """No results DB under the run root: a flag checked first says what is wrong with it,
    not that the DB is missing."""
    argv = ["plan", *args, "--run-root", str(clean_env / "runs")]
    message = _one_line_refusal(argv, clean_env)
    assert needle in message and "no results DB" not in message, message
