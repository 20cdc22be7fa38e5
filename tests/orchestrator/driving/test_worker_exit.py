"""A trial whose Ray worker was killed: its error names the exit Ray reports (issue 33).

Ray's GCS is stood in for by an object with the two calls :mod:`worker_exit` makes, answering
with the protobufs Ray's own GCS returns; no Ray is started. The real lookup against a local
Ray (a task that SIGKILLs or SIGTERMs its worker) was checked by hand: the GCS had the worker's
exit within milliseconds of ``ray.get`` raising.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray
from ray.core.generated import common_pb2, gcs_pb2

from orchestrator.driving import sweep_run, worker_exit
from orchestrator.driving.sweep_run import SweepRun
from orchestrator.driving.task import TaskOutcome

TASK = b"t" * 24
WORKER = b"w" * 28
KILLED = (
    "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
    "include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray "
    "stop --force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another "
    "unexpected error."
)
TERMED = (
    "The leased worker has unrecoverable failure. Worker is requested to be destroyed when it "
    "is returned. Worker exits with an exit code 1. The process receives a SIGTERM."
)


class _Gcs:
    """Ray's GlobalStateAccessor, as far as :mod:`worker_exit` uses it."""

    def __init__(self, detail: str, *, alive: bool = False, events: bool = True) -> None:
        self.detail, self.alive, self.events = detail, alive, events
        self.asked: list[bytes] = []

    def get_task_events(self) -> list[bytes]:
        if not self.events:
            return []
        other = gcs_pb2.TaskEvents(task_id=b"o" * 24, attempt_number=0)
        other.state_updates.worker_id = b"x" * 28
        first = gcs_pb2.TaskEvents(task_id=TASK, attempt_number=0)
        first.state_updates.worker_id = b"a" * 28  # the first attempt's worker, retried
        last = gcs_pb2.TaskEvents(task_id=TASK, attempt_number=1)
        last.state_updates.worker_id = WORKER
        return [e.SerializeToString() for e in (other, last, first)]

    def get_worker_info(self, worker_id: Any) -> bytes:
        self.asked.append(worker_id.binary())
        return gcs_pb2.WorkerTableData(
            is_alive=self.alive,
            pid=4242,
            exit_type=common_pb2.WorkerExitType.Value("SYSTEM_ERROR"),
            exit_detail=self.detail,
        ).SerializeToString()


def _task() -> Any:
    return SimpleNamespace(task_id=lambda: SimpleNamespace(binary=lambda: TASK))


@pytest.mark.parametrize(
    ("detail", "lead"),
    [(KILLED, "was killed or crashed"), (TERMED, "got SIGTERM")],
    ids=["killed", "sigterm"],
)
def test_a_crashed_worker_names_its_exit_on_the_first_line(detail: str, lead: str) -> None:
    gcs = _Gcs(detail)
    text = worker_exit.crash_error(ray.exceptions.WorkerCrashedError(), _task(), gcs=gcs)
    first = text.splitlines()[0]
    assert first.startswith(f"WorkerCrashedError: the worker {lead} (pid 4242, SYSTEM_ERROR: ")
    assert detail in first and "The worker died unexpectedly" in first
    assert gcs.asked == [WORKER]  # the last attempt's worker


@pytest.mark.parametrize(
    "gcs",
    [_Gcs(KILLED, alive=True), _Gcs(KILLED, events=False), _Gcs("")],
    ids=["still-alive", "no-task-events", "no-exit-detail"],
)
def test_without_an_exit_in_the_gcs_the_error_is_rays_own(gcs: _Gcs) -> None:
    exc = ray.exceptions.WorkerCrashedError()
    assert worker_exit.crash_error(exc, _task(), wait_s=0.0, gcs=gcs) == (
        f"WorkerCrashedError: {exc}"
    )


def test_a_failing_lookup_and_other_ray_errors_keep_their_text() -> None:
    broken = SimpleNamespace()  # no methods: the private API is not there
    exc = ray.exceptions.WorkerCrashedError()
    assert worker_exit.crash_error(exc, _task(), wait_s=0.0, gcs=broken) == (
        f"WorkerCrashedError: {exc}"
    )
    died = ray.exceptions.NodeDiedError("node 1 died")
    assert worker_exit.crash_error(died, _task(), gcs=_Gcs(KILLED)) == (
        "NodeDiedError: node 1 died"
    )


def test_finish_records_the_exit_of_a_killed_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``SweepRun.finish`` on a task whose worker was killed: a failed outcome whose error
    carries Ray's exit, recorded."""

    def crashed(_task: object) -> None:
        raise ray.exceptions.WorkerCrashedError()

    recorded: list[dict[str, Any]] = []
    monkeypatch.setattr(sweep_run.ray, "get", crashed)
    monkeypatch.setattr(worker_exit, "_lookup", lambda _gcs, _id: "pid 7, SYSTEM_ERROR: " + TERMED)
    monkeypatch.setattr(
        "ray._private.state.state._connect_and_get_accessor", lambda: object(), raising=False
    )
    run = SimpleNamespace(
        spec=SimpleNamespace(name="s"),
        paths=SimpleNamespace(trial_dir=lambda _name, key: tmp_path / key),
        record=lambda _ref, **kw: recorded.append(kw),
    )
    ref = SimpleNamespace(key="k")
    outcome = SweepRun.finish(run, _task(), ref, 1.0)  # type: ignore[arg-type]
    assert isinstance(outcome, TaskOutcome) and not outcome.ok
    assert (outcome.error or "").startswith("WorkerCrashedError: the worker got SIGTERM (pid 7")
    assert recorded[0]["state"] == "failed" and "SIGTERM" in recorded[0]["error"]
