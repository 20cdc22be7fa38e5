"""Servers the orchestrator tests start for themselves: an ``mlflow server`` on loopback.

:func:`mlflow_server` is a context manager, so each test module wraps it in its own fixture
(a fixture imported into a test module trips ruff's F811).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.orchestrator.pg import fresh_schema


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def mlflow_server(artifacts: Path, *, start_timeout_s: float = 180) -> Iterator[str]:
    """``mlflow server`` on a free port of 127.0.0.1 (only) with a PostgreSQL backend in its own
    schema and artifacts under ``artifacts``; yields its URI ``http://127.0.0.1:<port>`` once
    ``/health`` answers (its output in ``mlflow-server.log`` beside ``artifacts``, for a
    failure's traceback), and stops it by its PID afterwards (SIGTERM; SIGKILL to its process
    group if it has not exited after 30 s); the schema is dropped.

    Skips the test when PostgreSQL is not reachable (:func:`tests.orchestrator.pg.fresh_schema`).
    """
    with fresh_schema("mlf") as (_schema, url):
        port = free_port()
        backend = url.replace("postgresql://", "postgresql+psycopg://")
        log = (artifacts.parent / "mlflow-server.log").open("wb")
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "mlflow", "server",
                "--backend-store-uri", backend,
                "--artifacts-destination", str(artifacts),
                "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: uvicorn and job runners too
            # no job runner: MLflow 3.18's eight huey consumers poll their queues all along
            # (~20% of a core) for jobs (online scorers) this platform never submits
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )  # fmt: skip
        uri = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + start_timeout_s
            while True:
                try:
                    with urllib.request.urlopen(f"{uri}/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                assert proc.poll() is None, "mlflow server exited"
                assert time.monotonic() < deadline, "mlflow server did not come up"
                time.sleep(1)
            yield uri
        finally:
            proc.terminate()  # the server stops its uvicorn and job-runner children itself
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the group the server leads, children too
                proc.wait()
            log.close()


@contextmanager
def shared_ray(num_cpus: int = 2) -> Iterator[str]:
    """A one-node Ray cluster on 127.0.0.1 (``num_cpus`` CPUs, no dashboard) for the CLI tests
    of one test process: yields its address (``127.0.0.1:<port>``) for ``--address`` or
    ``RAY_ADDRESS``; shut down (its processes stopped by Ray) afterwards.

    A CLI driver attached to it skips starting and stopping a local Ray of its own (~8 s of a
    quiet 2-core machine per command). What it changes for the driver: the cluster path's
    checks (every node sees the run root; a trial's size is not checked against this machine),
    so tests of the local-Ray refusals and of a local Ray's own processes do not use it.
    """
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": num_cpus,
            "node_ip_address": "127.0.0.1",
            "include_dashboard": False,
            # the node agent's HTTP port defaults to 52365: another test's Ray would collide
            "dashboard_agent_listen_port": free_port(),
        },
    )
    try:
        yield cluster.address
    finally:
        cluster.shutdown()
