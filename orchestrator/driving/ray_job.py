"""``orchestrator submit --ray-job``: run the sweep driver itself as a Ray Job on a cluster.

The working folder (without what ``.gitignore`` and :data:`EXCLUDES` leave out) is uploaded as
the job's ``runtime_env`` ``working_dir``; the job runs ``python -m orchestrator.cli submit
<spec> ...`` there (Ray docs: "Ray Jobs Quickstart", ``JobSubmissionClient.submit_job``).

URLs never travel in the entrypoint: one without a password is an ``env_vars`` entry
(``SPECSCALE_DB_URL``, ``MLFLOW_TRACKING_URI``); one with a password is written to
``<run root>/.ray-jobs/<token>.json`` (mode 0600, folder 0700), whose path the job gets in
:data:`URLS_FILE_VAR` and whose reader removes it (:func:`read_urls_file`). See docs/scale.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shlex
import time
from pathlib import Path

from orchestrator._secrets import passwords
from orchestrator.errors import OrchestratorError

__all__ = ["EXCLUDES", "URLS_FILE_VAR", "read_urls_file", "submit_job"]

URLS_FILE_VAR = "SPECSCALE_URLS_FILE"
"""environment variable of a job: the file holding its DB and tracking URLs with passwords"""

_URL_VARS = ("SPECSCALE_DB_URL", "MLFLOW_TRACKING_URI")
"""the keys of a URLs file: the environment variables of ``--db-url`` and ``--tracking-uri``"""

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
            working folder is temporary; always absolute for a URL with a password, whose
            file is written under it here.
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
    urls = dict(zip(_URL_VARS, (db_url, tracking_uri), strict=True))
    hidden = {k: v for k, v in urls.items() if v and passwords(v)}
    env = {k: v for k, v in urls.items() if v and k not in hidden}
    if hidden and not run_root.is_absolute():
        flags = " and ".join(_flag(k) for k in hidden)
        raise OrchestratorError(
            f"--ray-job: {flags} has a password, which the job's environment would show to "
            "anyone who can list the cluster's jobs. Fix: give an absolute --run-root on "
            "storage this machine and the cluster share (the URLs go to a file there that only "
            "you can read), or a URL without a password (e.g. a ~/.pgpass on the cluster)"
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
    urls_file = _write_urls_file(run_root, hidden) if hidden else None
    if urls_file is not None:
        env[URLS_FILE_VAR] = str(urls_file)
    runtime_env: dict[str, object] = {
        "working_dir": str(working_dir),
        "excludes": EXCLUDES,
        "env_vars": env,
    }
    try:
        return _submit(address, shlex.join(args), runtime_env, {"specscale.spec": str(rel_spec)})
    except BaseException:
        if urls_file is not None:
            urls_file.unlink(missing_ok=True)
        raise


def _submit(
    address: str, entrypoint: str, runtime_env: dict[str, object], metadata: dict[str, str]
) -> str:
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            client = JobSubmissionClient(address)
            return str(
                client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, metadata=metadata)
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


def _flag(var: str) -> str:
    return "--db-url" if var == "SPECSCALE_DB_URL" else "--tracking-uri"


def _write_urls_file(run_root: Path, urls: dict[str, str]) -> Path:
    """Write ``urls`` (environment variable -> URL) to a new file under ``run_root`` that only
    this user can read; return its path.

    Raises:
        OrchestratorError: the folder cannot be written here.
    """
    folder = run_root / ".ray-jobs"
    path = folder / f"{secrets.token_hex(8)}.json"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(urls, f)
    except OSError as exc:
        flags = " and ".join(_flag(k) for k in urls)
        raise OrchestratorError(
            f"--ray-job: cannot write {folder} ({exc.strerror or exc}), where the job finds "
            f"{flags}, whose password must not show in the job's environment. Fix: run this "
            "from a machine that mounts --run-root (the cluster's shared storage) at the same "
            "path, or use URLs without a password"
        ) from None
    return path


@functools.cache
def read_urls_file(path: str) -> dict[str, str]:
    """The URLs a job was given in the file ``path`` (see :func:`submit_job`), read once: the
    file is removed, so no password stays on disk.

    Raises:
        OrchestratorError: the file cannot be read here (not shared storage, another user).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise OrchestratorError(
            f"{URLS_FILE_VAR}={path}: cannot read the job's DB and tracking URLs "
            f"({exc.strerror or exc}). Fix: submit with --ray-job from a machine that mounts "
            "--run-root at the same path as the cluster, and run the cluster as the user who "
            "submits"
        ) from None
    except ValueError:
        raise OrchestratorError(f"{URLS_FILE_VAR}={path}: not a URLs file of --ray-job") from None
    if not isinstance(data, dict) or not all(
        k in _URL_VARS and isinstance(v, str) for k, v in data.items()
    ):
        raise OrchestratorError(f"{URLS_FILE_VAR}={path}: not a URLs file of --ray-job")
    with contextlib.suppress(OSError):  # left behind, still only its owner's to read
        Path(path).unlink()
    return data
