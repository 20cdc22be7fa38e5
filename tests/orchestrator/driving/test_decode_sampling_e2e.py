"""A decode sweep at temperature > 0 end to end (issue 16, item 8, as a kind).

At T > 0 some metrics are undefined by design: ``mismatches``, ``ar_mismatches`` and
``near_ties`` (losslessness is checked token for token only when greedy), and at b > 1 the HF
``generate`` baseline (``hf_tokens_per_s``, ``speedup_vs_hf``). The sweep of the issue's report
(``decode.temperature: [0.001, 10.0]``, oracle draft), on a tiny random-weight target, must run
both trials, and every consumer of the metrics must show them as ``n/a``: the progress line,
``orchestrator status``, the fit (NaN points dropped), the dashboard, the index and MLflow.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import LlamaConfig
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker, default_tracking_uri
from workloads.models.target_source import TOKENIZER_VOCAB

ROOT = Path(__file__).resolve().parents[3]
UNDEFINED = ("mismatches", "ar_mismatches", "near_ties", "hf_tokens_per_s", "speedup_vs_hf")
"""metrics NaN in both trials: sampling (no token-for-token check) at b = 2 (no HF baseline)"""

SPEC = """\
name: sampling
workload: decode_bench
grid:
  decode.temperature: [0.001, 10.0]
base:
  target: {{model: {tiny}, weights: random, dtype: float32}}
  draft: {{source: oracle}}
  decode: {{batch_size: 2, depth: 2, topk: 2, num_draft_tokens: 4, max_new_tokens: 6}}
  prompts: {{prompt_sets: [humaneval], num_prompts: 2}}
  warmup: 0
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, str]:
    """The sweep, submitted once through the real CLI (Ray, SQLite, MLflow): (run root, stdout)."""
    tmp = tmp_path_factory.mktemp("sampling")
    tiny = tmp / "tiny"
    LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=TOKENIZER_VOCAB, max_position_embeddings=512,
        tie_word_embeddings=True,
    ).save_pretrained(tiny)  # fmt: skip
    spec = tmp / "sampling.yaml"
    spec.write_text(SPEC.format(tiny=tiny))
    run_root = tmp / "runs"
    cmd = [sys.executable, "-m", "orchestrator.cli", "submit", str(spec)]
    cmd += ["--run-root", str(run_root), "--cache-dir", str(cache_dir)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return run_root, res.stdout


def test_both_trials_complete_and_the_progress_line_says_n_a(run: tuple[Path, str]) -> None:
    _, out = run
    assert "2 completed, 0 already completed (skipped), 0 failed" in out
    done = [line for line in out.splitlines() if line.lstrip().startswith("completed")]
    assert len(done) == 2 and all("mismatches=n/a" in line for line in done), done
    assert "cannot convert" not in out and "Traceback" not in out
    assert "b=2: best k 4" in out  # the fit's summary line was printed


def test_the_store_keeps_nan_and_the_defined_metrics(run: tuple[Path, str]) -> None:
    run_root, _ = run
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("sampling")
    assert info is not None
    df = store.metrics_frame(info.id).set_index("decode.temperature")
    assert sorted(df.index) == [0.001, 10.0] and (df["state"] == "completed").all()
    for name in UNDEFINED:
        assert df[name].isna().all(), name
    assert (df["tokens_per_s"] > 0).all() and df["acceptance_length"].between(1, 4).all()
    laws = {f["law"]: f for f in store.fits(info.id)}
    assert set(laws) == {"batch", "k_opt", "speedup"}  # fitted (one b: "not enough points")
    assert "not enough points" in laws["batch"]["details"]["status"]


def test_status_and_a_refit_show_n_a_and_exit_0(run: tuple[Path, str]) -> None:
    run_root, _ = run
    wide = {"COLUMNS": "300"}
    status = CliRunner().invoke(app, ["status", "sampling", "--run-root", str(run_root)], env=wide)
    assert status.exit_code == 0, status.output
    # the table's width follows the console of the worker process; the summary line does not
    assert "2 completed" in status.output and "nan" not in status.output.lower()
    fit = CliRunner().invoke(app, ["fit", "sampling", "--run-root", str(run_root)])
    assert fit.exit_code == 0, fit.output
    assert "b=2: best k 4" in fit.output and "nan" not in fit.output.lower()
    report = CliRunner().invoke(app, ["report", "--run-root", str(run_root)])
    assert report.exit_code == 0, report.output


def _cells(page: str, table_id: str) -> list[dict[str, str]]:
    """The rows of the table ``table_id`` as {header: cell text}."""
    table = page.split(f"id='{table_id}'", 1)[1].split("</table>", 1)[0]
    heads = re.findall(r"<th>(.*?)</th>", table)
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1])
    return [dict(zip(heads, re.findall(r"<td[^>]*>(.*?)</td>", r), strict=True)) for r in rows]


def test_the_dashboard_shows_n_a_for_the_undefined_metrics(run: tuple[Path, str]) -> None:
    run_root, _ = run
    # the two trials decode at different temperatures: one page per condition (never pooled)
    pages = sorted((run_root / "sampling").glob("dashboard*.html"))
    assert len(pages) == 2, pages
    rows = []
    for path in pages:
        page = path.read_text(encoding="utf-8")
        rows += _cells(page, "trials")
        body = re.sub(r"<script.*?</script>", " ", page, flags=re.DOTALL)
        assert not re.search(r"\bnan\b", body, flags=re.IGNORECASE)
    assert len(rows) == 2
    for row in rows:
        for name in UNDEFINED:
            assert row[name] == "n/a", (name, row)
        assert row["error"] == "" and row["tokens_per_s"] not in ("", "n/a")
    index = (run_root / "index.html").read_text(encoding="utf-8")
    assert "sampling" in index and not re.search(r">\s*nan\s*<", index, flags=re.IGNORECASE)


def test_mlflow_has_both_child_runs_with_nan_for_undefined(run: tuple[Path, str]) -> None:
    run_root, _ = run
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("sampling")
    assert info is not None and info.mlflow_run_id is not None
    children = Tracker(default_tracking_uri(run_root)).child_runs(info.mlflow_run_id)
    assert len(children) == 2
    for child in children:
        metrics = child["metrics"]
        assert metrics["tokens_per_s"] > 0
        assert all(math.isnan(metrics[name]) for name in UNDEFINED if name in metrics)


def test_the_status_table_prints_an_undefined_metric_as_n_a(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``status`` columns go through the one number format (no decode status column is
    undefined when sampling, but a speedup without the AR baseline is)."""
    import io

    from rich.console import Console

    from orchestrator.commands import render

    buf = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buf, width=300, soft_wrap=True))
    row = ("k" * 16, "completed", {"decode.temperature": 10.0}, {"speedup": math.nan})
    render.print_trials("s", [row], ("speedup", "mismatches"), {"speedup": ".2f"})
    assert re.search(r"│ completed │ n/a +│ n/a +│", buf.getvalue()), buf.getvalue()
