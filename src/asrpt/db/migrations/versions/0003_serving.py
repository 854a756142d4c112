"""Serving jobs: ``#ASRPT serve-model=NAME`` and ``tp=auto`` on each submission.

Revision ID: 0003
Revises: 0002

Two nullable columns on ``submissions``; existing rows keep NULL (not a serving job). Plain
``ADD COLUMN`` / ``DROP COLUMN`` work in place on PostgreSQL and on SQLite (3.35 or later
for the downgrade); no table copy, so the history's foreign keys are never touched.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("submissions", sa.Column("serve_model", sa.String(length=128), nullable=True))
    op.add_column("submissions", sa.Column("parallel_tensor_auto", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("submissions", "parallel_tensor_auto")
    op.drop_column("submissions", "serve_model")
