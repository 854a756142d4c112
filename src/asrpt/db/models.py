"""SQLAlchemy models of the job history.

These classes are Alembic's ``target_metadata``: a change here needs a new numbered
revision in ``migrations/versions`` (a test compares the migrated schema with this module).

Times are timezone-aware ``datetime`` in UTC at this edge only; the repository converts them
to float epoch seconds for the rest of asrpt.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

#: Where a submission record came from, least to most trusted for the job's identity
#: (who submitted it, where and with what resources). The wrapper runs as the user, the
#: job_submit plugin and Slurm's own reports run inside slurmctld.
SOURCES: tuple[str, ...] = ("trace", "wrapper", "slurm", "plugin")

# Deterministic constraint names, so that migrations can refer to them and SQLite batch
# operations can recreate them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp stored in UTC.

    Naive datetimes are refused on the way in (their meaning depends on the host's zone);
    SQLite returns naive values, which are UTC by construction and get their zone back.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise ValueError(f"naive datetime {value!r}: asrpt stores timezone-aware times only")
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


class CleanText(TypeDecorator[str]):
    """Text as its column can hold it: NUL removed and cut to the column's length on the way in.

    Names, users, partitions and reasons come from users and squeue. PostgreSQL refuses a NUL
    and a value longer than the column (a DataError that failed the whole cycle's transaction)
    where SQLite stored both, so the backends disagreed. The column's declared length is the
    one limit; no caller trims on its own. Lookups are cleaned the same way, so they match.
    """

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if "\0" in value:
            value = value.replace("\0", "")
        length = self.impl.length  # type: ignore[attr-defined]
        return value[:length] if length is not None and len(value) > length else value


class CleanLongText(CleanText):
    """:class:`CleanText` without a length (a ``TEXT`` column): NUL removed only."""

    impl = Text


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {datetime: UtcDateTime()}


class Submission(Base):
    """One Slurm job as submitted: what is known before it runs."""

    __tablename__ = "submissions"
    __table_args__ = (
        CheckConstraint(
            "source IN ('trace', 'wrapper', 'slurm', 'plugin')", name="source_known"
        ),
        Index("ix_submissions_submit_time", "submit_time"),
        Index("ix_submissions_user_name", "user_name"),
        Index("ix_submissions_recurrence_group", "recurrence_group"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: Slurm's job id as text ("1234", "1234_7" for an array task).
    slurm_job_id: Mapped[str] = mapped_column(CleanText(64), unique=True)
    user_name: Mapped[str] = mapped_column(CleanText(128))
    uid: Mapped[int | None] = mapped_column(Integer)
    account: Mapped[str | None] = mapped_column(CleanText(128))
    job_name: Mapped[str | None] = mapped_column(CleanText(256))
    #: Comma-separated, as Slurm writes them (partition names cannot contain commas).
    partitions: Mapped[str | None] = mapped_column(CleanText(512))
    accelerators: Mapped[int | None] = mapped_column(Integer)
    accelerator_type: Mapped[str | None] = mapped_column(CleanText(64))
    parallel_data: Mapped[int | None] = mapped_column(Integer)
    parallel_pipeline: Mapped[int | None] = mapped_column(Integer)
    parallel_tensor: Mapped[int | None] = mapped_column(Integer)
    micro_batches: Mapped[int | None] = mapped_column(Integer)
    model_name: Mapped[str | None] = mapped_column(CleanText(128))
    workload_class: Mapped[str | None] = mapped_column(CleanText(128))
    script_hash: Mapped[str | None] = mapped_column(CleanText(128))
    recurrence_group: Mapped[str | None] = mapped_column(CleanText(256))
    command: Mapped[str | None] = mapped_column(CleanLongText())
    time_limit_s: Mapped[float | None] = mapped_column(Float)
    submit_time: Mapped[datetime] = mapped_column(UtcDateTime())
    source: Mapped[str] = mapped_column(CleanText(16))
    #: The user's ``#ASRPT iterations=N`` statement, if any.
    iterations_hint: Mapped[float | None] = mapped_column(Float)
    #: ``#ASRPT serve-model=NAME``: the LLM a serving job serves, as the user wrote it.
    serve_model: Mapped[str | None] = mapped_column(CleanText(128))
    #: ``#ASRPT tp=auto``: the daemon picks the tensor-parallel degree from the serving plan.
    parallel_tensor_auto: Mapped[bool | None] = mapped_column(Boolean)
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime())

    outcome: Mapped[JobOutcome | None] = relationship(
        back_populates="submission", cascade="all, delete-orphan", uselist=False
    )
    predictions: Mapped[list[Prediction]] = relationship(
        back_populates="submission", cascade="all, delete-orphan"
    )


class JobOutcome(Base):
    """What happened when the job ran; filled in as the daemon learns it."""

    __tablename__ = "job_outcomes"
    __table_args__ = (Index("ix_job_outcomes_end_time", "end_time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), unique=True
    )
    start_time: Mapped[datetime | None] = mapped_column(UtcDateTime())
    end_time: Mapped[datetime | None] = mapped_column(UtcDateTime())
    #: Slurm's state name: COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL, ...
    exit_state: Mapped[str | None] = mapped_column(CleanText(32))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    #: Slurm node list expression as reported ("gpu[01-02]").
    nodes: Mapped[str | None] = mapped_column(CleanLongText())
    accelerator_type_used: Mapped[str | None] = mapped_column(CleanText(64))
    #: Training iterations the job reported, when it did.
    iterations: Mapped[float | None] = mapped_column(Float)
    recorded_at: Mapped[datetime] = mapped_column(UtcDateTime())

    submission: Mapped[Submission] = relationship(back_populates="outcome")


class Prediction(Base):
    """One prediction of a job's iterations; a job collects several as predictions are raised."""

    __tablename__ = "predictions"
    __table_args__ = (Index("ix_predictions_submission_id_made_at", "submission_id", "made_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    model_version: Mapped[str] = mapped_column(CleanText(128))
    predicted_iterations: Mapped[float] = mapped_column(Float)
    made_at: Mapped[datetime] = mapped_column(UtcDateTime())

    submission: Mapped[Submission] = relationship(back_populates="predictions")


class SchedulerState(Base):
    """The daemon's serialised policy state, one JSON document per key."""

    __tablename__ = "scheduler_state"

    key: Mapped[str] = mapped_column(CleanText(128), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class Forecast(Base):
    """The daemon's forecast of one job: the latest, and the first (kept for accuracy).

    One row per Slurm job. Every cycle overwrites the row of each job it scheduled and clears
    ``current`` on the rows of jobs that left the queue, so ``current`` rows are the queue as
    the last cycle saw it (what ``asrpt queue`` shows). Rows of jobs that left stay, with
    their last forecast and the ``first_*`` one made when the daemon first saw the job, so
    forecast accuracy can be measured against the outcome; ``asrpt db prune`` deletes them.
    Everything ``asrpt queue/eta/explain`` shows is here (user and job name included), so
    those commands read one table. A predicted time is NULL when the forecast cannot place
    the job (no partition it allows can ever hold it).
    """

    __tablename__ = "forecasts"
    __table_args__ = (
        Index("ix_forecasts_current_position", "current", "position"),
        Index("ix_forecasts_user_name", "user_name"),
        Index("ix_forecasts_made_at", "made_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    slurm_job_id: Mapped[str] = mapped_column(CleanText(64), unique=True)
    #: When the cycle that made this forecast ran.
    made_at: Mapped[datetime] = mapped_column(UtcDateTime())
    #: Whether the job was in the queue at the last cycle.
    current: Mapped[bool] = mapped_column(Boolean)
    #: The policy that ordered the queue ("asrpt", "multifactor", ...).
    policy: Mapped[str] = mapped_column(CleanText(64))
    running: Mapped[bool] = mapped_column(Boolean)
    #: Held by asrpt (communication-heavy wait for a consolidated placement).
    held: Mapped[bool] = mapped_column(Boolean)
    #: 1-based place in the policy's order of pending jobs; NULL for running jobs.
    position: Mapped[int | None] = mapped_column(Integer)
    predicted_start: Mapped[datetime | None] = mapped_column(UtcDateTime())
    predicted_end: Mapped[datetime | None] = mapped_column(UtcDateTime())
    user_name: Mapped[str] = mapped_column(CleanText(128))
    job_name: Mapped[str | None] = mapped_column(CleanText(256))
    #: Where it runs, or where the forecast starts it.
    partition: Mapped[str | None] = mapped_column(CleanText(128))
    #: Partitions the job allows, comma-separated.
    partitions: Mapped[str | None] = mapped_column(CleanText(512))
    accelerators: Mapped[int] = mapped_column(Integer)
    #: The iterations the policy ranked the job by (0: unseen, it goes first).
    predicted_iterations: Mapped[float | None] = mapped_column(Float)
    #: The iterations the forecast assumed (a predicted 0 runs to its time limit there).
    expected_iterations: Mapped[float | None] = mapped_column(Float)
    #: A-SRPT's virtual single machine: remaining and total virtual work, seconds.
    virtual_remaining_s: Mapped[float | None] = mapped_column(Float)
    virtual_size_s: Mapped[float | None] = mapped_column(Float)
    #: Why the job sits where it does, in the policy's words.
    reason: Mapped[str | None] = mapped_column(CleanLongText())
    #: The job's length is unknown (no history): predicted_end is only its time limit's
    #: bound ("unknown, at most ..."). NULL in rows stored before revision 0004: false.
    end_unknown: Mapped[bool | None] = mapped_column(Boolean)
    first_made_at: Mapped[datetime] = mapped_column(UtcDateTime())
    first_predicted_start: Mapped[datetime | None] = mapped_column(UtcDateTime())
    first_predicted_end: Mapped[datetime | None] = mapped_column(UtcDateTime())


#: Alembic's target metadata.
metadata = Base.metadata
