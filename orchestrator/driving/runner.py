"""Ray and the run root for a sweep driver: where a sweep writes, the lease, the trial task's
Ray options, connecting to a cluster, registering a sweep's trials.

At most :func:`in_flight_limit` trials are in flight, so ``running`` in the store means
running. The loop itself is :func:`orchestrator.driving.sweep_run.drive`.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel

from orchestrator.driving import task as _task
from orchestrator.errors import OrchestratorError
from orchestrator.spec.grid import TrialSpec
from orchestrator.spec.sweep import SweepSpec
from orchestrator.store.results import ResultsStore, driver_id, mask_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPaths:
    """Where a sweep writes: run root, shared cache, trial artifacts, dashboard."""

    run_root: Path
    cache_dir: Path

    def trial_dir(self, sweep: str, key: str) -> Path:
        """Artifact folder of one trial."""
        return self.run_root / sweep / "trials" / key

    def dashboard(self, sweep: str) -> Path:
        """The sweep's HTML dashboard."""
        return self.run_root / sweep / "dashboard.html"


HEARTBEAT_S = 5.0
"""how often a driver renews its lease on the sweep and checks for a cancel request, s"""
STALE_AFTER_S = 60.0
"""a lease not renewed for this long is free (a driver on another host that died)"""


def register(
    store: ResultsStore,
    spec: SweepSpec,
    spec_path: Path,
    spec_text: str,
    trials: list[TrialSpec],
) -> tuple[int, list[TrialSpec]]:
    """Create or update the sweep row and insert its missing trials as pending.

    ``trials``: the sweep kind's expansion (:meth:`orchestrator.kinds.SweepKind.expand`,
    once per submit); a search or a design inserts none: its trials are added as proposed.
    """
    sweep_id = store.upsert_sweep(spec.name, spec.workload, spec_text, str(spec_path))
    store.add_trials(
        sweep_id, [(t.key, t.config.model_dump(mode="json"), t.overrides) for t in trials]
    )
    return sweep_id, trials


@contextmanager
def sweep_lease(store: ResultsStore, sweep_id: int) -> Iterator[str]:
    """Hold the sweep's lease (claim, yield this driver's id, release) around a driver loop.

    Raises:
        StoreError: another live driver holds it (a stale one, silent for
            :data:`STALE_AFTER_S`, is taken over).
    """
    me = driver_id()
    store.claim_sweep(sweep_id, me, stale_after_s=STALE_AFTER_S)
    try:
        yield me
    finally:
        store.release_sweep(sweep_id, me)


def in_flight_limit(spec: SweepSpec) -> int:
    """Trials of ``spec`` the Ray cluster has room for at once (at least 1)."""
    res = ray.cluster_resources()
    limits = [int(res.get("CPU", 1) // spec.resources.num_cpus)]
    if spec.resources.num_gpus:
        limits.append(int(res.get("GPU", 0) // spec.resources.num_gpus))
    return max(1, min(limits))


def task_options(spec: SweepSpec, *, hold_gpus: bool = True) -> dict[str, Any]:
    """Ray options of a trial's task: the spec's resources and retries.

    ``hold_gpus=False``: a trial whose training workers take the spec's GPUs; the task itself
    keeps one GPU (when the spec has any), so it asks for ``num_gpus + 1`` in all
    (:func:`extra_gpus`).
    """
    r = spec.resources
    return {
        "num_cpus": r.num_cpus,
        "num_gpus": r.num_gpus if hold_gpus else min(1.0, r.num_gpus),
        "max_retries": r.max_retries,
        "retry_exceptions": r.retry_exceptions,
        "memory": int(r.memory_gb * 2**30) if r.memory_gb else None,
    }


def trial_task(spec: SweepSpec, *, hold_gpus: bool = True) -> Any:
    """The Ray remote function of one trial with :func:`task_options`."""
    # ray's stubs only model positional-argument functions (run_trial is keyword-only)
    return ray.remote(_task.run_trial).options(  # type: ignore[arg-type]
        **task_options(spec, hold_gpus=hold_gpus)
    )


def trains_on_workers(config: BaseModel) -> bool:
    """Whether a trial trains its draft on Ray Train workers (``train.workers > 1`` or
    ``train.deepspeed``): its task then holds the spec's CPUs, lent to the workers while it
    waits for them, and one GPU of its own (each worker takes ``num_gpus / workers``)."""
    train = getattr(config, "train", None)
    return bool(getattr(train, "on_workers", False))


def extra_gpus(spec: SweepSpec, configs: Sequence[BaseModel]) -> float:
    """GPUs a trial of ``spec`` holds beyond ``resources.num_gpus``: 1 when it has GPUs and
    any of ``configs`` trains on workers (the trial keeps one for itself), else 0."""
    if not spec.resources.num_gpus or not any(trains_on_workers(c) for c in configs):
        return 0.0
    return min(1.0, spec.resources.num_gpus)


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast when nothing listens at a Ray address (``host:port`` or ``ray://host:port``).

    Raises:
        OrchestratorError: the address is malformed or its port does not accept connections.
    """
    hostport = address.split("://", 1)[-1].rstrip("/")
    if address == "auto":
        return
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise OrchestratorError(
            f"--address {address!r} is not a Ray address. Fix: --address ray://head:10001 "
            "or --address 10.0.0.5:6379"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise OrchestratorError(
            f"cannot reach the Ray cluster at {mask_url(address)} ({e}). Fix: start the head node "
            "(or correct --address), or leave out --address (and RAY_ADDRESS) to run on a local Ray"
        ) from None


def init_ray(address: str | None, *, num_cpus: int | None = None) -> None:
    """Connect to ``address`` (a Ray cluster) or start a local Ray bound to 127.0.0.1.

    Raises:
        OrchestratorError: the cluster cannot be reached.
    """
    if ray.is_initialized():
        return
    if not address:
        ray.init(
            # "local": always a new Ray; None would attach to the last cluster started on this
            # machine (/tmp/ray/ray_current_cluster), even a test cluster that is gone
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=True,
            logging_level=logging.WARNING,
        )
        return
    check_ray_address(address)
    try:
        ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
    except (ConnectionError, TimeoutError, RuntimeError) as e:
        raise OrchestratorError(f"cannot connect to the Ray cluster at {address}: {e}") from None
