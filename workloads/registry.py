"""The workload registry: every workload a sweep may name, one row each.

A workload is a package (``workloads/<workload>/``: ``config.py``, ``run.py``, ``checks.py``,
optionally ``cost.py``, and ``workload.py`` declaring its :class:`~workloads.protocol.Workload`);
adding one touches its package and one row of :data:`WORKLOADS` (see docs/workloads.md, "Adding
a workload"). The orchestrator reads the descriptors' fields and never compares a workload's
name. Light (pydantic only): each workload imports torch inside its ``run`` and its checks.
"""

from __future__ import annotations

from workloads.decode_bench import workload as decode_bench
from workloads.draft_train import workload as draft_train
from workloads.protocol import Workload
from workloads.serving import workload as serving
from workloads.sleep import workload as sleep

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        draft_train.WORKLOAD,
        decode_bench.WORKLOAD,
        serving.WORKLOAD,
        sleep.WORKLOAD,
    )
}
"""every workload a spec may name, by name"""


def get_workload(name: str) -> Workload:
    """The registered workload ``name``.

    Raises:
        KeyError: no such workload (a spec naming one is refused at load with the choices).
    """
    return WORKLOADS[name]
