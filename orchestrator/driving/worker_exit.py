"""Why a trial's Ray worker died, as Ray reports it, for the trial's error text.

Ray 2.60's ``WorkerCrashedError`` for a killed worker carries no detail; the GCS keeps the
worker's pid, exit type and exit detail, read here through Ray's private state accessor, best
effort (where it is not available, e.g. Ray Client or another Ray version, the error text stays
Ray's own).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from ray.exceptions import WorkerCrashedError

log = logging.getLogger(__name__)

_POLL_S = 0.2
_SIGNAL = re.compile(r"receives? an? (SIG[A-Z0-9]+)")


def crash_error(exc: BaseException, task: Any, *, wait_s: float = 2.0, gcs: Any = None) -> str:
    """The error text of a trial whose task ``task`` (a Ray ``ObjectRef``) ended in ``exc``:
    ``"<Type>: <message>"``, and for a dead worker Ray's account of its exit on the same first
    line (``WorkerCrashedError: the worker got SIGTERM (pid 17906, SYSTEM_ERROR: ...). The
    worker died unexpectedly ...``). Never raises."""
    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, WorkerCrashedError):
        return text
    reason = worker_exit(task, wait_s=wait_s, gcs=gcs)
    if reason is None:
        return text
    return f"{type(exc).__name__}: the worker {_what_happened(reason)} ({reason}). {exc}"


def _what_happened(reason: str) -> str:
    """A few words first, for a one-line view: the signal Ray names (``got SIGTERM``); a
    connection lost at end of file, Ray's view of a SIGKILL, an OOM kill or a crash (``was
    killed or crashed``); else ``died``."""
    named = _SIGNAL.search(reason)
    if named:
        return f"got {named.group(1)}"
    return "was killed or crashed" if "End of file" in reason else "died"


def worker_exit(task: Any, *, wait_s: float = 2.0, gcs: Any = None) -> str | None:
    """``"pid 17906, SYSTEM_ERROR: <Ray's exit detail>"`` for the dead worker that ran ``task``,
    or None when Ray's GCS cannot say within ``wait_s`` seconds (task events reach the GCS
    about once a second). ``gcs`` is Ray's ``GlobalStateAccessor`` (default: this driver's)."""
    try:
        from ray._private.state import state  # private: no public API without the dashboard

        gcs = gcs or state._connect_and_get_accessor()
        task_id = task.task_id().binary()
        deadline = time.monotonic() + wait_s
        while True:
            found = _lookup(gcs, task_id)
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(_POLL_S)
    except Exception:  # noqa: BLE001 - a private API: without it the error is Ray's own text
        log.debug("no exit detail of the worker from Ray's GCS", exc_info=True)
        return None


def _lookup(gcs: Any, task_id: bytes) -> str | None:
    """The exit of the worker the task's events name, once the GCS has recorded it."""
    from ray._raylet import WorkerID
    from ray.core.generated import common_pb2, gcs_pb2

    gcs_pb: Any = gcs_pb2  # generated protobuf modules: untyped for mypy
    common_pb: Any = common_pb2

    attempts = {
        event.attempt_number: event.state_updates.worker_id
        for event in map(gcs_pb.TaskEvents.FromString, gcs.get_task_events())
        if event.task_id == task_id and event.state_updates.worker_id
    }
    if not attempts:
        return None
    raw = gcs.get_worker_info(WorkerID(attempts[max(attempts)]))  # the last attempt's worker
    worker = gcs_pb.WorkerTableData.FromString(raw) if raw else None
    if worker is None or worker.is_alive or not worker.exit_detail:
        return None
    kind = common_pb.WorkerExitType.Name(worker.exit_type)
    detail = " ".join(worker.exit_detail.split())
    return f"pid {worker.pid}, {kind}: {detail}"
