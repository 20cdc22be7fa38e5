"""Initial schema: sweeps, trials, metrics and fits (what ``create_all`` built before Alembic).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_FIT_FLOATS = ("a", "b", "a_lo", "a_hi", "b_lo", "b_hi", "r2")


def upgrade() -> None:
    op.create_table(
        "ss_sweeps",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("workload", sa.String(64), nullable=False),
        sa.Column("spec_yaml", sa.Text, nullable=False),
        sa.Column("spec_path", sa.String(1024), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("mlflow_run_id", sa.String(64), nullable=True),
    )
    op.create_table(
        "ss_trials",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "sweep_id",
            sa.Integer,
            sa.ForeignKey("ss_sweeps.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("trial_key", sa.String(64), nullable=False),
        sa.Column("config_json", sa.Text, nullable=False),
        sa.Column("overrides_json", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("mlflow_run_id", sa.String(64), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("wall_s", sa.Float, nullable=True),
        sa.UniqueConstraint("sweep_id", "trial_key", name="uq_ss_trials_sweep_key"),
    )
    op.create_index("ix_ss_trials_sweep_id", "ss_trials", ["sweep_id"])
    op.create_index("ix_ss_trials_state", "ss_trials", ["state"])
    op.create_table(
        "ss_metrics",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "trial_id",
            sa.Integer,
            sa.ForeignKey("ss_trials.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(250), nullable=False),
        sa.Column("value", sa.Float, nullable=True),
        sa.Column("nonfinite", sa.String(8), nullable=True),
        sa.Column("step", sa.Integer, nullable=False),
        sa.UniqueConstraint("trial_id", "name", "step", name="uq_ss_metrics_trial_name_step"),
    )
    op.create_index("ix_ss_metrics_trial_id", "ss_metrics", ["trial_id"])
    op.create_table(
        "ss_fits",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "sweep_id",
            sa.Integer,
            sa.ForeignKey("ss_sweeps.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("law", sa.String(64), nullable=False),
        sa.Column("x_name", sa.String(250), nullable=False),
        sa.Column("y_name", sa.String(250), nullable=False),
        sa.Column("form", sa.String(250), nullable=False),
        *(sa.Column(c, sa.Float, nullable=True) for c in _FIT_FLOATS),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("details_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("sweep_id", "law", name="uq_ss_fits_sweep_law"),
    )
    op.create_index("ix_ss_fits_sweep_id", "ss_fits", ["sweep_id"])


def downgrade() -> None:
    for table in ("ss_fits", "ss_metrics", "ss_trials", "ss_sweeps"):
        op.drop_table(table)
