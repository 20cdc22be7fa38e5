"""Benchmark: wall time and peak memory of a sweep, cold and with a warm cache.

Runs ``orchestrator submit SPEC`` twice as a subprocess: first with an empty run root (cold:
target conversion, feature extraction, greedy references), then with a fresh results DB and
MLflow store but the same cache (warm: what a second sweep over the same target costs).
Samples the summed PSS (shared pages counted once) of the driver, the Ray processes and every
other child once a second and prints the peak, the wall times and the per-phase split recorded
by the trials. Also the machine's idle CPU over the run (``idle_core_s``: core-seconds no process
used, from ``psutil.cpu_times``; ``busy_cores``: the mean cores in use); run it alone, since
other work on the machine counts as busy.

    python -m benchmarks.sweep_bench sweeps/tokens.yaml --out runs-bench
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from benchmarks import harness
from orchestrator.spec.sweep import load_spec


def _pids(proc: psutil.Process) -> set[int]:
    """The CLI, its children, and Ray's processes (raylet, GCS, workers) wherever they hang."""
    pids = {proc.pid} | {c.pid for c in proc.children(recursive=True)}
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ray" in (p.info["name"] or "") or "ray/" in cmd or "ray::" in cmd:
            pids.add(p.pid)
    return pids


def memory_in_use(proc: psutil.Process) -> int:
    """Summed PSS (bytes) of the sweep's processes; shared pages are counted once."""
    total = 0
    for pid in _pids(proc):
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_full_info().pss
    return total


def run_once(spec: Path, run_root: Path, cache_dir: Path) -> dict[str, float]:
    """One submit; returns wall seconds and peak RSS (GiB)."""
    cmd = [
        sys.executable,
        "-m",
        "orchestrator.cli",
        "submit",
        str(spec),
        "--run-root",
        str(run_root),
        "--cache-dir",
        str(cache_dir),
    ]
    t0 = time.perf_counter()
    cpu0 = psutil.cpu_times()
    proc = subprocess.Popen(cmd)
    ps = psutil.Process(proc.pid)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            with contextlib.suppress(psutil.Error):
                peak = max(peak, memory_in_use(ps))
            time.sleep(1.0)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    rc = proc.wait()
    stop.set()
    th.join()
    if rc != 0:
        raise SystemExit(f"submit failed with exit code {rc}")
    wall = time.perf_counter() - t0
    cpu1 = psutil.cpu_times()
    idle = (cpu1.idle - cpu0.idle) + (getattr(cpu1, "iowait", 0.0) - getattr(cpu0, "iowait", 0.0))
    cores = psutil.cpu_count() or 1
    return {
        "wall_s": wall,
        "peak_pss_gib": peak / 2**30,
        "idle_core_s": idle,
        "busy_cores": cores - idle / wall,
        "cores": cores,
    }


def phases(run_root: Path, sweep: str) -> dict[str, float]:
    """Sum of per-trial wall seconds per phase, from the results DB."""
    with harness.results(run_root) as store:
        info = store.get_sweep(sweep)
        assert info is not None
        df = store.metrics_frame(info.id)
    cols = [c for c in df.columns if c.startswith("wall_s/")]
    out = {c: float(df[c].sum()) for c in cols}
    out["trials"] = len(df)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", type=Path)
    harness.add_out(ap, Path("runs-bench"), "the run roots (cold, warm) and bench.json")
    ap.add_argument("--cold-only", action="store_true", help="skip the warm-cache rerun")
    ap.add_argument(
        "--warm-only",
        action="store_true",
        help="keep OUT/cache from an earlier cold run and run only the warm pass",
    )
    args = ap.parse_args()
    name = load_spec(args.spec).name
    cache = args.out / "cache"
    result: dict[str, object] = {"spec": str(args.spec)}
    if not args.warm_only:
        if args.out.exists():
            shutil.rmtree(args.out)
        cold = run_once(args.spec, args.out / "cold", cache)
        result["cold"] = cold | phases(args.out / "cold", name)
    if not args.cold_only:
        shutil.rmtree(args.out / "warm", ignore_errors=True)
        warm = run_once(args.spec, args.out / "warm", cache)
        result["warm"] = warm | phases(args.out / "warm", name)
        t0 = time.perf_counter()
        again = run_once(args.spec, args.out / "warm", cache)  # resubmit: every trial completed
        result["resubmit"] = again | {"wall_s": time.perf_counter() - t0}
    path = args.out / f"bench{'-warm' if args.warm_only else ''}.json"
    harness.write_json(path, result, indent=2, echo=True)


if __name__ == "__main__":
    main()
