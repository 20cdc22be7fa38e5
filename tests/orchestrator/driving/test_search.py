"""Optuna search sweeps: spec errors, the ask/run/tell loop (Ray faked), and the real thing.

The loop tests run :func:`orchestrator.driving.sweep_run.drive` with
:class:`orchestrator.kinds.search.study.SearchProposals` against a real SQLite store and a real
Optuna study, with the Ray task replaced by a function of the config, so resume, reuse, stale
trials, refused configs and a missing metric are checked in seconds. The end-to-end test runs a
4-trial search of the tiny draft_train smoke config through the CLI, in two submits.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.driving import runner
from orchestrator.driving.events import ignore
from orchestrator.driving.sweep_run import SweepRun, drive
from orchestrator.driving.task import TaskOutcome
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.kinds.search import study as search
from orchestrator.spec.sweep import SweepSpec, load_spec
from orchestrator.store.results import ResultsStore

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "sweeps" / "smoke-tokens.yaml"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

HEAD = "name: s\nseeds: [0]\n"
SEARCH = """\
search:
  metric: acceptance_length
  n_trials: 4
  space:
    eval.topk: {int: [1, 4]}
"""

# (spec text, line of the error, text the message must contain)
BAD = {
    "grid and search": (
        HEAD + "grid:\n  pretrain.tokens: [0, 1]\n" + SEARCH,
        5,
        "not both",
    ),
    "unknown field": (
        HEAD + SEARCH.replace("eval.topk", "eval.tpok"),
        7,
        "did you mean 'eval.topk'",
    ),
    "low > high": (HEAD + SEARCH.replace("[1, 4]", "[4, 1]"), 7, "low 4 > high 1"),
    "log with low 0": (
        HEAD + SEARCH.replace("{int: [1, 4]}", "{int: [0, 4], log: true}"),
        7,
        "log needs low > 0",
    ),
    "n_trials 0": (HEAD + SEARCH.replace("n_trials: 4", "n_trials: 0"), 5, "greater than or"),
    "no metric": (
        HEAD + SEARCH.replace("  metric: acceptance_length\n", ""),
        4,
        "search.metric: Field required",
    ),
    "key typo": (HEAD + SEARCH.replace("n_trials", "n_trial"), 5, "did you mean 'n_trials'"),
    "kind typo": (HEAD + SEARCH.replace("{int:", "{itn:"), 7, "did you mean 'int'"),
    "two kinds": (
        HEAD + SEARCH.replace("{int: [1, 4]}", "{int: [1, 4], choice: [1, 2]}"),
        7,
        "exactly one of int, float or choice",
    ),
    "bad direction": (
        HEAD + SEARCH.replace("  n_trials", "  direction: max\n  n_trials"),
        5,
        "'maximize' or 'minimize'",
    ),
    "outside the field": (
        HEAD + SEARCH.replace("eval.topk: {int: [1, 4]}", "eval.num_draft_tokens: {int: [1, 6]}"),
        7,
        "greater than or equal to 2",
    ),
    "float for an int field": (
        HEAD + SEARCH.replace("{int: [1, 4]}", "{float: [1, 4]}"),
        7,
        "valid integer",
    ),
    "seed searched": (HEAD + SEARCH.replace("eval.topk", "seed"), 7, "a search runs with the seed"),
    "two seeds": (HEAD.replace("[0]", "[0, 1]") + SEARCH, 2, "one seed"),
    "empty space": (
        HEAD + SEARCH.replace("  space:\n    eval.topk: {int: [1, 4]}\n", "  space: {}\n"),
        6,
        "search.space",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD), ids=str)
def test_malformed_search_is_one_line_with_file_line_and_a_fix(case: str, tmp_path: Path) -> None:
    text, line, needle = BAD[case]
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    run_root = tmp_path / "runs"
    with pytest.raises(SpecError, match=re.escape(needle)):
        load_spec(spec)
    res = CliRunner().invoke(app, ["submit", str(spec), "--run-root", str(run_root)])
    assert res.exit_code == 2, res.output
    message = res.output.strip()
    assert len(message.splitlines()) == 1, message
    assert f"{spec}:{line}:" in message, message
    assert "Fix" in message or "did you mean" in message, message
    assert not run_root.exists()  # nothing written


def test_dry_run_prints_the_space_and_writes_nothing(tmp_path: Path) -> None:
    shipped = ROOT / "sweeps" / "search-batch.yaml"

    def dry_run(spec: Path) -> Any:
        argv = ["submit", str(spec), "--dry-run", "--run-root", str(tmp_path / "runs")]
        return CliRunner().invoke(app, argv)

    # as shipped it decodes with the best draft of `make run`: refused, as a submit would be
    res = dry_run(shipped)
    assert res.exit_code == 2 and "no finished draft_train trial" in res.output, res.output
    spec = yaml.safe_load(shipped.read_text())
    spec["base"]["draft"] = {"source": "oracle"}
    oracle = tmp_path / "search-oracle.yaml"
    oracle.write_text(yaml.safe_dump(spec, sort_keys=False))
    res = dry_run(oracle)
    assert res.exit_code == 0, res.output
    assert "decode.num_draft_tokens" in res.output and "int [2, 64] log" in res.output
    assert "16 trials" in res.output and "maximize tokens_per_s" in res.output
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------
# The ask/run/tell loop with the Ray task faked
# ---------------------------------------------------------------------------------------------

FAST = """\
name: fast
seeds: [0]
search:
  metric: acceptance_length
  n_trials: {n}
  space:
    eval.topk: {{int: [1, 4]}}
    eval.num_draft_tokens: {{int: [2, 6]}}
    draft.vocab_size: {{choice: [2048, 4096]}}
"""


def _acceptance(config: dict[str, Any]) -> dict[str, float]:
    e = config["eval"]
    return {"acceptance_length": 1 + 0.1 * e["topk"] - 0.01 * abs(e["num_draft_tokens"] - 4)}


class FakeTracker:
    def __init__(self) -> None:
        self.states: dict[str, str] = {}

    def start_trial_run(self, parent: str, sweep: str, key: str, *_: Any, **__: Any) -> str:
        return f"run-{key}"

    def set_state(self, run_id: str, state: str, error: str | None = None) -> None:
        self.states[run_id] = str(state)

    def log_metrics(self, *_: Any, **__: Any) -> None:
        pass

    def update_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        self.log_metrics(run_id, metrics)

    def log_series(self, *_: Any, **__: Any) -> None:
        pass

    def log_artifact(self, *_: Any, **__: Any) -> None:
        pass


def run_search(
    store: ResultsStore,
    tracker: Any,
    spec: SweepSpec,
    sweep_id: int,
    parent: str,
    paths: runner.RunPaths,
    study: optuna.Study,
) -> search.SearchSummary:
    """The driver loop with the study's proposals, as ``submit`` runs a search."""
    with runner.sweep_lease(store, sweep_id) as me:
        run = SweepRun(store, tracker, spec, sweep_id, parent, paths, me)
        proposals = search.SearchProposals(spec, study)
        drive(run, proposals, ignore)
    return proposals.summary()


class FakeRemote:
    """Stands in for the Ray task: the outcome is a function of the config."""

    def __init__(self, metrics: Any = _acceptance) -> None:
        self.metrics = metrics
        self.runs: list[str] = []
        self.outcomes: dict[object, TaskOutcome] = {}

    def remote(self, **kw: Any) -> object:
        ref = object()
        self.runs.append(kw["trial_key"])
        metrics = self.metrics(kw["config"].model_dump(mode="json"))
        self.outcomes[ref] = (
            TaskOutcome(ok=False, error="RuntimeError: boom", traceback="Traceback ...")
            if metrics is None
            else TaskOutcome(ok=True, metrics=metrics)
        )
        return ref


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> FakeRemote:
    fake = FakeRemote()
    monkeypatch.setattr(runner, "trial_task", lambda spec, **_: fake)
    monkeypatch.setattr(runner, "in_flight_limit", lambda spec: 2)
    monkeypatch.setattr(
        runner.ray, "wait", lambda refs, num_returns=1, timeout=None: (refs[:1], refs[1:])
    )
    monkeypatch.setattr(runner.ray, "get", lambda ref: fake.outcomes[ref])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return fake


def _spec(tmp_path: Path, text: str) -> SweepSpec:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return load_spec(p)


def _search(
    tmp_path: Path, spec: SweepSpec, study: optuna.Study | None = None
) -> tuple[search.SearchSummary, ResultsStore, int]:
    store = ResultsStore.sqlite_under(tmp_path / "runs")
    url = search.storage_url(None, tmp_path / "runs")
    study = study or search.open_study(spec, url)
    sweep_id, _ = runner.register(store, spec, tmp_path / "spec.yaml", "x", [])
    paths = runner.RunPaths(tmp_path / "runs", tmp_path / "cache")
    tracker: Any = FakeTracker()
    summary = run_search(store, tracker, spec, sweep_id, "parent", paths, study)
    return summary, store, sweep_id


def _study(tmp_path: Path, name: str = "fast") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=search.storage_url(None, tmp_path / "runs"))


def test_search_resumes_without_rerunning(tmp_path: Path, fake_ray: FakeRemote) -> None:
    first, store, sweep_id = _search(tmp_path, _spec(tmp_path, FAST.format(n=3)))
    assert first.counted == 3 and first.before == 0 and first.error is None
    ran_first = list(fake_ray.runs)
    assert len(ran_first) == len(set(ran_first)) == first.completed
    second, store, _ = _search(tmp_path, _spec(tmp_path, FAST.format(n=6)))
    assert second.before == 3 and second.counted == 6
    assert not set(ran_first) & set(fake_ray.runs[len(ran_first) :])  # nothing rerun
    trials = store.trials(sweep_id)
    assert {t.state for t in trials} == {"completed"}
    assert all(t.attempts == 1 for t in trials)
    assert len(trials) == len(set(fake_ray.runs))
    study = _study(tmp_path)
    assert len(study.trials) == 6
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}
    numbers = {t.overrides["optuna_trial"] for t in trials}
    assert numbers <= {t.number for t in study.trials}
    for t in trials:  # overrides = the sampled params, the seed and the Optuna number
        assert set(t.overrides) == {
            "eval.topk",
            "eval.num_draft_tokens",
            "draft.vocab_size",
            "seed",
            "optuna_trial",
        }
    assert second.best is not None
    assert second.best.value == max(t.value for t in study.trials if t.value is not None)
    assert search.load_best(search.storage_url(None, tmp_path / "runs"), "fast") == (
        second.best,
        6,
    )


def test_a_proposal_completed_in_the_store_is_reused(tmp_path: Path, fake_ray: FakeRemote) -> None:
    _search(tmp_path, _spec(tmp_path, FAST.format(n=2)))
    study = _study(tmp_path)
    done = study.trials[0]
    study.enqueue_trial(done.params)  # the next proposal repeats a completed config
    runs = len(fake_ray.runs)
    spec = _spec(tmp_path, FAST.format(n=3))
    summary, _, _ = _search(tmp_path, spec)
    assert summary.reused == 1 and summary.completed == 0
    assert len(fake_ray.runs) == runs
    last = _study(tmp_path).trials[-1]
    assert last.value == done.value
    assert last.user_attrs["specscale.trial_key"] == done.user_attrs["specscale.trial_key"]


def test_a_trial_running_when_the_driver_died_is_failed_and_retried(
    tmp_path: Path, fake_ray: FakeRemote
) -> None:
    spec = _spec(tmp_path, FAST.format(n=2))
    url = search.storage_url(None, tmp_path / "runs")
    ResultsStore.sqlite_under(tmp_path / "runs").close()
    dead = search.open_study(spec, url).ask(search.distributions(spec.search))  # type: ignore[arg-type]
    summary, store, sweep_id = _search(tmp_path, spec)  # a new driver
    trials = _study(tmp_path).trials
    assert trials[dead.number].state == optuna.trial.TrialState.FAIL
    assert len(trials) == 3 and summary.counted == 2  # the stale trial does not count
    retry = trials[dead.number + 1]
    assert retry.params == dead.params
    assert retry.user_attrs["specscale.retry_of"] == dead.number
    assert retry.state == optuna.trial.TrialState.COMPLETE


def test_a_refused_config_fails_the_trial_and_the_search_goes_on(
    tmp_path: Path, fake_ray: FakeRemote
) -> None:
    text = (
        "name: refused\nworkload: decode_bench\nseeds: [0]\nsearch:\n  metric: tokens_per_s\n"
        "  n_trials: 3\n  space:\n    draft.source: {choice: [path]}\n"
        "    decode.depth: {int: [1, 3]}\n"
    )
    summary, store, sweep_id = _search(tmp_path, _spec(tmp_path, text))
    assert summary.failed == 3 and summary.counted == 3 and fake_ray.runs == []
    rows = store.trials(sweep_id)
    assert rows and {t.state for t in rows} == {"failed"}
    assert all("needs draft.path" in (t.error or "") and "Fix" in (t.error or "") for t in rows)
    study = _study(tmp_path, "refused")
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.FAIL}
    assert "needs draft.path" in study.trials[0].user_attrs["specscale.error"]


def test_failed_trials_are_told_fail_and_the_search_goes_on(
    tmp_path: Path, fake_ray: FakeRemote
) -> None:
    fake_ray.metrics = lambda config: None  # every trial raises in the worker
    summary, store, sweep_id = _search(tmp_path, _spec(tmp_path, FAST.format(n=4)))
    assert summary.counted == 4 and summary.best is None
    assert summary.failed == len(set(fake_ray.runs)) == len(fake_ray.runs)
    rows = store.trials(sweep_id)
    assert {t.state for t in rows} == {"failed"}
    assert all((t.error or "").startswith("RuntimeError: boom") for t in rows)
    study = _study(tmp_path)
    assert len(study.trials) == 4
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.FAIL}
    assert study.trials[0].user_attrs["specscale.error"] == "RuntimeError: boom"


def test_a_metric_the_workload_does_not_report_stops_the_search(
    tmp_path: Path, fake_ray: FakeRemote
) -> None:
    text = FAST.format(n=6).replace("metric: acceptance_length", "metric: tokens_per_s")
    summary, store, sweep_id = _search(tmp_path, _spec(tmp_path, text))
    assert summary.error and "'tokens_per_s' is not a metric" in summary.error
    assert "acceptance_length" in summary.error  # names what the workload reports
    assert len(fake_ray.runs) <= 2  # no trial asked after the first answer
    assert summary.counted == 0  # the failed trials are void: a fixed resubmit starts afresh
    assert {t.state for t in store.trials(sweep_id)} == {"completed"}


def test_a_changed_direction_is_refused(tmp_path: Path, fake_ray: FakeRemote) -> None:
    _search(tmp_path, _spec(tmp_path, FAST.format(n=1)))
    spec = _spec(
        tmp_path, FAST.format(n=2).replace("  n_trials", "  direction: minimize\n  n_trials")
    )
    with pytest.raises(OrchestratorError, match="direction: maximize"):
        search.open_study(spec, search.storage_url(None, tmp_path / "runs"))


@pytest.mark.postgres
def test_the_study_lives_in_the_postgresql_schema_of_the_store(
    tmp_path: Path, fake_ray: FakeRemote
) -> None:
    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=test", autocommit=True, connect_timeout=5
        )
    except psycopg.OperationalError:
        pytest.skip("no PostgreSQL at 127.0.0.1:5432")
    schema = f"search_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        db_url = f"{PG_URL}?options=-csearch_path%3D{schema}"
        url = search.storage_url(db_url, tmp_path)
        store = ResultsStore(db_url)
        paths = runner.RunPaths(tmp_path / "runs", tmp_path / "cache")
        for n in (2, 3):  # a first submit, then a resumed one
            spec = _spec(tmp_path, FAST.format(n=n))
            study = search.open_study(spec, url)
            sweep_id, _ = runner.register(store, spec, tmp_path / "spec.yaml", "x", [])
            tracker: Any = FakeTracker()
            summary = run_search(store, tracker, spec, sweep_id, "p", paths, study)
            assert summary.counted == n
        store.close()
        row = conn.execute(f'SELECT count(*) FROM "{schema}".trials').fetchone()
        assert row is not None and row[0] == 3  # Optuna's tables, next to the store's
        row = conn.execute(f'SELECT count(*) FROM "{schema}".ss_trials').fetchone()
        assert row is not None and row[0] == len(set(fake_ray.runs))
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()


# ---------------------------------------------------------------------------------------------
# End to end: the real target and workload, Ray, SQLite, MLflow, through the CLI
# ---------------------------------------------------------------------------------------------


def _smoke_search(n_trials: int) -> str:
    spec = yaml.safe_load(SMOKE.read_text())
    spec["name"] = "smoke-search"
    del spec["grid"]
    spec["search"] = {
        "metric": "acceptance_length",
        "n_trials": n_trials,
        "sampler": "tpe",
        "space": {
            "eval.num_draft_tokens": {"int": [2, 6]},
            "eval.topk": {"int": [1, 3]},
            "draft.vocab_size": {"choice": [2048, 4096]},
        },
    }
    return yaml.safe_dump(spec, sort_keys=False)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    res.stdout = " ".join(res.stdout.split())  # rich wraps long lines at spaces
    return res


@pytest.mark.slow  # real decode_bench trials; the search loop is tested with a fake Ray in CI
def test_search_end_to_end_resumes(tmp_path: Path, cache_dir: Path) -> None:
    spec, run_root = tmp_path / "search.yaml", tmp_path / "runs"
    common = ["--run-root", str(run_root), "--cache-dir", str(cache_dir)]
    spec.write_text(_smoke_search(2))
    res = _cli("submit", str(spec), *common)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "2/2 trials finished in the study" in res.stdout
    assert "best: acceptance_length = " in res.stdout
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("smoke-search")
    assert info is not None
    first = {t.key for t in store.trials(info.id)}

    spec.write_text(_smoke_search(4))  # a changed n_trials keeps the sweep and its study
    res = _cli("submit", str(spec), *common)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "4/4 trials finished in the study" in res.stdout
    assert store.get_sweep("smoke-search").id == info.id  # type: ignore[union-attr]
    trials = store.trials(info.id)
    started = set(re.findall(r"started\s+([0-9a-f]{16})", res.stdout))
    assert not started & first  # none of the first submit's trials ran again
    assert len(trials) == 4 and {t.state for t in trials} == {"completed"}
    assert all(t.attempts == 1 for t in trials)
    df = store.metrics_frame(info.id)
    assert df["acceptance_length"].between(1.0, 3.0).all()
    assert (df["mismatches"] == 0).all()
    study = optuna.load_study(study_name="smoke-search", storage=search.storage_url(None, run_root))
    assert len(study.trials) == 4
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.COMPLETE}
    assert {t.user_attrs["specscale.trial_key"] for t in study.trials} == {t.key for t in trials}

    res = _cli("status", "smoke-search", "--run-root", str(run_root))
    assert res.returncode == 0, res.stderr
    assert "4/4 trials finished" in res.stdout and "best: acceptance_length = " in res.stdout
