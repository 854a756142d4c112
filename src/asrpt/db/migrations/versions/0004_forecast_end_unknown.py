"""Forecasts say when a job's end is only its time limit's bound.

Revision ID: 0004
Revises: 0003

A job with no history has no forecast end, only the latest end Slurm allows (start plus time
limit): ``asrpt queue`` shows "unknown, at most ...". One nullable column on ``forecasts``;
rows stored before read as false. Plain ``ADD COLUMN`` / ``DROP COLUMN`` in place, as 0003.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("forecasts", sa.Column("end_unknown", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("forecasts", "end_unknown")
