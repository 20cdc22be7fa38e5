"""``orchestrator submit --ray-job``: run the sweep driver itself as a Ray Job on a cluster.

The working folder (this repository, without what ``.gitignore`` and :data:`EXCLUDES` leave
out) is uploaded as the job's ``runtime_env`` ``working_dir``; the job runs
``python -m orchestrator.cli submit <spec> ...`` there, and that driver finds the cluster through
the ``RAY_ADDRESS`` Ray sets for jobs. The cluster's Python must have this project's
dependencies. Database and tracking URLs travel as ``env_vars`` (``SPECSCALE_DB_URL``,
``MLFLOW_TRACKING_URI``), not in the entrypoint, so a password does not show in the job's
command line. Ray docs: "Ray Jobs Quickstart", ``JobSubmissionClient.submit_job``.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from orchestrator.errors import OrchestratorError

__all__ = ["EXCLUDES", "submit_job"]

AGENT_WAIT_S = 60.0
"""how long to wait for a job server that answers "no available agent, try again later", s"""

EXCLUDES = [".venv", ".git", "runs*", "**/__pycache__", "*.db", "mlruns", "cache"]
"""paths not uploaded with the working folder (besides .gitignore's)"""


def submit_job(
    address: str,
    spec: Path,
    *,
    run_root: Path,
    db_url: str | None,
    tracking_uri: str | None,
    cache_dir: Path | None,
    working_dir: Path,
) -> str:
    """Submit ``orchestrator submit SPEC`` as a Ray Job; return its submission id.

    Args:
        address: the cluster's Ray dashboard (job server), e.g. ``http://head:8265``.
        spec: the sweep YAML; must lie inside ``working_dir``.
        run_root: where the job's driver writes; must be absolute (storage the cluster
            shares) unless both ``db_url`` and ``tracking_uri`` are given, since the job's
            working folder is temporary.
        working_dir: the folder uploaded as the job's working directory.

    Raises:
        OrchestratorError: an argument the job cannot use, or the job server refused.
    """
    if not address.startswith(("http://", "https://")):
        raise OrchestratorError(
            f"--ray-job needs the cluster's job server as --address, e.g. "
            f"http://head:8265 (got {address!r})"
        )
    working_dir = working_dir.resolve()
    try:
        rel_spec = spec.resolve().relative_to(working_dir)
    except ValueError:
        raise OrchestratorError(
            f"{spec}: --ray-job uploads {working_dir}; put the spec inside it"
        ) from None
    if not run_root.is_absolute() and not (db_url and tracking_uri):
        raise OrchestratorError(
            "--ray-job runs the driver in a temporary folder on the cluster: give an absolute "
            "--run-root on storage the cluster shares, or both --db-url and --tracking-uri"
        )
    args = [
        "python",
        "-m",
        "orchestrator.cli",
        "submit",
        str(rel_spec),
        "--run-root",
        str(run_root),
    ]
    if cache_dir is not None:
        args += ["--cache-dir", str(cache_dir)]
    env = {"SPECSCALE_DB_URL": db_url or "", "MLFLOW_TRACKING_URI": tracking_uri or ""}
    from ray.job_submission import JobSubmissionClient

    runtime_env = {
        "working_dir": str(working_dir),
        "excludes": EXCLUDES,
        "env_vars": {k: v for k, v in env.items() if v},
    }
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            client = JobSubmissionClient(address)
            return str(
                client.submit_job(
                    entrypoint=shlex.join(args),
                    runtime_env=runtime_env,
                    metadata={"specscale.spec": str(rel_spec)},
                )
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            text = str(exc).strip()
            if "try again later" in text and time.monotonic() < deadline:
                time.sleep(2.0)  # a job server that just started has no agent yet
                continue
            first = text.splitlines()[0] if text else type(exc).__name__
            raise OrchestratorError(
                f"the Ray job server at {address} refused the job: {first}"
            ) from None
