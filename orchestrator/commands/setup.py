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


def loopback_ray(address: str | None) -> None:
    """Keep a local Ray (no ``address``) on 127.0.0.1; call before ``ray`` is imported.

    Sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` unless the user set it (Ray 2.60 otherwise
    listens on all interfaces; docs/operations.md).
    """
    if not address:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
