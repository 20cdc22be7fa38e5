"""Adaptive designs: one row per decision of a sweep's ``design:`` driver (a pick or a stop).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_FLOATS = ("value", "predicted_cost_s", "expected_half_width", "half_width", "committed_s")


def upgrade() -> None:
    op.create_table(
        "ss_design_decisions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "sweep_id",
            sa.Integer,
            sa.ForeignKey("ss_sweeps.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("rank", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("seed", sa.Integer, nullable=True),
        sa.Column("trial_key", sa.String(64), nullable=True),
        sa.Column("cost_basis", sa.String(250), nullable=True),
        *(sa.Column(c, sa.Float, nullable=True) for c in _FLOATS),
        sa.Column("spent_s", sa.Float, nullable=False),
        sa.Column("stop", sa.String(16), nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("sweep_id", "step", "rank", name="uq_ss_design_step_rank"),
    )
    op.create_index("ix_ss_design_decisions_sweep_id", "ss_design_decisions", ["sweep_id"])


def downgrade() -> None:
    op.drop_table("ss_design_decisions")
