"""Sweep control: the driver's lease (who runs the sweep, last heartbeat) and cancel requests.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ss_sweeps") as batch:
        batch.add_column(sa.Column("driver", sa.String(255), nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("ss_sweeps") as batch:
        for column in ("cancel_requested_at", "heartbeat_at", "driver"):
            batch.drop_column(column)
