"""Tests of the MLflow sink against an embedded SQLite tracking backend."""

from __future__ import annotations

import hashlib
import math
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import TrackingError
from orchestrator.tracking.tracker import Tracker, default_tracking_uri
from orchestrator.tracking.values import MAX_PARAM_VALUE_LEN, flatten

CONFIG = {
    "workload": "draft_train",
    "pretrain": {"tokens": 20_000, "lr": 3e-4},
    "draft": {"layers": 1, "norm": True},
    "eval": {"sets": ["humaneval", "sharegpt"]},
    "seed": 0,
}


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run_root")


@pytest.fixture(scope="module")
def tracker(run_root: Path) -> Iterator[Tracker]:
    """One MLflow SQLite DB for the module (creating it runs MLflow's migrations, seconds)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        t = Tracker(default_tracking_uri(run_root), experiment="specscale-test")
        yield t
        t.close()


def test_default_tracking_uri(tmp_path: Path) -> None:
    uri = default_tracking_uri(tmp_path / "runs")
    assert uri == f"sqlite:///{(tmp_path / 'runs').resolve()}/mlflow.db"
    assert uri.startswith("sqlite:////")  # absolute path


def test_flatten() -> None:
    flat = flatten(CONFIG)
    assert flat == {
        "workload": "draft_train",
        "pretrain.tokens": "20000",
        "pretrain.lr": "0.0003",
        "draft.layers": "1",
        "draft.norm": "true",
        "eval.sets": '["humaneval", "sharegpt"]',
        "seed": "0",
    }
    assert flatten({"a": {}}, prefix="x.") == {"x.a": "{}"}


def test_flatten_cuts_long_values_with_hash() -> None:
    long_a = "a" * 10_000
    long_b = "a" * 9_999 + "b"
    cut_a = flatten({"v": long_a})["v"]
    cut_b = flatten({"v": long_b})["v"]
    assert len(cut_a) == MAX_PARAM_VALUE_LEN
    assert cut_a.endswith(f"[sha256:{hashlib.sha256(long_a.encode()).hexdigest()[:12]}]")
    assert cut_a != cut_b  # same prefix, different hash
    exact = "x" * MAX_PARAM_VALUE_LEN
    assert flatten({"v": exact})["v"] == exact


def test_experiment_artifacts_next_to_db(tracker: Tracker, run_root: Path) -> None:
    experiment = tracker._client.get_experiment(tracker.experiment_id)
    assert experiment.artifact_location == (run_root.resolve() / "mlartifacts").as_uri()
    # A second tracker on the same URI finds the same experiment.
    again = Tracker(tracker.tracking_uri, experiment="specscale-test")
    assert again.experiment_id == tracker.experiment_id


def test_sweep_with_two_trials(tracker: Tracker, tmp_path: Path) -> None:
    parent = tracker.start_sweep_run("tokens", {"workload": "draft_train", "seeds": [0, 1]}, None)
    trial_runs = []
    for i, tokens in enumerate([20_000, 60_000]):
        config = {**CONFIG, "pretrain": {"tokens": tokens, "lr": 3e-4}, "seed": i}
        run_id = tracker.start_trial_run(
            parent,
            "tokens",
            f"trialkey{i}abcdef",
            config,
            None,
            overrides={"pretrain.tokens": tokens, "seed": i},
        )
        trial_runs.append(run_id)
    ok, bad = trial_runs
    tracker.log_metrics(ok, {"acceptance_length": 1.18, "tokens_per_s": 9.4, "nan": math.nan})
    tracker.log_series(ok, "train_loss", [3.0, 2.0, 1.5])
    artifact = tmp_path / "summary.json"
    artifact.write_text('{"ok": true}')
    tracker.log_artifact(ok, artifact)
    tracker.set_state(ok, "completed")
    tracker.set_state(bad, "failed", error="Traceback\n" + "x" * 10_000)
    tracker.set_state(parent, "completed")

    children = {c["run_id"]: c for c in tracker.child_runs(parent)}
    assert set(children) == set(trial_runs)
    done, failed = children[ok], children[bad]
    assert done["status"] == "FINISHED" and failed["status"] == "FAILED"
    assert done["tags"]["specscale.state"] == "completed"
    assert done["tags"]["specscale.sweep"] == "tokens"
    assert done["tags"]["specscale.trial_key"] == "trialkey0abcdef"
    assert done["tags"]["mlflow.parentRunId"] == parent
    assert done["run_name"].startswith("trialkey") and "tokens=20000" in done["run_name"]
    assert done["params"]["pretrain.tokens"] == "20000"
    assert done["params"]["eval.sets"] == '["humaneval", "sharegpt"]'
    assert done["metrics"]["acceptance_length"] == pytest.approx(1.18)
    assert math.isnan(done["metrics"]["nan"])
    assert done["metrics"]["train_loss"] == pytest.approx(1.5)  # latest step
    history = tracker._client.get_metric_history(ok, "train_loss")
    assert [(m.step, m.value) for m in history] == [(0, 3.0), (1, 2.0), (2, 1.5)]
    assert failed["tags"]["specscale.state"] == "failed"
    assert len(failed["tags"]["specscale.error"]) == 5000
    assert failed["tags"]["specscale.error"].startswith("Traceback")
    artifacts = [f.path for f in tracker._client.list_artifacts(ok)]
    assert artifacts == ["summary.json"]

    parent_run = tracker._client.get_run(parent)
    assert parent_run.info.status == "FINISHED"
    assert parent_run.data.tags["specscale.kind"] == "sweep"
    assert parent_run.data.params["seeds"] == "[0, 1]"


def test_reuse_existing_runs(tracker: Tracker) -> None:
    long_value = "y" * 7000
    config = {**CONFIG, "blob": long_value}
    parent = tracker.start_sweep_run("reuse", {"workload": "draft_train"}, None)
    child = tracker.start_trial_run(parent, "reuse", "k1", config, None)
    tracker.set_state(child, "failed", error="boom")
    tracker.set_state(parent, "failed")

    # Resubmission: the same run ids come back, params re-logged without error.
    assert tracker.start_sweep_run("reuse", {"workload": "draft_train"}, parent) == parent
    again = tracker.start_trial_run(parent, "reuse", "k1", config, child)
    assert again == child
    children = tracker.child_runs(parent)
    assert [c["run_id"] for c in children] == [child]
    run = children[0]
    assert run["status"] == "RUNNING"
    assert run["tags"]["specscale.state"] == "running"
    assert "specscale.error" not in run["tags"]
    assert run["params"]["blob"] == flatten({"blob": long_value})["blob"]
    tracker.set_state(child, "cancelled")
    assert tracker.child_runs(parent)[0]["status"] == "KILLED"

    # A deleted or unknown run id is replaced by a new run.
    tracker._client.delete_run(child)
    fresh = tracker.start_trial_run(parent, "reuse", "k1", config, child)
    assert fresh != child
    assert tracker.start_trial_run(parent, "reuse", "k2", config, "0" * 32) not in (child, fresh)
    assert len(tracker.child_runs(parent)) == 2


def test_a_run_the_db_never_recorded_is_found_not_duplicated(tracker: Tracker) -> None:
    """A driver killed after MLflow created a trial's run but before SQL recorded its id: the
    resubmitted trial (no run id known) gets that run back, not a second child run."""
    parent = tracker.start_sweep_run("unrecorded", {"workload": "sleep"}, None)
    first = tracker.start_trial_run(parent, "unrecorded", "k9", CONFIG, None)
    again = tracker.start_trial_run(parent, "unrecorded", "k9", CONFIG, None)
    assert again == first and len(tracker.child_runs(parent)) == 1
    other = tracker.start_trial_run(parent, "unrecorded", "k10", CONFIG, None)  # control
    assert other != first and len(tracker.child_runs(parent)) == 2


def test_tracker_pickles(tracker: Tracker) -> None:
    clone = pickle.loads(pickle.dumps(tracker))
    assert clone.tracking_uri == tracker.tracking_uri
    assert clone.experiment_id == tracker.experiment_id
    parent = clone.start_sweep_run("pickled", {}, None)
    assert tracker._client.get_run(parent).data.tags["specscale.sweep"] == "pickled"


def test_set_state_rejects_unknown_state(tracker: Tracker) -> None:
    with pytest.raises(ValueError):
        tracker.set_state("whatever", "done")


def test_missing_artifact(tracker: Tracker, tmp_path: Path) -> None:
    parent = tracker.start_sweep_run("artifacts", {}, None)
    with pytest.raises(TrackingError, match="does not exist"):
        tracker.log_artifact(parent, tmp_path / "nope.txt")


def test_backend_refusal_is_tracking_error(tracker: Tracker) -> None:
    with pytest.raises(TrackingError, match="MLflow at"):
        tracker.log_metrics("0" * 32, {"x": 1.0})  # unknown run on a live backend


def test_unreachable_server_is_tracking_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with pytest.raises(TrackingError, match="MLflow at http://u:\\*\\*\\*@127.0.0.1:1") as info:
        Tracker("http://u:pw@127.0.0.1:1")
    assert "\n" not in str(info.value)


def test_a_refit_that_changed_nothing_adds_nothing_to_the_history(tracker: Tracker) -> None:
    """update_metrics (a sweep's fit on its parent run): equal values, NaN included, are not
    logged again; a changed value is."""
    run = tracker.start_sweep_run("s", {}, None)
    tracker.update_metrics(run, {"fit.a": 0.14, "fit.r2": math.nan})
    tracker.update_metrics(run, {"fit.a": 0.14, "fit.r2": math.nan})
    client = tracker._client
    assert len(client.get_metric_history(run, "fit.a")) == 1
    assert len(client.get_metric_history(run, "fit.r2")) == 1
    tracker.update_metrics(run, {"fit.a": 0.15, "fit.r2": math.nan})
    assert [m.value for m in client.get_metric_history(run, "fit.a")] == [0.14, 0.15]


def test_a_sweeps_parent_run_is_found_by_its_results_db(tracker: Tracker) -> None:
    """The DB names a run of another tracking store: the parent run tagged with the same
    results DB and sweep is reused, not made twice; another DB's sweep of that name is not."""
    first = tracker.start_sweep_run("tokens", {}, None, record="sqlite:////a/results.db")
    again = tracker.start_sweep_run("tokens", {}, "elsewhere-id", record="sqlite:////a/results.db")
    other = tracker.start_sweep_run("tokens", {}, None, record="sqlite:////b/results.db")
    assert again == first and other != first
    assert tracker.start_sweep_run("tokens", {}, None) not in (first, other)  # no DB: new
