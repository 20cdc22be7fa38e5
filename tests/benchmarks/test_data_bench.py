"""benchmarks/data_bench.py: a smoke run at tiny sizes (cache build, tokenisation, online =
cached, and one online-memory run in this process) and its argument errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from benchmarks import data_bench

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def _threads() -> Iterator[None]:
    """The bench sets torch's thread count; give the next test back its own."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("_threads")
def test_quick_run_measures_every_part(
    tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out, work = data_bench, tmp_path / "bench.json", tmp_path / "work"
    argv = ["--quick", "--parts", "cache", "tokenize", "equal", "--chunks", "2", "4",
            "--corpus-mb", "0.05", "--cache", str(cache_dir), "--work-dir", str(work),
            "--out", str(out)]  # fmt: skip
    assert db.main(argv) == 0
    res = json.loads(out.read_text())
    rows_per_chunk = res["settings"]["rows_per_chunk"]
    for run, chunks in zip(res["cache"], (2, 4), strict=True):
        assert run["chunks"] == chunks and run["build_s"] > 0
        assert run["rows_packed"] == run["target_rows"] == chunks * rows_per_chunk
        assert run["tokenised"] == 0  # the stream was tokenised once, before the builds
    doubling = res["cache_doubling"][0]
    assert doubling["rows_packed"] == doubling["target_rows"] == 2.0  # counted work: linear
    assert [t["procs"] for t in res["tokenize"]] == [1, 2]
    assert res["tokenize"][0]["tokens"] == res["tokenize"][1]["tokens"] > 0
    assert all(t["tokens_per_s"] > 0 for t in res["tokenize"])
    assert res["equal"]["docs_per_row"] > 1  # rows hold several documents: masks matter
    assert res["checks"]["online_equals_cached"]
    printed = capsys.readouterr().out
    assert "per doubling" in printed and "max |online - cached|" in printed
    # one online-memory run, in this process (the bench runs each in a fresh one)
    spec = {
        "budget": 1024, "seq_len": 64, "batch": 8, "work": str(work), "cache": str(cache_dir),
        "corpus": str(work / "corpus.jsonl"), "tokens": str(work / "tokens-online"),
        "draft_vocab": 64, "threads": 1,
    }  # fmt: skip
    got = db._online_child(spec)
    assert got["steps"] == 2 and got["tokens_seen"] == 1024 and got["target_rows"] == 16
    assert got["rss_train_max_kib"] >= got["rss_setup_kib"] > 0 and got["peak_rss_kib"] > 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--chunks", "0", "2"], "--chunks 0 2: sizes must be >= 1 and increasing"),
        (["--chunks", "4", "2"], "increasing"),
        (["--parts", "cache", "speed"], "--parts speed: not a part"),
        (["--budgets", "100"], "smaller than one step"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--corpus-mb", "-1"], "--corpus-mb -1.0"),
        (["--draft-vocab", "100000"], "--draft-vocab"),
        (["--seq-len", "x"], "invalid int value"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        data_bench.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("data_bench: error: ") and err.count("\n") == 1 and says in err
