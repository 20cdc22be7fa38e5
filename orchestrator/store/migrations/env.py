"""Alembic environment of the results store (run in-process by :mod:`orchestrator.store.migrate`).

The caller passes an open connection in ``config.attributes["connection"]``; the version table is
``ss_alembic_version`` (``alembic_version`` in the same database belongs to Optuna's storage).
"""

from __future__ import annotations

from alembic import context

from orchestrator.store.migrate import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
