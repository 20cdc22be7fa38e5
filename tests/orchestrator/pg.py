"""The PostgreSQL server of tests (127.0.0.1:5432, trust auth, database ``test``): a throwaway
schema per test, selected through the URL's ``search_path`` so every client sees only it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

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
