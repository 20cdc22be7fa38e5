"""Process set-up shared by the commands: quiet libraries, a loopback-only local Ray."""

from __future__ import annotations

import logging
import os


def quiet_env() -> None:
    """Defaults for MLflow, Ray and tokenizers in this process (a user's own settings win);
    warnings only, and urllib3's retries end in one TrackingError, not a log per retry."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)


LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def loopback_ray(address: str | None) -> None:
    """Keep a local Ray (no ``address``), or the driver of a cluster at a loopback address
    (``127.0.0.1:port``, ``localhost:port``, also as ``ray://``), on 127.0.0.1; call before
    ``ray`` is imported.

    Sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` unless the user set it: without it Ray 2.60
    listens on all interfaces, and rewrites a loopback address to the machine's network
    address, where a cluster bound to 127.0.0.1 does not listen (the driver then waits for it
    forever; docs/operations.md).
    """
    host = (address or "").split("://", 1)[-1].rpartition(":")[0]
    if not address or host in LOOPBACK_HOSTS:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
