"""benchmarks/decode_bench.py: its argument and input checks (one line, exit code 2, before any
model is loaded), its tallies and summary with nothing measured, parts 1-2 on a tiny random
target (every output equal to HF greedy), and, with dynamo's ``eager`` backend (graphs traced and
counted, no code generated), the persistent compiled steps of parts 1 and 3: every shape compiled
in the first (untimed) call, none late, none after it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from benchmarks import decode_bench
from benchmarks.decode_tally import Tally
from tests.workloads.tiny import tiny_draft
from workloads.models.target import Target, random_model

ROOT = Path(__file__).resolve().parents[2]


def _one_line_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], *, raises: bool = True
) -> None:
    if raises:
        with pytest.raises(SystemExit) as exc:
            decode_bench.main(argv)
        code = exc.value.code
    else:
        code = decode_bench.main(argv)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("decode_bench: error: ") and err.count("\n") == 1, err
    assert says in err, err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # issue 16 item 7: the b=8 part got no batch and divided by zero
        (["--num-prompts", "4"], "--num-prompts 4 gives the b=8 part no batch"),
        (["--num-prompts", "4"], "Fix: --num-prompts 8 (or --batch 4)"),
        (["--num-prompts", "6", "--batch", "7"], "needs at least --batch 7"),
        (["--num-prompts", "0"], "--num-prompts, --max-new-tokens and --threads must be >= 1"),
        (["--max-new-tokens", "0"], "must be >= 1"),
        (["--threads", "0"], "must be >= 1"),
        (["--batch", "1"], "--batch >= 2"),
        (["--memory-prompts", "-1"], "--memory-prompts -1 must be >= 0"),
        (["--oracle-accept", "1.5"], "--oracle-accept 1.5 must be in [0, 1]"),
        (["--compile", "graphs"], "Fix: --compile compile"),
        (["--compile", "fast"], "invalid choice"),
        (["--trained-compile", "graphs"], "invalid choice"),
        (["--quick", "--trained-only"], "give one"),
        (["--trained-only", "--draft", "none"], "Fix: --draft best"),
        (["--num-prompts", "many"], "invalid int value"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _one_line_exit_2(argv, says, capsys)


def _prompt_dir(tmp_path: Path, n: int) -> Path:
    d = tmp_path / "prompts"
    d.mkdir()
    lines = [json.dumps({"turns": [f"Question {i}?"]}) for i in range(n)]
    (d / "mt_bench.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_a_prompt_set_smaller_than_num_prompts_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--prompts", str(_prompt_dir(tmp_path, 3)), "--draft", "none"]
    _one_line_exit_2(argv, "the set mt_bench holds 3 prompts", capsys, raises=False)


def test_a_missing_prompt_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--prompts", str(tmp_path / "nowhere"), "--draft", "none"]
    _one_line_exit_2(argv, "is not a directory", capsys, raises=False)


def test_a_missing_trained_draft_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = str(_prompt_dir(tmp_path, 8))
    argv = ["--prompts", prompts, "--run-root", str(tmp_path / "runs"), "--draft", "best"]
    _one_line_exit_2(argv, "Or skip part 3: --draft none", capsys, raises=False)
    argv = ["--prompts", prompts, "--draft", str(tmp_path)]
    _one_line_exit_2(argv, "no draft saved there", capsys, raises=False)


def test_quick_skips_the_trained_draft_and_memory_parts() -> None:
    args = decode_bench._args(["--quick"])
    assert args.quick and args.draft == "none" and args.memory_prompts == 0


def test_nothing_measured_is_nan_not_a_division_by_zero() -> None:
    row = Tally().row()
    assert math.isnan(row["tokens_per_s"]) and math.isnan(row["ms_per_cycle"])
    assert row["mismatches"] == 0.0
    with pytest.raises(ValueError, match="no batch of 8"):
        decode_bench.oracle_batched(None, [[1, 2]] * 4, [[3]] * 4, 4, 8, [2])


def test_summary_picks_the_best_k_of_each_part() -> None:
    def r(tps: float, book: float = 0.1) -> dict[str, float]:
        return {"tokens_per_s": tps, "bookkeeping_share": book}

    b1 = {"HF generate": r(10), "engine AR": r(11), "oracle k=4": r(50), "oracle k=8": r(80, 0.06)}
    b8 = {"engine AR b=8": r(40), "oracle b=8 k=4": r(100), "oracle b=8 k=8": r(90)}
    s = decode_bench.summary(b1, b8, 8)
    assert s["b1_ratio_over_hf"] == 8.0 and s["b1_best_k"] == 8.0
    assert s["b1_bookkeeping_share"] == 0.06
    assert s["batched_ratio_over_ar"] == 2.5 and s["batched_best_k"] == 4.0


def _tiny_target() -> tuple[Target, list[list[int]]]:
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
        eos_token_id=None, bos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    model = random_model(config, dtype=torch.float32, device=torch.device("cpu"), seed=0)
    model.generation_config.eos_token_id = 127  # the benchmark pads with the first EOS
    target = Target(name="tiny", model=model, tokenizer=None, random_weights=True)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 127, (int(n),), generator=gen).tolist() for n in (3, 5, 4, 6)]
    return target, prompts


def test_oracle_parts_on_a_tiny_random_target_equal_hf_greedy() -> None:
    target, prompts = _tiny_target()
    rows, refs = decode_bench.oracle_b1(target, prompts, 6, [2, 4])
    assert set(rows) == {"HF generate", "engine AR", "oracle k=2", "oracle k=4"}
    assert all(r["mismatches"] == 0 for r in rows.values())
    assert rows["oracle k=4"]["acceptance_length"] > 1.5  # the oracle knows the continuation
    rows_b = decode_bench.oracle_batched(target, prompts, refs, 6, 2, [2, 4])
    assert all(r["mismatches"] == 0 for r in rows_b.values())
    s = decode_bench.summary(rows, rows_b, 2)
    assert all(math.isfinite(v) and v > 0 for v in s.values()), s


def test_compiled_parts_compile_each_shape_once_before_the_timers() -> None:
    """Issue 22: one Steps per method, caches reserved before the first call: under compile
    every shape is compiled in the untimed warm-up, none late and none after it; part 3 has
    the AR loop and the draft eager and compiled side by side, all equal to HF greedy."""
    torch._dynamo.reset()
    target, prompts = _tiny_target()
    engine = decode_bench.Engine(compile="compile", backend="eager")
    rows, refs = decode_bench.oracle_b1(target, prompts, 6, [2, 4], engine)
    assert all(r["mismatches"] == 0 and r["late"] == 0 for r in rows.values()), rows
    assert rows["engine AR"]["compiles"] >= 1 and rows["oracle k=4"]["compiles"] >= 1
    assert all(r["compiles_after_warmup"] == 0 for r in rows.values()), rows
    draft = tiny_draft(target.model)
    rows_t = decode_bench.trained(
        target, draft, prompts, refs, 6, [2, 4], ["none", "compile"], engine
    )
    assert set(rows_t) == {
        "HF generate", "engine AR", "engine AR compiled", "trained k=2", "trained k=4",
        "trained k=2 compiled", "trained k=4 compiled",
    }  # fmt: skip
    assert all(r["mismatches"] == 0 and r["late"] == 0 for r in rows_t.values()), rows_t
    assert all(r["compiles_after_warmup"] == 0 for r in rows_t.values()), rows_t
    assert rows_t["trained k=4"]["compiles"] == 0 and rows_t["engine AR"]["compiles"] == 0
    # one Steps for the draft's trees: k=2 compiles its verify (n 2), pending pairs (P 2) and tree
    # level (K 4); k=4 only its verify (n 4): its P 4 has the tree level's shape, compiled already
    assert rows_t["trained k=2 compiled"]["compiles"] == 3
    assert rows_t["trained k=4 compiled"]["compiles"] == 1
    assert rows_t["trained k=4 compiled"]["acceptance_length"] >= 1.0
    s = decode_bench.trained_summary(rows_t)
    assert s["mismatches"] == 0 and s["late"] == 0 and s["best"].startswith("trained k=")
