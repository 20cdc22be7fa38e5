"""Sweeps on a real multi-node Ray cluster (``ray.cluster_utils.Cluster``, 2 nodes on 127.0.0.1):
trials spread over both nodes, a node removed mid-trial, and the driver submitted as a Ray Job."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store.results import ResultsStore
from tests.orchestrator.test_control import ROOT, cli, running, spec, trials, wait_for


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
    c.add_node(num_cpus=1, node_ip_address="127.0.0.1", dashboard_agent_listen_port=_free_port())
    c.wait_for_nodes()
    c.job_server = f"http://127.0.0.1:{port}"
    try:
        yield c
    finally:
        c.shutdown()
        os.environ.clear()
        os.environ.update(saved)


def _where(run_root: Path, name: str, key: str) -> list[str | None]:
    path = run_root / name / "trials" / key / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(x)["node_id"] for x in path.read_text().splitlines()]


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


def test_submit_as_a_ray_job(cluster: Any, tmp_path: Path) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    run_root = tmp_path / "run"
    path = spec(tmp_path, "job", "grid: {value: [1, 2]}\nbase: {seconds: 1}\n")
    local = ROOT / "sweeps" / f"_test_job_{os.getpid()}.yaml"  # the spec must be in the upload
    local.write_text(path.read_text())
    try:
        res = cli(
            "submit",
            str(local.relative_to(ROOT)),
            "--ray-job",
            "--address",
            cluster.job_server,
            "--run-root",
            str(run_root),
            timeout=300,
        )
    finally:
        local.unlink()
    assert res.returncode == 0, res.stdout + res.stderr
    job_id = res.stdout.strip().splitlines()[-1]
    client = JobSubmissionClient(cluster.job_server)
    deadline = time.monotonic() + 400
    status = client.get_job_status(job_id)
    while status not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.monotonic() < deadline, client.get_job_logs(job_id)[-3000:]
        time.sleep(2)
        status = client.get_job_status(job_id)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    assert "2 completed" in logs
    store = ResultsStore.sqlite_under(run_root)
    info = store.get_sweep("job")
    assert info is not None
    assert {t.state for t in store.trials(info.id)} == {"completed"}


def test_ray_job_refusals(tmp_path: Path) -> None:
    path = spec(tmp_path, "job", "grid: {value: [1]}\n")
    res = cli("submit", str(path), "--ray-job", "--address", "127.0.0.1:6379")
    assert res.returncode == 2 and "job server" in res.stderr
    res = cli("submit", str(path), "--ray-job", "--address", "http://127.0.0.1:1")
    assert res.returncode == 2 and "put the spec inside it" in res.stderr
    res = cli(
        "submit",
        "sweeps/sleep.yaml",
        "--ray-job",
        "--address",
        "http://127.0.0.1:1",
        "--run-root",
        "runs",
    )
    assert res.returncode == 2 and "absolute --run-root" in res.stderr
    for address in ("ray://u:s3cretpw@127.0.0.1:1", "ftp://u:s3cretpw@host:8265"):
        extra = ["--ray-job"] if address.startswith("ftp") else []
        res = cli("submit", "sweeps/sleep.yaml", "--address", address, *extra)
        assert res.returncode == 2 and "s3cretpw" not in res.stdout + res.stderr
        assert "u:***@" in res.stderr
