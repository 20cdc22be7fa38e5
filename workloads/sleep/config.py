"""The config of a ``sleep`` trial (a diagnostic workload, see :mod:`workloads.sleep.run`)."""

from __future__ import annotations

import hashlib
import math
import random
from typing import Literal

from pydantic import Field

from workloads.config import NEW, _Frozen


class SleepConfig(_Frozen):
    """One ``sleep`` trial (a diagnostic workload, see :mod:`workloads.sleep.run`)."""

    seed: int = 0
    """recorded only; the workload draws nothing at random"""
    seconds: float = Field(default=1.0, ge=0, le=86_400)
    """how long the trial sleeps, s"""
    value: float = 1.0
    """echoed as the metric ``value`` (any float, NaN and inf included)"""
    fail: Literal["never", "error", "exit"] = "never"
    """never | error: raise RuntimeError after the sleep | exit: the worker process dies"""
    fail_attempts: int = Field(default=1, ge=0)
    """fail: exit kills this many attempts, then an attempt succeeds"""
    law_x: float | None = Field(default=None, gt=0, json_schema_extra=NEW)
    """x of the synthetic law (None: no ``sleep.law_y``); the law axis of a design"""
    law_noise: float = Field(default=0.02, ge=0, json_schema_extra=NEW)
    """standard deviation of the synthetic law's seeded noise"""

    def law_y(self) -> float | None:
        """``0.1 * log10(law_x) + 1`` plus the trial's seeded noise; None without ``law_x``."""
        if self.law_x is None:
            return None
        digest = hashlib.sha256(f"{self.seed}:{self.law_x!r}".encode()).digest()
        noise = random.Random(int.from_bytes(digest[:8], "big")).gauss(0.0, self.law_noise)
        return 0.1 * math.log10(self.law_x) + 1.0 + noise
