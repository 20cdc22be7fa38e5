"""Refusals before a sweep writes anything: sinks that would collide, a resubmit that changes
what an existing sweep runs, a cluster whose nodes do not share the run root and cache (who
writes what: docs/scale.md).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from orchestrator.driving.destinations import Destinations
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.kinds import KINDS, kind_named, kind_of
from orchestrator.spec.sweep import SweepSpec, stored_spec
from orchestrator.spec.yaml_lines import spec_line
from orchestrator.store.results import ResultsStore, SweepInfo, mask_url, normalize_db_url
from orchestrator.tracking.tracker import default_tracking_uri

_IDENTITY = tuple(dict.fromkeys(("workload", "base", "grid", "variants", "seeds", *KINDS)))
"""spec fields that fix which trials a sweep runs (the kinds' blocks included); a resubmit may
change only the others (description, resources) and what a kind's block leaves free (a
search's ``n_trials``, a design's ``goal`` and ``budget_hours``)"""


def _db(url: str) -> URL | None:
    """A database URL's identity, or None for an http(s)/file URI (not a database)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = Path(parsed.database or "").expanduser().resolve() if parsed.database else None
        return parsed.set(database=str(path) if path else None, query={})
    if backend in ("postgresql", "postgres"):
        return normalize_db_url(url).set(username=None, password=None, query={})
    return None


def check_sinks_apart(run_root: Path, db_url: str | None, tracking_uri: str | None) -> None:
    """Refuse an MLflow tracking URI that is the results DB itself (both would keep an Alembic
    revision in ``alembic_version``, see docs/scale.md). Without ``tracking_uri`` MLflow's
    default store (``<run root>/mlflow.db``) is checked.

    Raises:
        OrchestratorError: the two URLs name one SQLite file or one PostgreSQL database.
    """
    results = _db(db_url) if db_url else _db(f"sqlite:///{run_root.resolve() / 'results.db'}")
    tracking = _db(tracking_uri or default_tracking_uri(run_root.resolve()))
    if results is None or tracking is None:
        return
    same = (
        results.get_backend_name() == tracking.get_backend_name()
        and results.database == tracking.database
        and (results.host or "localhost") == (tracking.host or "localhost")
        and (results.port or 5432) == (tracking.port or 5432)
    )
    if same:
        what = (
            f"--tracking-uri {mask_url(tracking_uri)}"
            if tracking_uri
            else f"MLflow's default store {run_root.resolve() / 'mlflow.db'} (no --tracking-uri)"
        )
        raise OrchestratorError(
            f"{what} is the results DB: MLflow and the Optuna "
            "studies in the results DB both keep their schema version in `alembic_version`. "
            "Fix: give MLflow its own database (e.g. leave out --tracking-uri for "
            "<run-root>/mlflow.db, or another PostgreSQL database) or an http:// MLflow server"
        )


def check_resubmit(store: ResultsStore, spec: SweepSpec, path: Path) -> None:
    """Refuse a spec that changes which trials an existing sweep of its name runs.

    Same experiment: a grid that expands to the same trial keys; a design with the same base,
    seeds and design (but goal and budget); a search with the same workload, seed, base config
    and space (direction and sampler included). The description, the resources and a search's
    ``n_trials`` and ``metric`` may change.

    Raises:
        SpecError: ``file:line`` of the first changed field, and the fix.
    """
    info = store.get_sweep(spec.name)
    if info is None:
        return
    try:
        old = stored_spec(info)
    except SpecError:  # a spec stored by an older version that no longer validates
        return
    if _same_experiment(old, spec):
        return
    changed = [n for n in _IDENTITY if _identity(old, n) != _identity(spec, n)] or ["grid"]
    lines = {n: spec_line(path, *_locs(n, _identity(old, n), _identity(spec, n))) for n in changed}
    first = min(changed, key=lambda n: lines[n])
    raise SpecError(
        f"{path}:{lines[first]}: sweep {spec.name!r} already exists in {store.url} and this "
        f"spec changes its {' and '.join(changed)} (stored from {info.spec_path}); one sweep "
        "name is one experiment. Fix: give this spec a new name, or resubmit the spec it was "
        f"run with (`orchestrator status {spec.name}` with the same --run-root or --db-url "
        "shows its trials)"
    )


def _same_experiment(old: SweepSpec, new: SweepSpec) -> bool:
    """Whether two specs of one sweep name run the same trials (see :func:`check_resubmit`)."""
    kind = kind_of(new)
    if old.workload != new.workload or kind_of(old).name != kind.name:
        return False
    return kind.same_experiment(old, new)


def _identity(spec: SweepSpec, name: str) -> Any:
    value = getattr(spec, name)
    if name in KINDS and value is not None:  # a kind's block: what a resubmit may not change
        return kind_named(name).identity(value)
    return value


def _locs(name: str, before: Any, after: Any) -> list[tuple[str, ...]]:
    """Where in the spec the change is: the first differing key under ``name``, else ``name``."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = [k for k in [*after, *before] if before.get(k) != after.get(k)]
        return [(name, str(k)) for k in keys[:1]] + [(name,)]
    return [(name,)]


def check_cluster_storage(dest: Destinations) -> None:
    """On a Ray cluster (``--address``), refuse unless every alive node sees the run root and
    the cache folder at the same path: a probe file written in each folder is checked from a
    task pinned to every node, then removed. A local Ray is not checked.

    Raises:
        OrchestratorError: naming the nodes that do not see a folder, and the fix.
    """
    if not dest.address:
        return
    folders = {"--run-root": dest.run_root, "--cache-dir": dest.paths.cache_dir}
    probes: dict[str, tuple[str, str]] = {}
    token = secrets.token_hex(8)
    try:
        for flag, folder in folders.items():
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".specscale-probe-{token}"
            probe.write_text(token)
            probes[flag] = (str(probe), token)
        blind = nodes_not_seeing(list(probes.values()))
    finally:
        for p, _ in probes.values():
            Path(p).unlink(missing_ok=True)
    for flag, (p, _) in probes.items():
        missing = [node for node, paths in blind.items() if p in paths]
        if missing:
            raise OrchestratorError(
                f"{flag} {Path(p).parent} is not visible on {len(missing)} node(s) of the Ray "
                f"cluster at {mask_url(dest.address)} ({', '.join(sorted(missing))}): trial "
                "tasks there would write their results to their own disks. Fix: give a folder "
                "every node mounts at the same path (e.g. NFS), for --run-root and --cache-dir"
            )


def nodes_not_seeing(probes: list[tuple[str, str]]) -> dict[str, list[str]]:
    """For every alive node of the connected Ray cluster: the probe files (path, content) it
    does not see with that content, keyed by the node's address (only nodes missing some)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def look(items: list[tuple[str, str]]) -> list[str]:
        def sees(path: str, content: str) -> bool:
            try:
                return Path(path).read_text() == content
            except OSError:
                return False

        return [p for p, c in items if not sees(p, c)]

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = {
        f"{n.get('NodeManagerAddress', '?')} ({n['NodeID'][:8]})": look.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(probes)
        for n in nodes
    }
    found = dict(zip(refs, ray.get(list(refs.values()), timeout=120), strict=True))
    return {node: missing for node, missing in found.items() if missing}


def check_parent_run(uri: str, info: SweepInfo, run_root: Path) -> None:
    """Refuse to refit a sweep whose parent MLflow run is not where ``uri`` points, before
    anything is written (a fit row, an MLflow store that would be created, a page).

    Raises:
        OrchestratorError: no parent run id stored, no MLflow store at a local ``uri``, the run
            missing or deleted there, or MLflow unreachable; each with the fix.
    """
    from urllib.parse import urlsplit

    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode
    from mlflow.tracking import MlflowClient
    from sqlalchemy.exc import SQLAlchemyError

    from orchestrator._secrets import redact

    sweep, run_id, shown = info.name, info.mlflow_run_id, mask_url(uri)
    nothing = "nothing was written"
    resubmit = (
        f"rebuild the sweep's runs from the results DB (`orchestrator mirror {sweep} "
        f"--run-root {run_root}`, with the --tracking-uri to fill)"
    )
    if not run_id:
        raise OrchestratorError(
            f"sweep {sweep!r} has no parent MLflow run in the results DB; {nothing}. "
            f"Fix: {resubmit}"
        )
    fix = f"Fix: pass the --tracking-uri the sweep was submitted with, or {resubmit}"
    local: Path | None = None  # a file store or SQLite file MLflow would create if missing
    if uri.startswith("sqlite:"):
        database = make_url(uri).database
        local = Path(database) if database and database != ":memory:" else None
    elif urlsplit(uri).scheme in ("", "file"):
        local = Path(urlsplit(uri).path if uri.startswith("file:") else uri)
    if local is not None and not local.expanduser().exists():
        raise OrchestratorError(
            f"no MLflow store at {shown} (it would hold parent run {run_id} of sweep "
            f"{sweep!r}); {nothing}. {fix}"
        )
    try:
        parent = MlflowClient(tracking_uri=uri).get_run(run_id)
    except (MlflowException, SQLAlchemyError, OSError) as exc:
        missing = isinstance(exc, MlflowException) and (
            str(exc.error_code) == ErrorCode.Name(RESOURCE_DOES_NOT_EXIST)
            or "not found" in str(exc).lower()
        )
        if not missing:
            reason = (redact(str(exc), uri).strip().splitlines() or ["error"])[0]
            raise OrchestratorError(
                f"MLflow at {shown}: cannot read parent run {run_id} of sweep {sweep!r} "
                f"({reason}); {nothing}. Fix: check that the tracking server is running and "
                "--tracking-uri is right"
            ) from None
        parent = None
    if parent is None or parent.info.lifecycle_stage == "deleted":
        raise OrchestratorError(
            f"MLflow at {shown} has no parent run {run_id} of sweep {sweep!r}; {nothing}. {fix}"
        )


def machine_memory_gb() -> float:
    """This machine's memory in GiB: the physical memory, or the cgroup's limit when the
    process runs in a smaller one (a container)."""
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
        break
    return total / 2**30


def check_fits_locally(spec: SweepSpec, path: Path, *, extra_gpus: float = 0) -> None:
    """On a local Ray (no ``--address``), refuse a trial that asks for more CPUs, GPUs or
    memory (``resources.memory_gb``, against :func:`machine_memory_gb`) than this machine has
    (Ray would keep it waiting for ever). ``extra_gpus``: GPUs a trial holds beyond
    ``resources.num_gpus`` (see :func:`orchestrator.driving.runner.task_options`).

    Raises:
        SpecError: ``file:line`` of the resource and the fix.
    """
    import os

    r = spec.resources
    cpus = os.cpu_count() or 1
    gpus = 0
    if r.num_gpus:
        import torch

        gpus = torch.cuda.device_count()
    gpus_asked = r.num_gpus + extra_gpus
    for name, asked, have in (("num_cpus", r.num_cpus, cpus), ("num_gpus", gpus_asked, gpus)):
        if asked > have:
            line = spec_line(path, ("resources", name), ("resources",))
            raise SpecError(
                f"{path}:{line}: resources.{name}: a trial asks for {asked:g}"
                + (
                    f" ({r.num_gpus:g} + {extra_gpus:g} kept by the trial beside its training "
                    "workers)"
                    if name == "num_gpus" and extra_gpus
                    else ""
                )
                + " and this machine "
                f"has {have}, so no trial could ever start on the local Ray. Fix: ask for at "
                f"most {have}, or run on a cluster that has them (--address)"
            )
    if r.memory_gb is not None and r.memory_gb > (have_gb := machine_memory_gb()):
        line = spec_line(path, ("resources", "memory_gb"), ("resources",))
        raise SpecError(
            f"{path}:{line}: resources.memory_gb: a trial asks for {r.memory_gb:g} GiB and this "
            f"machine has {have_gb:.1f} GiB, so no trial could ever start on the local Ray. "
            "Fix: ask for less than that (Ray keeps part of it for its object store), leave "
            "memory_gb out, or run on a cluster that has it (--address)"
        )
