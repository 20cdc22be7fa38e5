"""``sleep``: a test and diagnostic workload that waits, optionally fails, and reports.

It exercises the orchestration (Ray scheduling, retries, cancellation, crash recovery, SQL and
MLflow bookkeeping) without a model, in seconds: it sleeps ``seconds`` in ticks of at most 0.1 s,
then reports ``sleep.seconds`` (measured wall time, s), ``sleep.attempt`` (this trial's attempt
number in its output folder, from 1), ``value`` (the config's, echoed) and the series ``ticks``
(elapsed seconds at each tick). Every attempt appends one JSON line to ``attempts.jsonl`` in the
output folder: attempt, pid, host and Ray node id.

Failure modes, for tests: ``fail: error`` raises :class:`RuntimeError` after the sleep (a
deterministic Python error: recorded as failed, not retried unless the spec asks);
``fail: exit`` ends the worker process with ``os._exit(1)`` on the first ``fail_attempts``
attempts (a dying worker: Ray retries it up to ``resources.max_retries``).
A synthetic law, for testing adaptive designs (``design:`` over the axis ``law_x``): with
``law_x`` set, the trial also reports ``sleep.law_y = 0.1 * log10(law_x) + 1 + e``, where ``e`` is
Gaussian noise of standard deviation ``law_noise`` drawn from a generator seeded by
``(seed, law_x)`` (the same trial always draws the same noise).
It measures nothing about speculative decoding; no figure of this project comes from it.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

from workloads.result import Progress, TrialResult
from workloads.sleep.config import SleepConfig

_TICK_S = 0.1


def _ray_node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - outside Ray there is no node id
        return None


def run(cfg: SleepConfig, *, out_dir: Path, progress: Progress | None = None) -> TrialResult:
    """Sleep, fail as asked, report.

    Raises:
        RuntimeError: ``fail: error``.
    """
    say = progress or (lambda _m: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "attempts.jsonl"
    attempt = 1 + (len(log.read_text().splitlines()) if log.exists() else 0)
    where = {"attempt": attempt, "pid": os.getpid(), "host": socket.gethostname()}
    with log.open("a") as f:
        f.write(json.dumps({**where, "node_id": _ray_node_id()}) + "\n")
    say(f"sleep: attempt {attempt}, {cfg.seconds:g} s")
    t0 = time.perf_counter()
    ticks: list[float] = []
    for _ in range(math.ceil(cfg.seconds / _TICK_S) if cfg.seconds else 0):
        time.sleep(min(_TICK_S, max(0.0, cfg.seconds - (time.perf_counter() - t0))))
        ticks.append(time.perf_counter() - t0)
    if cfg.fail == "exit" and attempt <= cfg.fail_attempts:
        say(f"sleep: attempt {attempt} ends its worker process (fail: exit)")
        os._exit(1)
    if cfg.fail == "error":
        raise RuntimeError(f"sleep trial failed on purpose (fail: error, attempt {attempt})")
    metrics = {
        "sleep.seconds": time.perf_counter() - t0,
        "sleep.attempt": float(attempt),
        "value": cfg.value,
    }
    law_y = cfg.law_y()
    if law_y is not None:
        metrics["sleep.law_y"] = law_y
    return TrialResult(
        metrics=metrics,
        series={"ticks": ticks},
    )
