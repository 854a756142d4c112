"""Forecasts: each job's latest predicted start and end, and its first (for accuracy).

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
    op.create_table(
        "forecasts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("slurm_job_id", sa.String(length=64), nullable=False),
        sa.Column("made_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("current", sa.Boolean(), nullable=False),
        sa.Column("policy", sa.String(length=64), nullable=False),
        sa.Column("running", sa.Boolean(), nullable=False),
        sa.Column("held", sa.Boolean(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=True),
        sa.Column("predicted_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("predicted_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("user_name", sa.String(length=128), nullable=False),
        sa.Column("job_name", sa.String(length=256), nullable=True),
        sa.Column("partition", sa.String(length=128), nullable=True),
        sa.Column("partitions", sa.String(length=512), nullable=True),
        sa.Column("accelerators", sa.Integer(), nullable=False),
        sa.Column("predicted_iterations", sa.Float(), nullable=True),
        sa.Column("expected_iterations", sa.Float(), nullable=True),
        sa.Column("virtual_remaining_s", sa.Float(), nullable=True),
        sa.Column("virtual_size_s", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("first_made_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_predicted_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("first_predicted_end", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_forecasts")),
        sa.UniqueConstraint("slurm_job_id", name=op.f("uq_forecasts_slurm_job_id")),
    )
    op.create_index("ix_forecasts_current_position", "forecasts", ["current", "position"])
    op.create_index("ix_forecasts_user_name", "forecasts", ["user_name"])
    op.create_index("ix_forecasts_made_at", "forecasts", ["made_at"])


def downgrade() -> None:
    op.drop_index("ix_forecasts_made_at", table_name="forecasts")
    op.drop_index("ix_forecasts_user_name", table_name="forecasts")
    op.drop_index("ix_forecasts_current_position", table_name="forecasts")
    op.drop_table("forecasts")
