"""Initial schema: submissions, job outcomes, predictions, scheduler state.

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


def upgrade() -> None:
    op.create_table(
        "submissions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("slurm_job_id", sa.String(length=64), nullable=False),
        sa.Column("user_name", sa.String(length=128), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=True),
        sa.Column("account", sa.String(length=128), nullable=True),
        sa.Column("job_name", sa.String(length=256), nullable=True),
        sa.Column("partitions", sa.String(length=512), nullable=True),
        sa.Column("accelerators", sa.Integer(), nullable=True),
        sa.Column("accelerator_type", sa.String(length=64), nullable=True),
        sa.Column("parallel_data", sa.Integer(), nullable=True),
        sa.Column("parallel_pipeline", sa.Integer(), nullable=True),
        sa.Column("parallel_tensor", sa.Integer(), nullable=True),
        sa.Column("micro_batches", sa.Integer(), nullable=True),
        sa.Column("model_name", sa.String(length=128), nullable=True),
        sa.Column("workload_class", sa.String(length=128), nullable=True),
        sa.Column("script_hash", sa.String(length=128), nullable=True),
        sa.Column("recurrence_group", sa.String(length=256), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("time_limit_s", sa.Float(), nullable=True),
        sa.Column("submit_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("iterations_hint", sa.Float(), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "source IN ('trace', 'wrapper', 'slurm', 'plugin')",
            name=op.f("ck_submissions_source_known"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_submissions")),
        sa.UniqueConstraint("slurm_job_id", name=op.f("uq_submissions_slurm_job_id")),
    )
    op.create_index("ix_submissions_submit_time", "submissions", ["submit_time"])
    op.create_index("ix_submissions_user_name", "submissions", ["user_name"])
    op.create_index("ix_submissions_recurrence_group", "submissions", ["recurrence_group"])

    op.create_table(
        "job_outcomes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("exit_state", sa.String(length=32), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("nodes", sa.Text(), nullable=True),
        sa.Column("accelerator_type_used", sa.String(length=64), nullable=True),
        sa.Column("iterations", sa.Float(), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_job_outcomes_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_outcomes")),
        sa.UniqueConstraint("submission_id", name=op.f("uq_job_outcomes_submission_id")),
    )
    op.create_index("ix_job_outcomes_end_time", "job_outcomes", ["end_time"])

    op.create_table(
        "predictions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("model_version", sa.String(length=128), nullable=False),
        sa.Column("predicted_iterations", sa.Float(), nullable=False),
        sa.Column("made_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_predictions_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictions")),
    )
    op.create_index(
        "ix_predictions_submission_id_made_at", "predictions", ["submission_id", "made_at"]
    )

    op.create_table(
        "scheduler_state",
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_scheduler_state")),
    )


def downgrade() -> None:
    op.drop_table("scheduler_state")
    op.drop_index("ix_predictions_submission_id_made_at", table_name="predictions")
    op.drop_table("predictions")
    op.drop_index("ix_job_outcomes_end_time", table_name="job_outcomes")
    op.drop_table("job_outcomes")
    op.drop_index("ix_submissions_recurrence_group", table_name="submissions")
    op.drop_index("ix_submissions_user_name", table_name="submissions")
    op.drop_index("ix_submissions_submit_time", table_name="submissions")
    op.drop_table("submissions")
