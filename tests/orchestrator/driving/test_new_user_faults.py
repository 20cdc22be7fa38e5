"""What a new user tripped over (issue 23), orchestrator side: messages, refusals, ``status``,
``cancel``, ``retry``, a search's closing lines, and a resubmit after ``mlflow gc``.

Refusals run through the CLI (typer's runner, in process) and must be one line, with
``file:line`` where a spec is involved, a ``Fix:``, exit code 2, nothing written. The stores
are real SQLite files and MLflow SQLite stores under ``tmp_path``; no Ray is started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.commands import render
from orchestrator.driving import guards, runner, service
from orchestrator.driving.events import SweepFinished, SweepOpened, Tally
from orchestrator.driving.sweep_run import SweepRun
from orchestrator.kinds.search.study import SearchSummary
from orchestrator.store.results import ResultsStore, TrialState, driver_id
from orchestrator.tracking.tracker import TAG_PARENT, Tracker, default_tracking_uri

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=ENV)


def _refused(res: Any, where: str | None = None) -> str:
    """The one line of a refusal (exit 2, a Fix:, ``where`` in it)."""
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert "Fix:" in lines[0], lines[0]
    if where is not None:
        assert where in lines[0], lines[0]
    return lines[0]


def _spec(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- 2. messages -----------------------------------------------------------------------------


def test_top_level_help_shows_help_as_a_flag() -> None:
    res = _invoke("--help")
    assert res.exit_code == 0, res.output
    row = next(r for r in res.output.splitlines() if re.search(r"│\s+--help\s", r))
    assert "<bool>" not in row and "BOOLEAN" not in row.upper(), row


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("submit", "submit [OPTIONS] SPEC"),
        ("status", "status [OPTIONS] SWEEP"),
        ("compare", "compare [OPTIONS] SWEEP_A SWEEP_B"),
        ("report", "report [OPTIONS] [SWEEP]"),
    ],
)
def test_usage_lines_name_their_arguments(command: str, usage: str) -> None:
    res = _invoke(command, "--help")
    assert res.exit_code == 0, res.output
    assert usage in res.output, res.output
    assert not re.search(r"\{[a-z_]+\}", res.output), res.output


def test_a_missing_argument_is_named_as_in_the_usage_line() -> None:
    res = _invoke("status")
    assert res.exit_code == 2
    assert "Missing argument 'SWEEP'" in res.output and "{sweep}" not in res.output


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"name: t\n\x00\x01binary\n", 2),  # a NUL byte: valid UTF-8, not YAML
        (b"name: t\ngrid:\n  \x89PNG\xff\xfe\n", 3),  # not UTF-8 at all
    ],
    ids=["nul-byte", "not-utf8"],
)
def test_a_binary_spec_gets_a_fix(content: bytes, line: int, tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(content)
    run_root = tmp_path / "runs"
    _refused(_invoke("submit", str(path), "--run-root", str(run_root)), f"{path}:{line}:")
    assert not run_root.exists()


def test_two_merge_keys_suggest_one_merge_of_both(tmp_path: Path) -> None:
    path = _spec(
        tmp_path,
        "name: m\nx-a: &a {seconds: 1}\nx-b: &b {fail: never}\nbase:\n  <<: *a\n  <<: *b\n",
    )
    line = _refused(_invoke("submit", str(path), "--dry-run"), f"{path}:6:")
    assert "<<: [*a, *b]" in line, line


# -- 3. seed under base ----------------------------------------------------------------------


def test_seed_under_base_is_refused(tmp_path: Path) -> None:
    path = _spec(tmp_path, "name: t\nseeds: [0, 1]\nbase:\n  sft: {tokens: 512}\n  seed: 7\n")
    run_root = tmp_path / "runs"
    line = _refused(_invoke("submit", str(path), "--run-root", str(run_root)), f"{path}:5:")
    assert "seeds: [7]" in line and "base.seed" in line, line
    assert not run_root.exists()


# -- 4. device: cuda has a line ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            "workload: decode_bench\nbase:\n  device: cuda\n",
            4,
        ),  # a plain ValueError of the workload
        ("base:\n  sft: {tokens: 512}\nvariants:\n  gpu: {device: cuda}\n", 5),  # a variant
    ],
    ids=["decode_bench", "variant"],
)
def test_a_device_cuda_refusal_names_its_line(
    body: str, line: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = _spec(tmp_path, "name: t\n" + body)
    run_root = tmp_path / "runs"
    text = _refused(_invoke("submit", str(path), "--run-root", str(run_root)), f"{path}:{line}:")
    assert "cuda" in text
    assert not run_root.exists()


# -- 5. memory larger than the machine -------------------------------------------------------


def test_more_memory_than_this_machine_is_refused_at_its_line(tmp_path: Path) -> None:
    have = guards.machine_memory_gb()
    assert 0.1 < have < 1e6
    body = "workload: sleep\ngrid:\n  value: [1]\nresources:\n  num_cpus: 1\n  memory_gb: {}\n"
    path = _spec(tmp_path, "name: t\n" + body.format(int(have * 4) + 1))
    run_root = tmp_path / "runs"
    text = _refused(_invoke("submit", str(path), "--run-root", str(run_root)), f"{path}:7:")
    assert "resources.memory_gb" in text and "GiB" in text
    assert not run_root.exists()
    fits = service.plan(_spec(tmp_path, "name: t\n" + body.format(max(0.5, have / 4)), "ok.yaml"))
    guards.check_fits_locally(fits.spec, fits.path)  # within the machine: accepted


# -- a store of a sleep sweep, made without Ray ------------------------------------------------

SLEEP = "name: {name}\nworkload: sleep\ngrid:\n  value: [1, 2]\nbase: {{seconds: 0.1}}\n"


def _sweep(tmp_path: Path, name: str = "nap") -> tuple[Path, ResultsStore, int, service.Plan]:
    run_root = tmp_path / "runs"
    plan = service.plan(_spec(tmp_path, SLEEP.format(name=name), f"{name}.yaml"))
    store = ResultsStore.sqlite_under(run_root)
    sweep_id, _ = runner.register(store, plan.spec, plan.path, plan.text, plan.trials)
    return run_root, store, sweep_id, plan


# -- 6. cancel runs the shared-DB check ------------------------------------------------------


def test_cancel_refuses_a_results_db_that_is_mlflows_default_store(tmp_path: Path) -> None:
    run_root, store, _, _ = _sweep(tmp_path)
    store.close()
    (run_root / "results.db").rename(run_root / "mlflow.db")
    db_url = f"sqlite:///{run_root / 'mlflow.db'}"
    res = _invoke("cancel", "nap", "--run-root", str(run_root), "--db-url", db_url)
    assert "is the results DB" in _refused(res)


# -- a refusal that opens the results DB leaves the run root as it was (issue 33) -------------


@pytest.mark.parametrize(
    "argv",
    [("status", "nope"), ("fit", "nope"), ("cancel", "nope"), ("plan",)],
    ids=["status", "fit", "cancel", "plan"],
)
def test_a_refusal_that_opens_the_db_leaves_the_run_root_as_it_was(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    run_root, store, _, _ = _sweep(tmp_path)
    store.close()

    def snapshot() -> dict[str, int]:
        return {str(p.relative_to(run_root)): p.stat().st_size for p in run_root.rglob("*")}

    before = snapshot()
    assert list(before) == ["results.db"], before  # registering a sweep left no lock file
    res = _invoke(*argv, "--run-root", str(run_root))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert snapshot() == before


# -- 7. status after a cancel ------------------------------------------------------------------


def test_status_shows_the_final_state_once_a_cancelled_sweep_ended(tmp_path: Path) -> None:
    run_root, store, sweep_id, _ = _sweep(tmp_path)
    me = driver_id()
    store.claim_sweep(sweep_id, me, stale_after_s=60)
    store.request_cancel(sweep_id, stale_after_s=60)  # this process is the live driver
    res = _invoke("status", "nap", "--run-root", str(run_root))
    assert res.exit_code == 0, res.output
    assert "cancel requested at" in res.output and "stopping" in res.output
    store.release_sweep(sweep_id, me)  # the driver ended
    res = _invoke("status", "nap", "--run-root", str(run_root))
    assert res.exit_code == 0, res.output
    assert "cancel requested" not in res.output
    assert "the sweep ended with 2 of 2 trials cancelled" in res.output
    store.close()


# -- 8. a search's closing lines ---------------------------------------------------------------


def test_a_searchs_closing_lines_print_the_index(capsys: pytest.CaptureFixture[str]) -> None:
    report = SimpleNamespace(dashboard=Path("/r/s/dashboard.html"), index=Path("/r/index.html"))
    done = SweepFinished(
        "s", Tally(completed=2), report, "sqlite:///x", "1", SearchSummary(n_trials=2, before=0)
    )  # type: ignore[arg-type]
    render.print_finished(done, metric="value")
    assert "index of all sweeps: /r/index.html" in capsys.readouterr().out


# -- 9. retry opens the results DB once --------------------------------------------------------


def test_retry_opens_the_results_db_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_root, store, _, _ = _sweep(tmp_path)
    store.close()
    opened: list[str] = []
    real = ResultsStore.__init__

    def counting(self: ResultsStore, url: str, **kwargs: Any) -> None:
        opened.append(url)
        real(self, url, **kwargs)

    monkeypatch.setattr(ResultsStore, "__init__", counting)
    res = _invoke("retry", "nap", "--failed", "--run-root", str(run_root))
    assert res.exit_code == 0 and "nothing to re-run" in res.output, res.output
    assert len(opened) == 1, opened


# -- 11. a resubmit after `mlflow gc` --------------------------------------------------------


def _completed_sweep(tmp_path: Path) -> tuple[Path, ResultsStore, int, service.Plan, str, str]:
    """A sweep of 2 completed trials recorded in SQL and in MLflow (SQLite under the run root),
    as a finished submit leaves it: (run root, store, sweep id, plan, tracking URI, parent)."""
    run_root, store, sweep_id, plan = _sweep(tmp_path)
    uri = default_tracking_uri(run_root)
    tracker = Tracker(uri)
    parent = tracker.start_sweep_run(plan.spec.name, {}, None, record=store.url)  # as submit
    store.set_sweep_mlflow_run(sweep_id, parent)
    run = SweepRun(
        store, tracker, plan.spec, sweep_id, parent, service.Destinations(run_root).paths, "me"
    )
    for t in store.trials(sweep_id):
        ref = run.open_child(t)
        value = float(t.overrides["value"])
        run.record(
            ref, state=TrialState.COMPLETED, metrics={"value": value}, series={"curve": [3, 2, 1]}
        )
    return run_root, store, sweep_id, plan, uri, parent


def _gc(uri: str, *, experiment: str | None = None, run: str | None = None) -> None:
    """What a user does: delete, then ``mlflow gc`` (the real CLI) purges it for good."""
    client = MlflowClient(uri)
    if experiment is not None:
        client.delete_experiment(experiment)
        target = ["--experiment-ids", experiment]
    else:
        assert run is not None
        client.delete_run(run)
        target = ["--run-ids", run]
    mlflow = Path(sys.executable).with_name("mlflow")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_TRACKING_URI": uri}
    cmd = [str(mlflow), "gc", "--backend-store-uri", uri, *target]
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=120)


def test_a_resubmit_after_mlflow_gc_recreates_the_runs_from_the_db(tmp_path: Path) -> None:
    run_root, store, sweep_id, plan, uri, old_parent = _completed_sweep(tmp_path)
    experiment = Tracker(uri).experiment_id
    _gc(uri, experiment=experiment)
    tracker = Tracker(uri)  # the experiment is made again; its runs are gone for good
    assert MlflowClient(uri).search_runs([tracker.experiment_id]) == []
    parent = tracker.start_sweep_run(plan.spec.name, {}, old_parent)
    assert parent != old_parent and tracker.child_runs(parent) == []
    run = SweepRun(
        store, tracker, plan.spec, sweep_id, parent, service.Destinations(run_root).paths, "me"
    )
    assert run.mirror.sync() == 2
    children = {c["run_id"]: c for c in tracker.child_runs(parent)}
    trials = store.trials(sweep_id)
    assert {t.mlflow_run_id for t in trials} == set(children)  # the DB names the new runs
    for t in trials:
        child = children[t.mlflow_run_id]
        assert child["status"] == "FINISHED" and child["tags"]["specscale.state"] == "completed"
        assert child["metrics"]["value"] == float(t.overrides["value"])
        assert float(child["params"]["value"]) == float(t.overrides["value"])  # the config
        assert t.state == TrialState.COMPLETED
    history = MlflowClient(uri).get_metric_history(next(iter(children)), "curve")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [3.0, 2.0, 1.0]
    assert run.mirror.sync() == 0  # once recreated, nothing more to do
    opened = SweepOpened(plan.spec.name, "2 trials", store.url, uri, parent, 0, 2, old_parent, 2)
    line = render.lost_runs_line(opened)
    assert "mlflow gc" in line and "2 completed trials recreated" in line, line
    assert old_parent[:8] in line
    store.close()


def test_trial_runs_kept_when_only_the_parent_was_purged_move_to_the_new_parent(
    tmp_path: Path,
) -> None:
    run_root, store, sweep_id, plan, uri, old_parent = _completed_sweep(tmp_path)
    before = {t.mlflow_run_id for t in store.trials(sweep_id)}
    _gc(uri, run=old_parent)
    tracker = Tracker(uri)
    parent = tracker.start_sweep_run(plan.spec.name, {}, old_parent)
    assert parent != old_parent
    run = SweepRun(
        store, tracker, plan.spec, sweep_id, parent, service.Destinations(run_root).paths, "me"
    )
    assert run.mirror.sync() == 0  # nothing recreated: the trial runs are alive
    assert {c["run_id"] for c in tracker.child_runs(parent)} == before
    for run_id in before:
        assert MlflowClient(uri).get_run(str(run_id)).data.tags[TAG_PARENT] == parent
    store.close()


def test_a_completed_trial_whose_run_mlflow_left_running_is_finished_on_resubmit(
    tmp_path: Path,
) -> None:
    """A driver killed between the DB's final state and MLflow's (the kill -9 test's race)."""
    run_root, store, sweep_id, plan, uri, parent = _completed_sweep(tmp_path)
    left = next(iter(store.trials(sweep_id))).mlflow_run_id
    assert left is not None
    MlflowClient(uri).update_run(left, status="RUNNING")
    tracker = Tracker(uri)
    run = SweepRun(
        store, tracker, plan.spec, sweep_id, parent, service.Destinations(run_root).paths, "me"
    )
    assert run.mirror.sync() == 0  # finished, not recreated
    children = {c["run_id"]: c for c in tracker.child_runs(parent)}
    assert {c["status"] for c in children.values()} == {"FINISHED"}
    assert children[left]["tags"]["specscale.state"] == "completed"
    # written again from SQL: the metrics MLflow already had are not logged twice
    client = MlflowClient(uri)
    assert [m.step for m in client.get_metric_history(left, "curve")] == [0, 1, 2]
    assert len(client.get_metric_history(left, "value")) == 1
    store.close()


def test_publishing_a_trial_twice_adds_nothing_to_its_run(tmp_path: Path) -> None:
    """The mirror is idempotent: a trial copied from SQL to MLflow again (a resubmit, `mirror`,
    a crash between SQL and MLflow) leaves its run as it was."""
    run_root, store, sweep_id, plan, uri, parent = _completed_sweep(tmp_path)
    tracker = Tracker(uri)
    run = SweepRun(
        store, tracker, plan.spec, sweep_id, parent, service.Destinations(run_root).paths, "me"
    )
    client = MlflowClient(uri)
    trial = store.trials(sweep_id)[0]
    assert trial.mlflow_run_id is not None
    before = client.get_run(trial.mlflow_run_id).data
    history = client.get_metric_history(trial.mlflow_run_id, "curve")
    assert run.mirror.open(trial) == trial.mlflow_run_id  # found by its id, not made again
    run.mirror.publish(trial, trial.mlflow_run_id)
    after = client.get_run(trial.mlflow_run_id).data
    assert after.metrics == before.metrics and after.params == before.params
    assert client.get_metric_history(trial.mlflow_run_id, "curve") == history
    assert len(tracker.child_runs(parent)) == 2
    store.close()


# -- a dry run runs the submit's checks, the resubmit guard included, and writes nothing -------


def test_a_dry_run_refuses_a_changed_grid_of_a_recorded_sweep(tmp_path: Path) -> None:
    run_root, store, _, _ = _sweep(tmp_path)
    store.close()
    before = sorted(p.name for p in run_root.iterdir())
    changed = _spec(tmp_path, SLEEP.format(name="nap").replace("[1, 2]", "[1, 3]"), "nap2.yaml")
    res = CliRunner().invoke(
        app, ["submit", str(changed), "--dry-run", "--run-root", str(run_root)]
    )
    assert res.exit_code == 2, res.output
    assert "nap2.yaml:" in res.output and "Fix:" in res.output
    assert sorted(p.name for p in run_root.iterdir()) == before


def test_a_dry_run_of_a_new_sweep_creates_no_results_db(tmp_path: Path) -> None:
    spec = _spec(tmp_path, SLEEP.format(name="fresh"), "fresh.yaml")
    run_root = tmp_path / "runs"
    res = CliRunner().invoke(app, ["submit", str(spec), "--dry-run", "--run-root", str(run_root)])
    assert res.exit_code == 0, res.output
    assert "Nothing was run or written" in res.output and not run_root.exists()


@pytest.mark.parametrize(
    ("text", "line", "where"),
    [("name: t\nseeds: [0\nbase: {}\n", 3, "lines 2-3"), ("", 1, "sweeps/smoke-tokens.yaml")],
    ids=["unclosed-bracket", "empty-file"],
)
def test_broken_yaml_and_an_empty_spec_get_a_fix(
    tmp_path: Path, text: str, line: int, where: str
) -> None:
    spec = _spec(tmp_path, text)
    res = CliRunner().invoke(
        app, ["submit", str(spec), "--dry-run", "--run-root", str(tmp_path / "r")]
    )
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert f"{spec}:{line}:" in said and "Fix:" in said and where in said, said
    assert not (tmp_path / "r").exists()


def test_mirror_rebuilds_a_sweeps_mlflow_runs_from_the_db_once(tmp_path: Path) -> None:
    """``orchestrator mirror``: SQL is the system of record; a new, empty tracking store gets
    the sweep's parent run, a child run per completed trial (config, metrics, series) and the
    fit, and the DB names the new runs; run again, nothing more is made."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    run_root, store, sweep_id, plan, _uri, old_parent = _completed_sweep(tmp_path)
    fresh = f"sqlite:///{tmp_path / 'elsewhere' / 'mlflow.db'}"
    (tmp_path / "elsewhere").mkdir()
    argv = ["mirror", plan.spec.name, "--run-root", str(run_root), "--tracking-uri", fresh]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert "2 trial runs recreated from the DB" in res.output
    info = store.get_sweep(plan.spec.name)
    assert info is not None and info.mlflow_run_id and info.mlflow_run_id != old_parent
    tracker = Tracker(fresh)
    children = {c["run_id"]: c for c in tracker.child_runs(info.mlflow_run_id)}
    trials = store.trials(sweep_id)
    assert {t.mlflow_run_id for t in trials} == set(children)
    for t in trials:
        assert children[t.mlflow_run_id]["metrics"]["value"] == float(t.overrides["value"])
        assert children[t.mlflow_run_id]["status"] == "FINISHED"
    parent = MlflowClient(fresh).get_run(info.mlflow_run_id)
    assert parent.info.status == "FINISHED"
    again = CliRunner().invoke(app, argv)
    assert again.exit_code == 0 and "0 trial runs recreated" in again.output, again.output
    assert len(tracker.child_runs(info.mlflow_run_id)) == 2
    # back in the sweep's own store: its runs are found by their keys, none made twice
    home = ["mirror", plan.spec.name, "--run-root", str(run_root)]
    back = CliRunner().invoke(app, home)
    assert back.exit_code == 0 and "0 trial runs recreated" in back.output, back.output
    info = store.get_sweep(plan.spec.name)
    assert info is not None and info.mlflow_run_id == old_parent
    own = Tracker(_uri)
    assert {c["run_id"] for c in own.child_runs(old_parent)} == {
        t.mlflow_run_id for t in store.trials(sweep_id)
    }
    assert len(MlflowClient(_uri).search_runs([own.experiment_id])) == 3  # parent, 2 trials
    missing = CliRunner().invoke(app, ["mirror", "nope", "--run-root", str(run_root)])
    assert missing.exit_code == 2 and "Fix:" in missing.output
    store.close()
