"""Paper-scale refusals at submit and the paper grid's dry run (real CLI processes, no trial).

A budget larger than its corpus, ``device: cuda`` on a machine without a GPU and a random-weight
target of an unknown shape are refused before anything is written, naming the spec line. The
paper grid passes ``--dry-run`` with a local corpus and random weights (nothing downloaded) and
says what it will cost.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from tests.orchestrator.driving.test_control import cli

ROOT = Path(__file__).resolve().parents[3]


def _corpus(tmp_path: Path, docs: int = 6) -> Path:
    path = tmp_path / "corpus.jsonl"
    text = "The draft model predicts the target's next hidden state. "
    path.write_text("".join(json.dumps({"text": text * (i + 1)}) + "\n" for i in range(docs)))
    return path


def _spec(tmp_path: Path, base: str, grid: str = "  pretrain.tokens: [0, 256]\n") -> Path:
    path = tmp_path / "paper.yaml"
    path.write_text(
        "name: scale\nworkload: draft_train\ngrid:\n" + grid + "base:\n" + base
        + "resources:\n  num_cpus: 1\n"
    )  # fmt: skip
    return path


def _refused(res, spec: Path, field_start: str) -> str:  # noqa: ANN001
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: {spec}:"), lines[0]
    line = int(lines[0].split(f"{spec}:", 1)[1].split(":", 1)[0])
    assert spec.read_text().splitlines()[line - 1].lstrip().startswith(field_start), lines[0]
    return lines[0]


def _nothing_written(run_root: Path) -> None:
    assert not (run_root / "results.db").exists()
    assert not (run_root / "mlruns").exists() and not (run_root / "mlflow.db").exists()


def test_a_budget_over_the_corpus_is_refused_with_both_sizes(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path)
    spec = _spec(
        tmp_path,
        f"  pretrain:\n    corpus: [{{source: {corpus}}}]\n    seq_len: 64\n",
        "  pretrain.tokens: [0, 64, 100000]\n",
    )
    run_root = tmp_path / "run"
    res = cli("submit", str(spec), "--run-root", str(run_root))
    msg = _refused(res, spec, "pretrain.tokens")
    assert "pretrain.tokens 100,000 needs 100,032 tokens but the corpus holds" in msg
    held = int(msg.split("corpus holds ")[1].split(" tokens")[0].replace(",", ""))
    assert 0 < held < 100_000
    assert "pretrain.repeat: true" in msg
    _nothing_written(run_root)
    repeat = spec.read_text().replace("    seq_len: 64\n", "    seq_len: 64\n    repeat: true\n")
    spec.write_text(repeat)  # going over the corpus more than once: accepted
    from orchestrator.driving import preflight
    from orchestrator.spec.grid import expand
    from orchestrator.spec.sweep import load_spec

    sweep = load_spec(spec)
    preflight.preflight(spec, sweep, [t.config for t in expand(sweep)], run_root)


def _preflight(spec: Path) -> str:
    """The submit's preflight in this process (the refusal's text, file:line first)."""
    from orchestrator.driving import preflight
    from orchestrator.errors import SpecError
    from orchestrator.spec.grid import expand
    from orchestrator.spec.sweep import load_spec

    sweep = load_spec(spec)
    with pytest.raises(SpecError) as info:
        preflight.preflight(spec, sweep, [t.config for t in expand(sweep)], spec.parent / "run")
    msg = str(info.value)
    line = int(msg.split(f"{spec}:", 1)[1].split(":", 1)[0])
    return spec.read_text().splitlines()[line - 1].strip() + " | " + msg


def test_a_builtin_mix_cannot_feed_a_billion_tokens(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  pretrain:\n    seq_len: 256\n", "  pretrain.tokens: [1000000000]\n")
    msg = _preflight(spec)
    assert msg.startswith("pretrain.tokens:"), msg
    assert "builtin mix holds at most" in msg and "pretrain.corpus" in msg


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")
def test_device_cuda_without_a_gpu_is_refused(tmp_path: Path) -> None:
    msg = _preflight(_spec(tmp_path, "  device: cuda\n"))
    assert msg.startswith("device: cuda |") and "no CUDA GPU" in msg


def test_an_unknown_random_shape_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  target:\n    model: llama-3-9b\n    weights: random\n")
    msg = _preflight(spec)
    assert msg.startswith("model: llama-3-9b |") and "llama-3-8b" in msg  # the close match


def test_the_paper_grid_dry_run_with_a_local_corpus(tmp_path: Path) -> None:
    """The shipped grid with its corpus swapped for local files (a 300 GB sparse file stands in
    for a real corpus: only its size is read) and random weights of the paper's target shape."""
    big = tmp_path / "web.txt"
    with big.open("wb") as f:
        f.truncate(300 * 10**9)
    code = tmp_path / "code.txt"
    with code.open("wb") as f:
        f.truncate(20 * 10**9)
    paper = yaml.safe_load((ROOT / "sweeps/paper/tokens.yaml").read_text())
    paper["base"]["pretrain"]["corpus"] = [
        {"source": str(big), "weight": 0.95},
        {"source": str(code), "weight": 0.05},
    ]
    paper["base"]["target"] = {"model": "llama-3-8b", "weights": "random", "dtype": "bfloat16"}
    spec = tmp_path / "paper.yaml"
    spec.write_text(yaml.safe_dump(paper, sort_keys=False))
    # a dry run runs the submit's checks: 8 CPUs and a GPU per trial do not fit this machine
    res = cli("submit", str(spec), "--run-root", str(tmp_path / "run"), "--dry-run")
    assert res.returncode == 2 and "resources." in res.stderr and "Fix:" in res.stderr, res.stderr
    assert not (tmp_path / "run").exists()
    paper["resources"] = {"num_cpus": 1, "num_gpus": 0}  # as if on a machine that has them
    spec.write_text(yaml.safe_dump(paper, sort_keys=False))
    res = cli("submit", str(spec), "--run-root", str(tmp_path / "run"), "--dry-run")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    out = " ".join(res.stdout.split())
    assert "a real submit would stop here" not in out, out
    assert "188B pretraining tokens" in out
    assert "llama-3-8b pretrain features: online for 7 budget(s) up to 100B tokens" in out
    assert "745.1 TiB if cached" in out
    assert "Nothing was run or written" in out
    assert not (tmp_path / "run" / "results.db").exists()
    assert os.path.getsize(big) == 300 * 10**9


def test_empty_or_unreachable_corpora_are_refused_before_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty file (even with repeat) and an hf: dataset that cannot be streamed from here are
    refused at submit in one line, not by a failing trial or a traceback."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    corpus = f"  pretrain:\n    corpus: [{{source: {empty}}}]\n    seq_len: 64\n"
    for repeat in ("", "    repeat: true\n"):
        msg = _preflight(_spec(tmp_path, corpus + repeat))
        assert msg.startswith("corpus:") and "its files are empty" in msg, msg
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = "  pretrain:\n    corpus: [{source: 'hf:allenai/c4', subset: en}]\n"
    msg = _preflight(_spec(tmp_path, hub))
    assert "'hf:allenai/c4' is streamed from the Hugging Face hub" in msg
    assert "HF_HUB_OFFLINE is set" in msg and "Fix:" in msg


def test_corpus_sources_are_read_at_submit_and_sft_only_needs_no_corpus(tmp_path: Path) -> None:
    """A wrong text_field or a missing file names the corpus line even with repeat (no budget
    check then), and the mix beside a corpus is refused."""
    body = tmp_path / "body.jsonl"
    body.write_text(json.dumps({"body": "some text"}) + "\n")
    spec = _spec(tmp_path, f"  pretrain:\n    corpus: [{{source: {body}}}]\n    repeat: true\n")
    msg = _preflight(spec)
    assert msg.startswith("corpus:") and "no field 'text'" in msg and "['body']" in msg, msg
    spec = _spec(tmp_path, f"  pretrain:\n    corpus: [{{source: {tmp_path}/none*.jsonl}}]\n")
    assert "matches no corpus file" in _preflight(spec)
    from orchestrator.errors import SpecError
    from orchestrator.spec.sweep import load_spec

    mixed = f"  pretrain:\n    corpus: [{{source: {body}}}]\n    mix: {{stdlib: 1.0}}\n"
    with pytest.raises(SpecError, match="pretrain.corpus replaces it"):
        load_spec(_spec(tmp_path, mixed))


def test_a_typo_inside_a_corpus_source_gets_a_did_you_mean(tmp_path: Path) -> None:
    from orchestrator.errors import SpecError
    from orchestrator.spec.sweep import load_spec

    spec = _spec(tmp_path, "  pretrain:\n    corpus:\n      - {source: a.jsonl, txt_field: body}\n")
    typo = "'base.pretrain.corpus.0.txt_field' .did you mean 'text_field'"
    with pytest.raises(SpecError, match=typo):
        load_spec(spec)
