"""Sweeps that survive, through the real CLI with the diagnostic ``sleep`` workload: trial errors,
dying workers, ``retry``, ``cancel``, one driver per sweep, and ``kill -9`` of the driver."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from orchestrator.store.results import ResultsStore, TrialInfo
from orchestrator.tracking.tracker import Tracker, default_tracking_uri
from tests.orchestrator.pg import own_server
from tests.orchestrator.servers import shared_ray

ROOT = Path(__file__).resolve().parents[3]


def spec(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nworkload: sleep\n{body}")
    return path


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )


def trials_by_key(run_root: Path, name: str) -> dict[str, TrialInfo]:
    store = ResultsStore.sqlite_under(run_root)
    try:
        info = store.get_sweep(name)
        assert info is not None
        return {t.key: t for t in store.trials(info.id)}
    finally:
        store.close()


def trials(run_root: Path, name: str) -> dict[str, TrialInfo]:
    """The sweep's trials by variant name, else by ``value``."""
    return {
        str(t.overrides.get("variant", t.overrides.get("value"))): t
        for t in trials_by_key(run_root, name).values()
    }


@contextmanager
def running(*args: str) -> Iterator[subprocess.Popen[str]]:
    """``orchestrator ARGS`` in the background; killed and reaped at the end if still running."""
    proc = start(*args)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def kill_9(proc: subprocess.Popen[str], reaper: list[int]) -> None:
    """SIGKILL a driver; its local Ray processes, orphaned, go to ``reaper``."""
    reaper.extend(p.pid for p in psutil.Process(proc.pid).children(recursive=True))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(pred, timeout: float, what: str) -> None:  # noqa: ANN001 - a zero-arg predicate
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except (AssertionError, AttributeError):
            pass  # the DB is not there yet
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def attempts_logged(run_root: Path, name: str, key: str) -> list[dict]:
    path = run_root / name / "trials" / key / "attempts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def reaper() -> Iterator[list[int]]:
    """PIDs to stop at the end: a killed driver's local Ray processes are orphaned."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """One Ray for this module's drivers (:func:`tests.orchestrator.servers.shared_ray`)."""
    with shared_ray() as address:
        yield address


@pytest.fixture(autouse=True)
def _drivers_share_one_ray(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drivers these tests start attach to :func:`ray_address` (``RAY_ADDRESS``), except
    those of a test marked ``local_ray``: the product's default path, a local Ray per driver."""
    if "local_ray" not in request.keywords:
        monkeypatch.setenv("RAY_ADDRESS", request.getfixturevalue("ray_address"))


FAILURES = """seeds: [0]
variants:
  ok: {fail: never}
  error: {fail: error}
  dies_once: {fail: exit, fail_attempts: 1}
  dies_always: {fail: exit, fail_attempts: 9}
base: {seconds: 0.2}
resources: {num_cpus: 1, max_retries: 1}
"""


def test_errors_are_recorded_dying_workers_retried_and_retry_failed(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    path = spec(tmp_path, "failures", FAILURES)
    res = cli("submit", str(path), "--run-root", str(run_root))
    assert res.returncode == 3, res.stdout[-3000:] + res.stderr[-3000:]  # trials failed
    assert "2 completed, 0 already completed (skipped), 2 failed, 0 cancelled." in res.stdout
    assert "2 trials failed" in res.stdout and "exit code 3" in res.stdout
    said = " ".join(res.stdout.split())
    assert f"orchestrator retry failures --failed --run-root {run_root}" in said
    t = trials(run_root, "failures")
    assert {k: v.state for k, v in t.items()} == {
        "ok": "completed",
        "error": "failed",
        "dies_once": "completed",
        "dies_always": "failed",
    }
    # a Python error: failed with its text and traceback, not retried by Ray
    assert "RuntimeError: sleep trial failed on purpose" in (t["error"].error or "")
    assert "Traceback" in (t["error"].error or "")
    assert (run_root / "failures" / "trials" / t["error"].key / "traceback.txt").exists()
    assert len(attempts_logged(run_root, "failures", t["error"].key)) == 1
    # a dying worker: retried by Ray (max_retries: 1), succeeds on its second attempt
    assert len(attempts_logged(run_root, "failures", t["dies_once"].key)) == 2
    assert len(attempts_logged(run_root, "failures", t["dies_always"].key)) == 2
    assert "died" in (t["dies_always"].error or "").lower()
    # the traceback reached MLflow too
    tracker = Tracker(default_tracking_uri(run_root))
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("failures")
    assert info is not None and info.mlflow_run_id
    children = {c["tags"]["specscale.trial_key"]: c for c in tracker.child_runs(info.mlflow_run_id)}
    assert children[t["error"].key]["status"] == "FAILED"
    assert "RuntimeError" in children[t["error"].key]["tags"]["specscale.error"]

    res = cli("retry", "failures", "--failed", "--run-root", str(run_root))
    assert res.returncode == 3, res.stdout[-3000:] + res.stderr[-3000:]  # they failed again
    assert "0 completed, 2 not selected (skipped), 2 failed, 0 cancelled." in res.stdout
    again = trials(run_root, "failures")
    assert {k: v.attempts for k, v in again.items()} == {
        "ok": 1,
        "error": 2,
        "dies_once": 1,
        "dies_always": 2,
    }
    assert len(tracker.child_runs(info.mlflow_run_id)) == 4  # re-runs reuse their child runs

    res = cli("retry", "failures", "--run-root", str(run_root))
    assert res.returncode == 2 and "--failed" in res.stderr


def test_cancel_stops_a_running_sweep_and_a_second_driver_is_refused(
    tmp_path: Path, reaper: list[int]
) -> None:
    run_root = tmp_path / "run"
    path = spec(
        tmp_path,
        "long",
        "grid: {value: [1, 2, 3, 4]}\nbase: {seconds: 120}\nresources: {num_cpus: 1}\n",
    )
    with running("submit", str(path), "--run-root", str(run_root)) as driver:
        wait_for(
            lambda: sum(x.state == "running" for x in trials(run_root, "long").values()) == 2,
            180,
            "two running trials",
        )
        reaper.extend(p.pid for p in psutil.Process(driver.pid).children(recursive=True))
        second = cli("submit", str(path), "--run-root", str(run_root), timeout=120)
        assert second.returncode == 2
        assert "is being run by driver" in second.stderr
        assert "sweep long" not in second.stdout  # refused before any output or MLflow run
        assert len(second.stderr.strip().splitlines()) == 1
        shown = cli("status", "long", "--run-root", str(run_root), timeout=120)
        assert f":{driver.pid}, last heartbeat" in shown.stdout
        t0 = time.monotonic()
        res = cli("cancel", "long", "--run-root", str(run_root), timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "2 pending trials cancelled" in res.stdout
        out, _ = driver.communicate(timeout=60)
        assert time.monotonic() - t0 < 60  # not the 120 s the trials would sleep
    assert driver.returncode == 0, out[-3000:]
    assert "0 completed, 0 already completed (skipped), 0 failed, 4 cancelled." in out, out[-3000:]
    t = trials(run_root, "long")
    assert {x.state for x in t.values()} == {"cancelled"}
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("long")
    assert info is not None and info.mlflow_run_id
    children = Tracker(default_tracking_uri(run_root)).child_runs(info.mlflow_run_id)
    assert sorted(c["status"] for c in children) == ["KILLED", "KILLED"]


@pytest.mark.local_ray  # a crash as users meet it first: the driver's own local Ray orphaned
def test_kill_9_of_the_driver_then_submit_loses_and_duplicates_nothing(
    tmp_path: Path, reaper: list[int]
) -> None:
    run_root = tmp_path / "run"
    values = [1, 2, 3, 4, 5, 6]
    path = spec(
        tmp_path,
        "crash",
        f"grid: {{value: {values}}}\nbase: {{seconds: 3}}\nresources: {{num_cpus: 1}}\n",
    )

    def done_and_running() -> bool:
        states = [x.state for x in trials(run_root, "crash").values()]
        return states.count("completed") >= 2 and states.count("running") >= 1

    with running("submit", str(path), "--run-root", str(run_root)) as driver:
        wait_for(done_and_running, 240, "2 completed trials and 1 running")
        kill_9(driver, reaper)
    before = trials(run_root, "crash")
    kept = {k for k, x in before.items() if x.state == "completed"}
    interrupted = {k for k, x in before.items() if x.state == "running"}
    assert kept and interrupted

    res = cli("submit", str(path), "--run-root", str(run_root))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"{len(kept)} already completed (skipped)" in res.stdout
    after = trials(run_root, "crash")
    assert sorted(after) == [str(v) for v in values]  # one row per trial, no duplicates
    assert {x.state for x in after.values()} == {"completed"}
    assert {k for k, x in after.items() if x.attempts == 1} >= kept  # kept, not re-run
    assert all(after[k].attempts == 2 for k in interrupted)  # re-run once
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("crash")
    assert info is not None and info.mlflow_run_id
    frame = store.metrics_frame(info.id).set_index("value")
    assert list(frame.loc[values, "metric.value"]) == [float(v) for v in values]
    for x in after.values():
        assert len(store.metric_series(x.id, "ticks")) == 30  # 3 s in ticks of 0.1 s
    children = Tracker(default_tracking_uri(run_root)).child_runs(info.mlflow_run_id)
    assert len(children) == len(values)  # the re-run trials reuse their child runs
    assert len({c["tags"]["specscale.trial_key"] for c in children}) == len(values)
    assert {c["status"] for c in children} == {"FINISHED"}
    assert {c["metrics"]["value"] for c in children} == {float(v) for v in values}


def test_python_errors_are_retried_only_when_asked(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    body = (
        "grid: {value: [1]}\nbase: {seconds: 0, fail: error}\n"
        "resources: {num_cpus: 1, max_retries: 2, retry_exceptions: true}\n"
    )
    res = cli("submit", str(spec(tmp_path, "asked", body)), "--run-root", str(run_root))
    assert res.returncode == 3, res.stdout[-3000:] + res.stderr[-3000:]  # its trial failed
    (trial,) = trials(run_root, "asked").values()
    assert trial.state == "failed" and "sleep trial failed on purpose" in (trial.error or "")
    assert [a["attempt"] for a in attempts_logged(run_root, "asked", trial.key)] == [1, 2, 3]


@pytest.mark.postgres
def test_a_postgresql_restart_during_a_sweep_loses_nothing(tmp_path: Path) -> None:
    values = [1, 2, 3, 4, 5, 6]
    path = spec(
        tmp_path,
        "restart",
        f"grid: {{value: {values}}}\nbase: {{seconds: 4}}\nresources: {{num_cpus: 1}}\n",
    )
    with own_server() as server:
        args = ("submit", str(path), "--run-root", str(tmp_path / "run"), "--db-url", server.url)

        def states() -> list[str]:
            store = ResultsStore(server.url)
            try:
                info = store.get_sweep("restart")
                assert info is not None
                return [t.state for t in store.trials(info.id)]
            finally:
                store.close()

        with running(*args) as driver:
            wait_for(lambda: "completed" in states() and "running" in states(), 240, "progress")
            server.stop()
            time.sleep(8)  # the driver's heartbeat and a trial's end meet a dead server
            server.start()
            out, _ = driver.communicate(timeout=300)
        assert driver.returncode == 0, out[-3000:]
        assert "6 completed, 0 already completed (skipped), 0 failed" in out
        assert "retrying" in out  # it did meet the restart
        store = ResultsStore(server.url)
        info = store.get_sweep("restart")
        assert info is not None
        trials_ = store.trials(info.id)
        assert sorted(t.overrides["value"] for t in trials_) == values
        assert {(t.state, t.attempts) for t in trials_} == {("completed", 1)}
        frame = store.metrics_frame(info.id)
        assert sorted(frame["metric.value"]) == [float(v) for v in values]
        store.close()


@pytest.mark.slow
def test_kill_9_during_the_smoke_sweep_then_submit(
    tmp_path: Path, cache_dir: Path, reaper: list[int]
) -> None:
    """The same crash on the real workload (target, training, evaluation): ~5 min."""
    run_root = tmp_path / "run"
    smoke = ROOT / "sweeps" / "smoke-tokens.yaml"
    args = ("submit", str(smoke), "--run-root", str(run_root), "--cache-dir", str(cache_dir))

    def done_and_running() -> bool:
        states = [x.state for x in trials_by_key(run_root, "smoke-tokens").values()]
        return "completed" in states and "running" in states

    with running(*args) as driver:
        wait_for(done_and_running, 900, "a completed and a running smoke trial")
        kill_9(driver, reaper)
    before = trials_by_key(run_root, "smoke-tokens")
    kept = {k for k, x in before.items() if x.state == "completed"}
    res = cli(*args, timeout=1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert f"{len(kept)} already completed (skipped)" in res.stdout
    after = trials_by_key(run_root, "smoke-tokens")
    assert len(after) == 4 and {x.state for x in after.values()} == {"completed"}
    assert all(after[k].attempts == 1 for k in kept)
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("smoke-tokens")
    assert info is not None and info.mlflow_run_id
    frame = store.metrics_frame(info.id)
    assert frame["acceptance_length"].notna().all() and (frame["mismatches"] == 0).all()
    children = Tracker(default_tracking_uri(run_root)).child_runs(info.mlflow_run_id)
    assert len(children) == 4 and {c["status"] for c in children} == {"FINISHED"}


def test_a_search_holds_the_lease_too(tmp_path: Path) -> None:
    run_root = tmp_path / "run"
    body = (
        "search:\n  metric: value\n  n_trials: 3\n  sampler: random\n"
        "  space: {value: {float: [0.0, 1.0]}}\nbase: {seconds: 0.1}\n"
    )
    res = cli("submit", str(spec(tmp_path, "study", body)), "--run-root", str(run_root))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "3 completed, 0 failed, 0 cancelled" in res.stdout
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("study")
    assert info is not None
    assert len(store.trials(info.id, {"completed"})) == 3
    res = cli("cancel", "study", "--run-root", str(run_root))  # nothing runs: nothing to stop
    assert res.returncode == 0 and "no live driver" in res.stdout
