"""The sweep lease: which driver process runs a sweep, its heartbeat, and cancel requests.

A driver (``host:pid``, :func:`driver_id`) claims a sweep before running it, renews the claim with
heartbeats, and releases it at the end. A claim is free when no driver holds it, when the
holder's heartbeat is older than ``stale_after_s``, or when the holder ran on this host and its
process is gone (a driver killed with ``kill -9``). A cancel request is a timestamp on the sweep
that the holder sees at its next heartbeat.

The functions taking a :class:`~sqlalchemy.orm.Session` run inside one unit of work of
:class:`~orchestrator.store.results.ResultsStore` (which commits, retries and maps errors); they
read and write only :class:`~orchestrator.store.rows.SweepRow` and
:class:`~orchestrator.store.rows.TrialRow`.
"""

from __future__ import annotations

import math
import os
import socket
from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.errors import StoreError
from orchestrator.store.rows import SweepInfo, SweepRow, TrialRow, TrialState, as_utc, now_utc

__all__ = ["cancel", "claim", "driver_id", "lease_alive", "release", "renew"]


def driver_id() -> str:
    """This process as a sweep driver: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def lease_alive(info: SweepInfo, *, stale_after_s: float) -> bool:
    """Whether a live driver holds the sweep: one whose heartbeat is younger than
    ``stale_after_s`` and whose process (on this host) still exists."""
    return _holder_alive(info.driver, as_utc(info.heartbeat_at), now_utc(), stale_after_s)


def claim(s: Session, sweep_id: int, driver: str, *, stale_after_s: float, url_text: str) -> None:
    """Make ``driver`` the sweep's holder (heartbeat now) and clear any cancel request.

    Raises:
        StoreError: no such sweep (``url_text`` names the database), another driver holds the
            sweep and is alive (the message says which and how to stop it), or another driver
            claimed it during this call.
    """
    now = now_utc()
    row = s.get(SweepRow, sweep_id)
    if row is None:
        raise StoreError(f"no sweep with id {sweep_id} in {url_text}")
    holder, beat = row.driver, as_utc(row.heartbeat_at)
    if holder != driver and _holder_alive(holder, beat, now, stale_after_s):
        age = (now - beat).total_seconds() if beat is not None else math.inf
        raise StoreError(
            f"sweep {row.name!r} is being run by driver {holder} (last heartbeat "
            f"{age:.0f} s ago). Wait for it, or stop it with `orchestrator cancel "
            f"{row.name}` and the same --run-root or --db-url; a driver on another "
            f"host that died frees the sweep {stale_after_s:.0f} s after its last "
            "heartbeat"
        )
    result = s.execute(
        update(SweepRow)
        .where(SweepRow.id == sweep_id, _same_holder(holder))
        .values(driver=driver, heartbeat_at=now, cancel_requested_at=None)
    )
    if result.rowcount == 0:  # type: ignore[attr-defined]
        raise StoreError(f"sweep {row.name!r} was claimed by another driver just now; try again")


def renew(s: Session, sweep_id: int, driver: str) -> bool:
    """Renew ``driver``'s heartbeat on the sweep; return True when a cancel was requested.

    Raises:
        StoreError: the lease was taken over by another driver (or the sweep is gone).
    """
    s.execute(
        update(SweepRow)
        .where(SweepRow.id == sweep_id, SweepRow.driver == driver)
        .values(heartbeat_at=now_utc())
    )
    row = s.get(SweepRow, sweep_id)
    if row is None or row.driver != driver:
        raise StoreError(f"driver {driver} lost its lease on sweep id {sweep_id}")
    return row.cancel_requested_at is not None


def release(s: Session, sweep_id: int, driver: str) -> None:
    """End ``driver``'s lease; a no-op when it does not hold the sweep."""
    s.execute(
        update(SweepRow)
        .where(SweepRow.id == sweep_id, SweepRow.driver == driver)
        .values(driver=None, heartbeat_at=None)
    )


def cancel(
    s: Session, sweep_id: int, *, stale_after_s: float, url_text: str
) -> tuple[int, int, bool]:
    """Record a cancel request (which moves ``updated_at``) and cancel the trials that no live
    driver will: pending ones always, running ones only when no live driver holds the sweep.

    Returns:
        ``(pending cancelled, running cancelled here, a live driver was told)``.

    Raises:
        StoreError: no such sweep (``url_text`` names the database).
    """
    now = now_utc()
    row = s.get(SweepRow, sweep_id)
    if row is None:
        raise StoreError(f"no sweep with id {sweep_id} in {url_text}")
    live = _holder_alive(row.driver, as_utc(row.heartbeat_at), now, stale_after_s)
    s.execute(
        update(SweepRow)
        .where(SweepRow.id == sweep_id)
        .values(cancel_requested_at=now, updated_at=now)
    )
    states = [TrialState.PENDING.value] + ([] if live else [TrialState.RUNNING.value])
    counts = []
    for state in states:
        result = s.execute(
            update(TrialRow)
            .where(TrialRow.sweep_id == sweep_id, TrialRow.state == state)
            .values(state=TrialState.CANCELLED.value, finished_at=now)
        )
        counts.append(int(result.rowcount))  # type: ignore[attr-defined]
    return counts[0], counts[1] if len(counts) > 1 else 0, live


def _holder_alive(
    driver: str | None, heartbeat_at: datetime | None, now: datetime, stale_after_s: float
) -> bool:
    """Whether ``driver`` beat less than ``stale_after_s`` before ``now`` and may still run."""
    if not driver or heartbeat_at is None:
        return False
    age = (now - heartbeat_at).total_seconds()
    return age < stale_after_s and _driver_alive(driver)


def _driver_alive(driver: str) -> bool:
    """False only when ``driver`` ran on this host and its process is gone."""
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine: only its heartbeat can tell
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _same_holder(holder: str | None) -> Any:
    """The ``WHERE`` clause that the sweep is still held by ``holder`` (None: by nobody)."""
    return SweepRow.driver.is_(None) if holder is None else SweepRow.driver == holder
