"""The PostgreSQL server of tests (127.0.0.1:5432, trust auth, database ``test``): a throwaway
schema per test, selected through the URL's ``search_path`` so every client sees only it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


@contextmanager
def fresh_schema(prefix: str = "t") -> Iterator[tuple[str, str]]:
    """Create an empty schema; yield ``(schema, url)`` with the URL pinned to it; drop it after.

    Skips the test when the server is not reachable.
    """
    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError:
        pytest.skip("no PostgreSQL at 127.0.0.1:5432")
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema, f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()


PG_BIN = Path("/usr/lib/postgresql/15/bin")


@dataclass
class OwnServer:
    """A throwaway PostgreSQL server of one test, on a free loopback port."""

    data: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(self.data),
             "-l", str(self.data.parent / "log"), "-w", *args],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data.parent}"
        self.pg_ctl("-o", opts, "start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-m", mode, "stop")


@contextmanager
def own_server() -> Iterator[OwnServer]:
    """Start a new PostgreSQL cluster (initdb, trust auth, 127.0.0.1 only) that the test may
    stop and restart; stopped and deleted afterwards. Skips without root or the server binaries
    (PostgreSQL refuses to run as root, so it runs as the ``postgres`` user)."""
    if os.geteuid() != 0 or not (PG_BIN / "initdb").exists() or not shutil.which("runuser"):
        pytest.skip("needs root and PostgreSQL 15's server binaries to run a private server")
    home = Path(tempfile.mkdtemp(prefix="ss-pg-", dir="/tmp"))
    shutil.chown(home, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = OwnServer(home / "data", port)
    try:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(server.data),
             "-A", "trust", "-U", "postgres", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        server.start()
        yield server
    finally:
        with suppress(subprocess.SubprocessError):
            server.stop("immediate")
        shutil.rmtree(home, ignore_errors=True)
