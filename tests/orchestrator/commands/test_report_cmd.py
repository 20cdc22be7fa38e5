"""``orchestrator report`` (dashboards from the DB alone) and ``orchestrator compare``."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.reports.fit import fit_sweep
from orchestrator.store.results import ResultsStore
from workloads.decode_bench.config import DecodeBenchConfig
from workloads.draft_train.config import DraftTrainConfig

SPEC = "name: {name}\ngrid:\n  pretrain.tokens: [0, 8192, 32768, 131072, 524288]\n"


def _token_sweep(
    store: ResultsStore,
    name: str,
    slope: float,
    seed: int,
    prompt_sets: str = "sharegpt",
    set_slopes: dict[str, float] | None = None,
) -> int:
    """A stored token sweep: 5 budgets x 2 seeds (x = 0 is the baseline), one failed trial,
    loss series per trial; acceptance_length = slope*log10(tokens) + 0.7 + noise; evaluated on
    ``prompt_sets``; with ``set_slopes`` also ``acceptance_length/<set>`` at each set's slope."""
    rng = np.random.default_rng(seed)
    sweep_id = store.upsert_sweep(name, "draft_train", SPEC.format(name=name), f"{name}.yaml")
    raw = {"eval": {"prompt_sets": prompt_sets.split("+")}}
    cfg = DraftTrainConfig.model_validate(raw).model_dump(mode="json")
    grid = [(t, s) for t in (0, 8192, 32768, 131072, 524288) for s in (0, 1)]
    store.add_trials(
        sweep_id,
        [(f"{name}-{i:04d}", cfg, {"pretrain.tokens": t, "seed": s}) for i, (t, s) in
         enumerate(grid)] + [(f"{name}-fail", cfg, {"pretrain.tokens": 524288, "seed": 2})],
    )  # fmt: skip
    for trial in store.trials(sweep_id):
        tokens = trial.overrides["pretrain.tokens"]
        if trial.key.endswith("fail"):
            store.mark_failed(trial.id, "RuntimeError: out of memory", 1.0)
            continue
        tau = 1.2 if tokens == 0 else slope * math.log10(tokens) + 0.7 + rng.normal(0, 0.005)
        per_set = {
            f"acceptance_length/{k}": (1.2 if tokens == 0 else a * math.log10(tokens) + 0.7)
            + rng.normal(0, 0.005)
            for k, a in (set_slopes or {}).items()
        }
        store.log_metrics(trial.id, {"acceptance_length": tau, **per_set})
        store.log_metric_series(trial.id, "pretrain/loss", [5.0, 4.0, 3.5][: 1 + (tokens > 0) * 2])
        store.log_metric_series(trial.id, "sft/loss", [3.0, 2.5])
        store.mark_completed(trial.id, 1.0)
    return sweep_id


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    _token_sweep(store, "tok-a", 0.10, 0)
    _token_sweep(store, "tok-b", 0.20, 1)
    sid = store.upsert_sweep("diag", "sleep", "name: diag\ngrid:\n  seed: [0]\n", "d.yaml")
    store.add_trials(sid, [("d0", {"sleep": {}}, {"seed": 0})])
    store.close()
    return tmp_path / "runs"


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, " ".join(res.output.split())  # rich wraps at 80 columns here


def test_report_rebuilds_every_page_and_the_index_from_the_db(run_root: Path, tmp_path: Path):
    out = tmp_path / "site"
    code, text = _cli("report", "--run-root", str(run_root), "--out", str(out))
    assert code == 0, text
    assert "[1/3]" in text and "[3/3]" in text and f"{out / 'index.html'}" in text.replace(" ", "")
    index = (out / "index.html").read_text()
    for name in ("tok-a", "tok-b", "diag"):
        assert f"href='{name}/dashboard.html'" in index
        assert (out / name / "dashboard.html").is_file()
    page = (out / "tok-b" / "dashboard.html").read_text()
    assert "8 of 11 trials fitted; left out: 1 not completed" in page
    assert "bootstrap" in page and "extrapolation to the largest x" in page
    assert "Training loss" in page and "pretrain\\u002floss" in page  # JSON-escaped "/"
    # read-only: no fit row and no dashboard under the run root were written
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("tok-a")
    assert info is not None and store.fits(info.id) == []
    assert not (run_root / "tok-a").exists()


def test_report_one_sweep_and_bad_names(run_root: Path, tmp_path: Path) -> None:
    code, text = _cli("report", "tok-a", "--run-root", str(run_root), "--out", str(tmp_path / "o"))
    assert code == 0, text
    assert (tmp_path / "o" / "tok-a" / "dashboard.html").is_file()
    assert not (tmp_path / "o" / "tok-b").exists()
    assert "tok-b" in (tmp_path / "o" / "index.html").read_text()  # the index lists them all
    code, text = _cli("report", "nope", "--run-root", str(run_root))
    assert code == 2 and "no sweep named 'nope'" in text and "tok-a" in text
    assert "Fix: name one of these" in text
    code, text = _cli("report", "tok_a", "--run-root", str(run_root))
    assert code == 2 and "Fix: did you mean 'tok-a'?" in " ".join(text.split())
    code, text = _cli("retry", "tok-a", "--run-root", str(run_root))
    assert code == 2 and "Fix: add --failed and/or --cancelled" in " ".join(text.split())
    code, text = _cli("report", "--run-root", str(tmp_path / "empty"))
    assert code == 2 and "no results DB" in text and "Fix:" in text


def test_compare_two_token_sweeps(run_root: Path, tmp_path: Path) -> None:
    page = tmp_path / "cmp.html"
    code, text = _cli("compare", "tok-a", "tok-b", "--run-root", str(run_root), "--out", str(page))
    assert code == 0, text
    assert "slope difference a(B) - a(A) = +0.09" in text and "the slopes differ" in text
    assert "one fit with the sweep as a factor" in text and "t with 12 df" in text
    # no per-set columns: each sweep's acceptance_length is its one slope
    assert "pooled slope = 0.1" in text and "2 slopes): the slopes spread beyond noise" in text
    assert "mean acceptance_length per pretrain.tokens" in text
    html = page.read_text()
    assert "side-by-side" in html and "tok-a: a = 0.1" in html and "tok-b: a = 0.19" in html
    assert "id='transfer'" in html and "id='slopes'" in html
    assert "<td>pooled slope, random effects (DerSimonian-Laird)</td>" in html
    assert "measured differently" not in text and "id='warning'" not in html
    code, text = _cli("compare", "tok-a", "diag", "--run-root", str(run_root))
    assert code == 2 and "fits no law" in text
    code, text = _cli("compare", "tok-a", "tok-a", "--run-root", str(run_root))
    assert code == 2 and "both sweeps are 'tok-a'" in text


def test_compare_pools_each_sweeps_per_set_slopes(tmp_path: Path) -> None:
    """Two targets, two prompt sets each, four slopes that differ: the pooled slope spreads
    (I² high) and the table lists every (sweep, set)."""
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    sets = "humaneval+sharegpt"
    _token_sweep(store, "smol", 0.10, 0, sets, {"humaneval": 0.05, "sharegpt": 0.15})
    _token_sweep(store, "gemma", 0.30, 1, sets, {"humaneval": 0.25, "sharegpt": 0.35})
    store.close()
    page = tmp_path / "cmp.html"
    root = str(tmp_path / "runs")
    code, text = _cli("compare", "smol", "gemma", "--run-root", root, "--out", str(page))
    assert code == 0, text
    diff = re.search(r"slope difference a\(B\) - a\(A\) = (\S+) \[(\S+), (\S+)\]", text)
    assert diff is not None and "the slopes differ" in text, text
    assert float(diff[1]) == pytest.approx(0.20, abs=0.01) and float(diff[2]) > 0.15
    pooled = re.search(
        r"pooled slope = (\S+) .* I² = (\d+)%, Q = \S+ \(p < 1e-15\), 4 slopes", text
    )
    assert pooled is not None and "the slopes spread beyond noise" in text, text
    assert float(pooled[1]) == pytest.approx(0.20, abs=0.02) and int(pooled[2]) >= 95
    slopes = page.read_text().split("id='slopes'", 1)[1].split("</table>", 1)[0]
    for sweep in ("smol", "gemma"):
        for name in ("humaneval", "sharegpt"):
            assert f"<td>{sweep}</td><td>{name}</td>" in slopes
    assert slopes.count("<td>yes</td>") == 4


def _decode_sweep(store: ResultsStore, name: str, temperature: float) -> None:
    """A stored decode sweep at one ``temperature``: b in 1..8, k in 2, 4; tokens/s = 20*log2(b)
    + 8 at the best k."""
    sweep_id = store.upsert_sweep(name, "decode_bench", f"name: {name}\n", f"{name}.yaml")
    rows = []
    for b in (1, 2, 4, 8):
        for k in (2, 4):
            decode = {"batch_size": b, "num_draft_tokens": k, "temperature": temperature}
            cfg = DecodeBenchConfig.model_validate({"decode": decode}).model_dump(mode="json")
            over = {"decode.batch_size": b, "decode.num_draft_tokens": k}
            rows.append((f"{name}-{b}-{k}", cfg, over))
    store.add_trials(sweep_id, rows)
    for t in store.trials(sweep_id):
        b, k = t.overrides["decode.batch_size"], t.overrides["decode.num_draft_tokens"]
        tps = 20 * math.log2(b) + 8 - (k == 2)
        store.log_metrics(t.id, {"tokens_per_s": tps, "prompt_tokens_mean": 9.0})
        store.mark_completed(t.id, 1.0)


def test_compare_warns_of_sweeps_measured_on_other_prompt_sets_or_temperatures(
    tmp_path: Path,
) -> None:
    """Issue 33: compared sweeps whose trials differ in prompt sets (token laws) or temperature
    (throughput laws) are said to be measured differently, on the console and the page."""
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    _token_sweep(store, "tok-a", 0.10, 0)
    _token_sweep(store, "tok-h", 0.20, 1, prompt_sets="humaneval+sharegpt")
    _decode_sweep(store, "greedy", 0.0)
    _decode_sweep(store, "sampled", 0.7)
    store.close()
    root = str(tmp_path / "runs")
    page = tmp_path / "cmp.html"
    code, text = _cli("compare", "tok-a", "tok-h", "--run-root", root, "--out", str(page))
    assert code == 0, text
    said = (
        "warning: the sweeps were measured differently: prompt sets sharegpt (tok-a) vs "
        "humaneval+sharegpt (tok-h);"
    )
    assert said in text and "; temperature" not in text, text
    assert said in page.read_text() and "id='warning'" in page.read_text()
    code, text = _cli("compare", "greedy", "sampled", "--run-root", root, "--out", str(page))
    assert code == 0, text
    said = "measured differently: temperature 0 (greedy) vs 0.7 (sampled);"
    assert said in text and said in page.read_text(), text


def test_fit_sweep_stores_the_review_and_writes_the_index(run_root: Path) -> None:
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("tok-a")
    assert info is not None
    rep = fit_sweep(store, info.id, "tok-a", run_root / "tok-a" / "dashboard.html")
    assert rep.index == run_root / "index.html" and rep.index.is_file()
    assert rep.review is not None and rep.review.fit.ok
    details = store.fits(info.id)[0]["details"]
    assert details["cov_type"] == "HC3" and details["bootstrap"]["n_resamples"] >= 1000
    assert details["counts"]["not_completed"] == 1 and details["counts"]["nonpositive_x"] == 2
    assert details["extrapolation"]["status"] == "ok" and details["loo"]["status"] == "ok"
    assert details["paper"]["paper_a"] == 0.08
    assert store.sweep_series(info.id, ["sft/loss"])["tok-a-0000"] == {"sft/loss": [3.0, 2.5]}


def test_bad_out_is_refused_before_any_work(run_root: Path, tmp_path: Path) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("keep me")
    foreign = tmp_path / "page.html"
    foreign.write_text("<html>someone else's page</html>")
    cases = [
        (("report", "--out", str(afile)), "is a file"),
        (("report", "--out", "/proc/x/y"), "cannot create --out"),
        (("compare", "tok-a", "tok-b", "--out", str(afile)), "does not end in .html"),
        (("compare", "tok-a", "tok-b", "--out", str(tmp_path)), "does not end in .html"),
        (("compare", "tok-a", "tok-b", "--out", str(foreign)), "was not written by orchestrator"),
    ]
    for args, message in cases:
        code, text = _cli(*args, "--run-root", str(run_root))
        assert code == 2 and message in text and "Traceback" not in text, (args, text)
    assert afile.read_text() == "keep me" and "someone else" in foreign.read_text()
    # a page of ours may be replaced
    mine = tmp_path / "cmp.html"
    for _ in range(2):
        code, text = _cli("compare", "tok-a", "tok-b", "--run-root", str(run_root), "--out",
                          str(mine))  # fmt: skip
        assert code == 0, text


def test_read_only_commands_create_no_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    for cmd in (("report",), ("compare", "a", "b"), ("status", "a"), ("fit", "a")):
        code, text = _cli(*cmd, "--db-url", f"sqlite:///{missing}")
        assert code == 2 and "no results DB at" in text, (cmd, text)
    assert not missing.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_read_only_commands_create_no_tables_in_postgresql() -> None:
    import psycopg

    from tests.orchestrator.pg import PG_DSN, fresh_schema

    with fresh_schema("ro") as (schema, url):
        cmds = [("report",), ("compare", "a", "b"), ("status", "a"), ("retry", "a", "--failed")]
        for cmd in cmds:
            code, text = _cli(*cmd, "--db-url", url)
            assert code == 2 and "holds no results tables" in text, (cmd, text)
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
        assert rows == []


def test_one_sweep_report_links_only_the_pages_it_wrote(run_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "one"
    code, text = _cli("report", "tok-b", "--run-root", str(run_root), "--out", str(out))
    assert code == 0, text
    index = (out / "index.html").read_text()
    assert "href='tok-b/dashboard.html'" in index and "href='tok-a/dashboard.html'" not in index
    assert "tok-a <span class='note'>(no page here)</span>" in index


def test_the_index_lists_comparisons_under_the_run_root(run_root: Path) -> None:
    code, text = _cli("report", "--run-root", str(run_root))
    assert code == 0, text
    code, text = _cli("compare", "tok-a", "tok-b", "--run-root", str(run_root))
    assert code == 0 and "(lists the comparison)" in text, text
    index = (run_root / "index.html").read_text()
    assert "<h2>Comparisons</h2>" in index
    assert "href='compare/tok-a--vs--tok-b.html'" in index
    assert (run_root / "compare" / "tok-a--vs--tok-b.html").is_file()


def test_mistakes_create_no_folder_and_foreign_pages_are_kept(run_root: Path, tmp_path: Path):
    code, text = _cli("report", "nope", "--run-root", str(run_root), "--out", str(tmp_path / "r"))
    assert code == 2 and not (tmp_path / "r").exists()
    code, text = _cli("compare", "nope", "tok-a", "--run-root", str(run_root))
    assert code == 2 and not (run_root / "compare").exists()
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>my precious page</html>")
    code, text = _cli("report", "--run-root", str(run_root), "--out", str(site))
    assert code == 2 and "not written by orchestrator" in text
    assert "precious" in (site / "index.html").read_text()
    code, text = _cli("report", "--run-root", str(run_root), "--out", "/tmp/" + "a" * 300)
    assert code == 2 and "Traceback" not in text
