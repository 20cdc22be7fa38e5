"""Sweeps on a real multi-node Ray cluster (``ray.cluster_utils.Cluster``, 2 nodes on 127.0.0.1):
every node checked for the shared run root, trials spread over both nodes and recorded by the
driver, a node removed mid-trial, and the driver submitted as a Ray Job."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.driving import guards
from orchestrator.store.results import ResultsStore
from orchestrator.tracking.tracker import Tracker, default_tracking_uri
from tests.orchestrator.driving.test_control import ROOT, cli, running, spec, trials, wait_for
from tests.orchestrator.pg import fresh_schema

SECRET = "s3cretpw"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head node (1 CPU, job server on a free loopback port) and one worker node (1 CPU)."""
    from ray.cluster_utils import Cluster

    saved = dict(os.environ)
    # a Ray Job's entrypoint runs `python` from the cluster's PATH: this interpreter's
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    # ray.init(address="127.0.0.1:port") rewrites loopback to this machine's network IP
    # (ray/_private/services.py resolve_ip_for_localhost), where a cluster bound to 127.0.0.1
    # does not listen; with this switch Ray keeps loopback. Drivers and jobs inherit it.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    port = _free_port()
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": port,
            # each node's agent HTTP server defaults to port 52365: two nodes on one machine
            # (or any other local Ray) collide, and the job server then has no agent
            "dashboard_agent_listen_port": _free_port(),
        },
    )
    c.job_server = f"http://127.0.0.1:{port}"
    c.worker_temp = tempfile.mkdtemp(prefix="rw", dir="/tmp")  # short: Unix socket paths
    _add_worker(c)
    try:
        yield c
    finally:
        c.shutdown()
        shutil.rmtree(c.worker_temp, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved)


def _add_worker(c: Any) -> None:
    """Add the worker node (1 CPU) with Ray files of its own, as on a machine of its own: nodes
    sharing one session folder unpack a job's working_dir into one place, and the second node
    to run a task of the job deletes and unpacks it again under the job's running driver."""
    c.add_node(
        num_cpus=1,
        node_ip_address="127.0.0.1",
        dashboard_agent_listen_port=_free_port(),
        temp_dir=c.worker_temp,
    )
    c.wait_for_nodes()


def _where(run_root: Path, name: str, key: str) -> list[str | None]:
    path = run_root / name / "trials" / key / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(x)["node_id"] for x in path.read_text().splitlines()]


@pytest.fixture
def connected(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process as a Ray driver of the cluster, with its two nodes (one added back if a
    test removed the worker)."""
    import ray
    from ray._private import ray_constants

    # what RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 does, in a process that imported Ray before
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    if not cluster.worker_nodes:
        _add_worker(cluster)
    ray.init(address=cluster.address, logging_level=logging.WARNING)
    try:
        yield cluster
    finally:
        ray.shutdown()


def _node_ids(cluster: Any) -> set[str]:
    return {cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)}


def test_every_node_is_asked_whether_it_sees_the_run_root(connected: Any, tmp_path: Path) -> None:
    from orchestrator.driving.service import Destinations

    probe = tmp_path / "probe"
    probe.write_text("token")
    assert guards.nodes_not_seeing([(str(probe), "token")]) == {}
    gone = str(tmp_path / "gone")
    blind = guards.nodes_not_seeing([(str(probe), "token"), (gone, "token")])
    assert list(blind.values()) == [[gone], [gone]]  # a task ran on each of the two nodes
    assert {name.split(" (")[1][:8] for name in blind} == {n[:8] for n in _node_ids(connected)}
    assert len(guards.nodes_not_seeing([(str(probe), "other content")])) == 2

    run_root = tmp_path / "run"
    guards.check_cluster_storage(Destinations(run_root=run_root, address=connected.address))
    assert not list(run_root.rglob(".specscale-probe-*"))  # probes removed


def test_a_node_blind_to_the_run_root_stops_submit_and_a_shared_one_records_both_nodes(
    connected: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both nodes share this machine's disk: the refusal is seen through a stubbed probe."""
    from mlflow import MlflowClient

    run_root = tmp_path / "run"
    body = "grid: {value: [1, 2]}\nbase: {seconds: 0.2}\nresources: {num_cpus: 1}\n"
    flags = ["--run-root", str(run_root), "--address", connected.address]
    runner = CliRunner()

    # a shared run root: trials on both nodes, their results recorded by the driver
    res = runner.invoke(app, ["submit", str(spec(tmp_path, "shared", body)), *flags])
    assert res.exit_code == 0, res.output[-3000:]
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("shared")
    assert info is not None and info.mlflow_run_id
    done = {t.key: t for t in store.trials(info.id)}
    assert {t.state for t in done.values()} == {"completed"}
    worker = {n.node_id for n in connected.worker_nodes}
    on_worker = [k for k in done if set(_where(run_root, "shared", k)) <= worker]
    assert on_worker, {k: _where(run_root, "shared", k) for k in done}  # 2 in flight, 1 CPU each
    tracker = Tracker(default_tracking_uri(run_root))
    children = {c["tags"]["specscale.trial_key"]: c for c in tracker.child_runs(info.mlflow_run_id)}
    for key in on_worker:
        value = float(done[key].overrides["value"])
        assert store.metric_series(done[key].id, "value") == [value]
        assert children[key]["metrics"]["value"] == value
        assert children[key]["status"] == "FINISHED"

    # one node does not see it: refused with the fix, before a trial or a run is written
    runs_before = len(MlflowClient(tracker.tracking_uri).search_runs([tracker.experiment_id]))
    monkeypatch.setattr(
        guards, "nodes_not_seeing", lambda probes: {"10.0.0.9 (0badcafe)": [probes[0][0]]}
    )
    res = runner.invoke(app, ["submit", str(spec(tmp_path, "blind", body)), *flags])
    message = res.output.strip()
    assert res.exit_code == 2, message
    assert len(message.splitlines()) == 1, message
    assert f"--run-root {run_root} is not visible on 1 node(s)" in message
    assert "10.0.0.9 (0badcafe)" in message and "Fix: give a folder every node mounts" in message
    assert store.get_sweep("blind") is None  # no sweep, no trials
    assert [s.name for s in store.list_sweeps()] == ["shared"]
    assert len(MlflowClient(tracker.tracking_uri).search_runs([tracker.experiment_id])) == (
        runs_before
    )
    assert not (run_root / "blind").exists()
    assert not list(run_root.rglob(".specscale-probe-*"))


def _wait_for_job(client: Any, job_id: str) -> Any:
    from ray.job_submission import JobStatus

    deadline = time.monotonic() + 400
    status = client.get_job_status(job_id)
    while status not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.monotonic() < deadline, client.get_job_logs(job_id)[-3000:]
        time.sleep(1)
        status = client.get_job_status(job_id)
    return status


def _submit_job(cluster: Any, tmp_path: Path, name: str, base: str, *args: str) -> Any:
    """``orchestrator submit --ray-job`` of a 2-trial sleep sweep; the finished CLI process."""
    path = spec(tmp_path, name, "grid: {value: [1, 2]}\n" + base)
    local = ROOT / "sweeps" / f"_test_{name}_{os.getpid()}.yaml"  # the spec must be uploaded
    local.write_text(path.read_text())
    try:
        res = cli(
            "submit",
            str(local.relative_to(ROOT)),
            "--ray-job",
            "--address",
            cluster.job_server,
            *args,
            timeout=300,
        )
    finally:
        local.unlink()
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_submit_as_a_ray_job(cluster: Any, tmp_path: Path) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    run_root = tmp_path / "run"
    res = _submit_job(cluster, tmp_path, "job", "base: {seconds: 1}\n", "--run-root", str(run_root))
    job_id = res.stdout.strip().splitlines()[-1]
    client = JobSubmissionClient(cluster.job_server)
    status = _wait_for_job(client, job_id)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    assert "2 completed" in logs
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("job")
    assert info is not None
    assert {t.state for t in store.trials(info.id)} == {"completed"}


def test_a_ray_job_keeps_the_db_password_out_of_its_info(cluster: Any, tmp_path: Path) -> None:
    """A --db-url with a password reaches the job in a 0600 file under the run root, not in
    its runtime_env: ``ray job list`` and the job's info do not show it; the job records there."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    run_root = tmp_path / "run"
    with fresh_schema("job") as (_schema, url):
        db_url = url.replace("postgres@", f"postgres:{SECRET}@")  # trust auth ignores it
        args = ("--run-root", str(run_root), "--db-url", db_url)
        res = _submit_job(cluster, tmp_path, "pgjob", "base: {seconds: 0.2}\n", *args)
        assert SECRET not in res.stdout + res.stderr
        job_id = res.stdout.strip().splitlines()[-1]
        client = JobSubmissionClient(cluster.job_server)
        info = client.get_job_info(job_id)
        env = (info.runtime_env or {}).get("env_vars", {})
        assert set(env) == {"SPECSCALE_URLS_FILE"}, env
        assert Path(env["SPECSCALE_URLS_FILE"]).parent == run_root / ".ray-jobs"
        shown = [repr(info), info.entrypoint, json.dumps(info.runtime_env)]
        status = _wait_for_job(client, job_id)
        logs = client.get_job_logs(job_id)
        assert status == JobStatus.SUCCEEDED, logs[-3000:]
        listed = subprocess.run(
            [str(Path(sys.executable).parent / "ray"), "job", "list"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "RAY_ADDRESS": cluster.job_server},
        )
        assert listed.returncode == 0 and job_id in listed.stdout, listed.stderr[-2000:]
        for text in [*shown, logs, listed.stdout, listed.stderr]:
            assert SECRET not in text, text
        assert not list((run_root / ".ray-jobs").iterdir())  # read once by the job, removed
        store = ResultsStore(db_url)
        try:
            found = store.get_sweep("pgjob")
            assert found is not None
            assert {t.state for t in store.trials(found.id)} == {"completed"}
        finally:
            store.close()
        assert not (run_root / "results.db").exists()


def test_ray_job_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each refused before anything connects or is written: in this process (the refusals are
    the CLI's own checks; ``test_bad_input`` covers a refusal through a real shell)."""
    monkeypatch.chdir(ROOT)
    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(app, list(args))

    path = spec(tmp_path, "job", "grid: {value: [1]}\n")
    res = cli("submit", str(path), "--ray-job", "--address", "127.0.0.1:6379")
    assert res.exit_code == 2 and "job server" in res.stderr
    res = cli("submit", str(path), "--ray-job", "--address", "http://127.0.0.1:1")
    assert res.exit_code == 2 and "put the spec inside it" in res.stderr
    job = ["submit", "sweeps/sleep.yaml", "--ray-job", "--address", "http://127.0.0.1:1"]
    res = cli(*job, "--run-root", "runs")
    assert res.exit_code == 2 and "absolute --run-root" in res.stderr
    # both URLs given, so a relative run root would do, but a password must not go in the env
    res = cli(
        *job,
        "--run-root",
        "runs",
        "--db-url",
        f"postgresql://u:{SECRET}@db/x",
        "--tracking-uri",
        "http://mlflow:5000",
    )
    assert res.exit_code == 2 and "--db-url has a password" in res.stderr, res.stderr
    assert "absolute --run-root" in res.stderr and SECRET not in res.stdout + res.stderr
    for address in ("ray://u:s3cretpw@127.0.0.1:1", "ftp://u:s3cretpw@host:8265"):
        extra = ["--ray-job"] if address.startswith("ftp") else []
        res = cli("submit", "sweeps/sleep.yaml", "--address", address, *extra)
        assert res.exit_code == 2 and "s3cretpw" not in res.stdout + res.stderr
        assert "u:***@" in res.stderr


# last: it removes the worker node, and a node killed a moment ago may still look alive to Ray
def test_trials_use_both_nodes_and_survive_a_node_removed_mid_trial(
    cluster: Any, tmp_path: Path
) -> None:
    run_root = tmp_path / "run"
    path = spec(
        tmp_path,
        "nodes",
        "grid: {value: [1, 2, 3, 4]}\nbase: {seconds: 10}\n"
        "resources: {num_cpus: 1, max_retries: 2}\n",
    )
    head_id = cluster.head_node.node_id
    worker = next(iter(cluster.worker_nodes))

    def on_both() -> bool:
        busy = [t for t in trials(run_root, "nodes").values() if t.state == "running"]
        nodes = {n for t in busy for n in _where(run_root, "nodes", t.key)}
        return nodes == {head_id, worker.node_id}

    args = ("submit", str(path), "--run-root", str(run_root), "--address", cluster.address)
    with running(*args) as driver:
        wait_for(on_both, 240, "two running trials, one on each node")
        victim = next(
            t.key
            for t in trials(run_root, "nodes").values()
            if t.state == "running" and _where(run_root, "nodes", t.key) == [worker.node_id]
        )
        cluster.remove_node(worker, allow_graceful=False)
        out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, out[-3000:]
    assert "4 completed, 0 already completed (skipped), 0 failed" in out
    done = trials(run_root, "nodes")
    assert {t.state for t in done.values()} == {"completed"}
    assert _where(run_root, "nodes", victim) == [worker.node_id, head_id]  # retried on the head
    assert all(t.attempts == 1 for t in done.values())  # Ray's retry, not a driver re-run
