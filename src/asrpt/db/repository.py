"""The history repository: every read and write of the job history goes through these verbs.

Plain frozen dataclasses go in and come out; times are float epoch seconds here and
timezone-aware UTC datetimes only inside the database. Nothing deletes history except
:meth:`HistoryRepository.prune_older_than`.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.engine import URL, Engine
from sqlalchemy.orm import Session

from asrpt.db.models import SOURCES, Forecast, JobOutcome, Prediction, SchedulerState, Submission
from asrpt.db.session import make_engine, make_sessionmaker, translate_errors
from asrpt.exceptions import UnknownJob
from asrpt.forecast_records import ForecastRecord, StoredForecast

_SECONDS_PER_DAY = 86_400.0


def to_datetime(epoch_s: float) -> datetime:
    """Epoch seconds -> aware UTC datetime (the only direction the DB edge needs inbound)."""
    if not math.isfinite(epoch_s):
        raise ValueError(f"time must be finite epoch seconds, got {epoch_s!r}")
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc)


def to_epoch_s(moment: datetime) -> float:
    """Aware datetime -> epoch seconds."""
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}")
    return moment.timestamp()


def _optional_epoch(moment: datetime | None) -> float | None:
    return None if moment is None else to_epoch_s(moment)


def _optional_datetime(epoch_s: float | None) -> datetime | None:
    return None if epoch_s is None else to_datetime(epoch_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionRecord:
    """What one source knows about a submission; None means "this source does not know"."""

    slurm_job_id: str
    user: str
    #: Submit time, epoch seconds.
    submit_time_s: float
    #: "wrapper", "plugin", "slurm" or "trace" (see :data:`asrpt.db.models.SOURCES`).
    source: str
    uid: int | None = None
    account: str | None = None
    job_name: str | None = None
    partitions: tuple[str, ...] = ()
    #: Accelerators requested (all of them, gang).
    accelerators: int | None = None
    accelerator_type: str | None = None
    parallel_data: int | None = None
    parallel_pipeline: int | None = None
    parallel_tensor: int | None = None
    micro_batches: int | None = None
    model_name: str | None = None
    workload_class: str | None = None
    script_hash: str | None = None
    recurrence_group: str | None = None
    command: str | None = None
    time_limit_s: float | None = None
    #: The user's own estimate of training iterations (``#ASRPT iterations=N``).
    iterations_hint: float | None = None
    #: An LLM serving job's model (``#ASRPT serve-model=NAME``), as the user wrote it.
    serve_model: str | None = None
    #: ``#ASRPT tp=auto``: True; None when the user did not ask (never False).
    parallel_tensor_auto: bool | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown source {self.source!r}; expected one of {SOURCES}")
        if not self.slurm_job_id:
            raise ValueError("slurm_job_id must not be empty")
        for part in self.partitions:
            if "," in part:
                raise ValueError(f"partition name {part!r} contains a comma")


#: Who submitted the job, where and with what: only an equally or more trusted source may
#: change these once they are recorded (a wrapper record, written by the user's process,
#: must not rewrite what slurmctld reported).
IDENTITY_FIELDS: frozenset[str] = frozenset(
    {
        "user",
        "uid",
        "account",
        "job_name",
        "partitions",
        "accelerators",
        "accelerator_type",
        "time_limit_s",
        "submit_time_s",
    }
)

# Record field -> column, where the names differ.
_COLUMN_OF = {"user": "user_name", "submit_time_s": "submit_time"}


@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeRecord:
    """What happened to a job; fields left None keep what was recorded before."""

    slurm_job_id: str
    start_time_s: float | None = None
    end_time_s: float | None = None
    exit_state: str | None = None
    exit_code: int | None = None
    nodes: str | None = None
    accelerator_type_used: str | None = None
    #: Training iterations the job reported.
    iterations: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictionRecord:
    slurm_job_id: str
    predicted_iterations: float
    model_version: str
    made_at_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryRow:
    """A submission joined with its outcome: one training/aggregation row for the predictor.

    Attribute names follow :class:`asrpt.predict.features.JobLike`, so rows feed
    ``build_features`` directly.
    """

    job_id: str
    user: str
    uid: int | None
    account: str | None
    job_name: str | None
    #: Recurrence group: the explicit group, else the script hash, else None.
    group: str | None
    partitions: tuple[str, ...]
    accelerators: float | None
    accelerator_type: str | None
    parallel_data: int | None
    parallel_pipeline: int | None
    parallel_tensor: int | None
    micro_batches: int | None
    model_name: str | None
    workload_class: str | None
    script_hash: str | None
    command: str | None
    time_limit_s: float | None
    submit_time_s: float
    source: str
    iterations_hint: float | None
    start_time_s: float | None
    end_time_s: float | None
    exit_state: str | None
    exit_code: int | None
    nodes: str | None
    accelerator_type_used: str | None
    iterations: float | None

    @property
    def run_time_s(self) -> float | None:
        if self.start_time_s is None or self.end_time_s is None:
            return None
        return self.end_time_s - self.start_time_s


@dataclass(frozen=True, slots=True)
class PruneResult:
    """Rows deleted by :meth:`HistoryRepository.prune_older_than`."""

    submissions: int
    outcomes: int
    predictions: int
    forecasts: int = 0


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Finished past runs matching a group or user (what a prediction could learn from)."""

    count: int
    median_iterations: float | None
    median_run_time_s: float | None


@dataclass(frozen=True, slots=True)
class AccuracySummary:
    """How right recent predictions were, over the most recent finished jobs.

    Iteration error: each job's first prediction against the iterations recorded when it
    ended, in percent of the latter. Start/end error: the first forecast (made when the
    daemon first saw the job) against the recorded start and end, in seconds.
    """

    finished_jobs: int
    median_abs_pct_iterations_error: float | None
    iterations_samples: int
    median_abs_start_error_s: float | None
    start_samples: int
    median_abs_end_error_s: float | None
    end_samples: int


def _rank(source: str) -> int:
    return SOURCES.index(source)


class HistoryRepository:
    """Job history on SQLite or PostgreSQL.

    The database must already be migrated (``asrpt db upgrade``); a missing schema raises
    :class:`~asrpt.exceptions.MigrationRequired` at the first verb, a locked or unreachable
    database :class:`~asrpt.exceptions.DatabaseUnavailable`, both naming the URL.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = make_sessionmaker(engine)

    @classmethod
    def from_url(cls, url: str | URL, **engine_options: Any) -> HistoryRepository:
        return cls(make_engine(url, **engine_options))

    def close(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Session]:
        with translate_errors(self.engine), self._sessions.begin() as session:
            yield session

    # -- submissions -------------------------------------------------------------------

    def record_submission(self, record: SubmissionRecord, *, now_s: float | None = None) -> None:
        """Insert or merge what ``record.source`` knows about a job (idempotent per job id).

        Merge rule: identity fields (:data:`IDENTITY_FIELDS`) take the new value only if the
        new source is at least as trusted as the stored one (plugin > slurm > wrapper >
        trace); any other field takes a new non-None value if the stored one is None or the
        new source is at least as trusted. So a wrapper record arriving after the plugin's
        adds the model, parallelism, hint and script hash only it knows, and changes nothing
        of the job's identity.
        """
        recorded_at = to_datetime(time.time() if now_s is None else now_s)
        with self._transaction() as session:
            row = session.scalars(
                select(Submission).where(Submission.slurm_job_id == record.slurm_job_id)
            ).one_or_none()
            if row is None:
                row = Submission(
                    slurm_job_id=record.slurm_job_id,
                    source=record.source,
                    recorded_at=recorded_at,
                    **{
                        _COLUMN_OF.get(name, name): value
                        for name, value in self._column_values(record).items()
                    },
                )
                session.add(row)
                return
            trusted = _rank(record.source) >= _rank(row.source)
            for name, value in self._column_values(record).items():
                if value is None:
                    continue
                column = _COLUMN_OF.get(name, name)
                if name in IDENTITY_FIELDS:
                    if trusted:
                        setattr(row, column, value)
                elif trusted or getattr(row, column) is None:
                    setattr(row, column, value)
            if trusted:
                row.source = record.source
            row.recorded_at = recorded_at

    @staticmethod
    def _column_values(record: SubmissionRecord) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for f in fields(record):
            if f.name in ("slurm_job_id", "source"):
                continue
            value = getattr(record, f.name)
            if f.name == "partitions":
                value = ",".join(value) if value else None
            elif f.name == "submit_time_s":
                value = to_datetime(value)
            values[f.name] = value
        return values

    def get_submission(self, slurm_job_id: str) -> SubmissionRecord | None:
        """The merged submission as stored, or None."""
        with self._transaction() as session:
            row = session.scalars(
                select(Submission).where(Submission.slurm_job_id == slurm_job_id)
            ).one_or_none()
            return None if row is None else _submission_record(row)

    # -- outcomes ----------------------------------------------------------------------

    def record_outcome(self, outcome: OutcomeRecord, *, now_s: float | None = None) -> None:
        """Insert or update a job's outcome; None fields keep the values recorded earlier.

        Raises
        ------
        UnknownJob
            No submission is recorded for ``outcome.slurm_job_id`` (record it first, with
            ``source="slurm"`` if nothing else knew about the job).
        """
        recorded_at = to_datetime(time.time() if now_s is None else now_s)
        with self._transaction() as session:
            submission = self._submission_or_raise(session, outcome.slurm_job_id)
            row = submission.outcome
            if row is None:
                row = JobOutcome(submission=submission, recorded_at=recorded_at)
                session.add(row)
            updates = {
                "start_time": _optional_datetime(outcome.start_time_s),
                "end_time": _optional_datetime(outcome.end_time_s),
                "exit_state": outcome.exit_state,
                "exit_code": outcome.exit_code,
                "nodes": outcome.nodes,
                "accelerator_type_used": outcome.accelerator_type_used,
                "iterations": outcome.iterations,
            }
            for column, value in updates.items():
                if value is not None:
                    setattr(row, column, value)
            row.recorded_at = recorded_at

    @staticmethod
    def _submission_or_raise(session: Session, slurm_job_id: str) -> Submission:
        submission = session.scalars(
            select(Submission).where(Submission.slurm_job_id == slurm_job_id)
        ).one_or_none()
        if submission is None:
            raise UnknownJob(f"no submission recorded for Slurm job {slurm_job_id!r}")
        return submission

    # -- predictions -------------------------------------------------------------------

    def record_prediction(
        self,
        slurm_job_id: str,
        *,
        predicted_iterations: float,
        model_version: str,
        made_at_s: float,
    ) -> None:
        """Append a prediction; earlier ones stay (they show how a prediction was raised)."""
        if not math.isfinite(predicted_iterations) or predicted_iterations < 0:
            raise ValueError(f"predicted_iterations must be finite and >= 0, got {predicted_iterations!r}")
        with self._transaction() as session:
            submission = self._submission_or_raise(session, slurm_job_id)
            session.add(
                Prediction(
                    submission=submission,
                    model_version=model_version,
                    predicted_iterations=float(predicted_iterations),
                    made_at=to_datetime(made_at_s),
                )
            )

    def latest_predictions(
        self, slurm_job_ids: Iterable[str] | None = None
    ) -> dict[str, PredictionRecord]:
        """The newest prediction of each job (all jobs when ``slurm_job_ids`` is None)."""
        ranked = select(
            Prediction.id,
            func.row_number()
            .over(
                partition_by=Prediction.submission_id,
                order_by=(Prediction.made_at.desc(), Prediction.id.desc()),
            )
            .label("position"),
        ).subquery()
        query = (
            select(Submission.slurm_job_id, Prediction)
            .join(Prediction, Prediction.submission_id == Submission.id)
            .join(ranked, ranked.c.id == Prediction.id)
            .where(ranked.c.position == 1)
        )
        if slurm_job_ids is not None:
            wanted = list(dict.fromkeys(slurm_job_ids))
            if not wanted:
                return {}
            query = query.where(Submission.slurm_job_id.in_(wanted))
        with self._transaction() as session:
            return {
                job_id: PredictionRecord(
                    slurm_job_id=job_id,
                    predicted_iterations=prediction.predicted_iterations,
                    model_version=prediction.model_version,
                    made_at_s=to_epoch_s(prediction.made_at),
                )
                for job_id, prediction in session.execute(query).all()
            }

    # -- history for training ----------------------------------------------------------

    def history_rows(
        self,
        *,
        since_s: float | None = None,
        finished_only: bool = False,
        exit_states: Collection[str] | None = None,
    ) -> list[HistoryRow]:
        """Submissions joined with outcomes, oldest submission first.

        Parameters
        ----------
        since_s:
            Only submissions at or after this epoch time.
        finished_only:
            Only jobs with a recorded end time.
        exit_states:
            Only jobs that ended in one of these Slurm states (e.g. ``{"COMPLETED"}``);
            implies ``finished_only``.
        """
        query = (
            select(Submission, JobOutcome)
            .outerjoin(JobOutcome, JobOutcome.submission_id == Submission.id)
            .order_by(Submission.submit_time, Submission.id)
        )
        if since_s is not None:
            query = query.where(Submission.submit_time >= to_datetime(since_s))
        if finished_only or exit_states is not None:
            query = query.where(JobOutcome.end_time.is_not(None))
        if exit_states is not None:
            query = query.where(JobOutcome.exit_state.in_(list(exit_states)))
        with self._transaction() as session:
            return [_history_row(s, o) for s, o in session.execute(query).all()]

    # -- scheduler state ---------------------------------------------------------------

    def save_state(self, key: str, value: Any, *, now_s: float | None = None) -> None:
        """Store a JSON-serialisable value under ``key``, replacing the previous one."""
        updated_at = to_datetime(time.time() if now_s is None else now_s)
        with self._transaction() as session:
            row = session.get(SchedulerState, key)
            if row is None:
                session.add(SchedulerState(key=key, value=value, updated_at=updated_at))
            else:
                row.value = value
                row.updated_at = updated_at

    def load_state(self, key: str, default: Any = None) -> Any:
        """The value saved under ``key``, or ``default`` if nothing was saved."""
        with self._transaction() as session:
            row = session.get(SchedulerState, key)
            return default if row is None else row.value

    # -- forecasts ---------------------------------------------------------------------

    def record_forecasts(self, made_at_s: float, rows: Iterable[ForecastRecord]) -> int:
        """Store one cycle's forecasts; returns the number of rows written.

        Each job keeps one row: this cycle's forecast replaces the previous one, the first
        forecast ever made for the job is kept next to it, and every job not in ``rows``
        stops being current (it left the queue). Call it with no rows when the queue is empty.
        """
        made_at = to_datetime(made_at_s)
        wanted = {row.slurm_job_id: row for row in rows}
        with self._transaction() as session:
            existing: dict[str, Forecast] = {}
            for chunk in _chunks(list(wanted), 500):
                for stored in session.scalars(select(Forecast).where(Forecast.slurm_job_id.in_(chunk))):
                    existing[stored.slurm_job_id] = stored
            for job_id, row in wanted.items():
                start = _finite_datetime(row.predicted_start_s)
                end = _finite_datetime(row.predicted_end_s)
                stored = existing.get(job_id)
                if stored is None:
                    stored = Forecast(
                        slurm_job_id=job_id,
                        first_made_at=made_at,
                        first_predicted_start=start,
                        first_predicted_end=end,
                    )
                    session.add(stored)
                stored.made_at = made_at
                stored.current = True
                stored.policy = row.policy
                stored.running = row.running
                stored.held = row.held
                stored.position = row.position
                stored.predicted_start = start
                stored.predicted_end = end
                stored.user_name = row.user
                stored.job_name = row.job_name
                stored.partition = row.partition
                stored.partitions = ",".join(row.partitions) if row.partitions else None
                stored.accelerators = row.accelerators
                stored.predicted_iterations = _finite(row.predicted_iterations)
                stored.expected_iterations = _finite(row.expected_iterations)
                stored.virtual_remaining_s = _finite(row.virtual_remaining_s)
                stored.virtual_size_s = _finite(row.virtual_size_s)
                stored.reason = row.reason
                stored.end_unknown = row.end_unknown
            session.flush()
            session.execute(
                update(Forecast)
                .where(Forecast.current.is_(True), Forecast.made_at != made_at)
                .values(current=False)
            )
        return len(wanted)

    def latest_forecasts(
        self,
        user: str | Collection[str] | None = None,
        partition: str | Collection[str] | None = None,
    ) -> list[StoredForecast]:
        """The queue as the last cycle saw it, in scheduling order: running jobs (soonest end
        first), then pending jobs by their place in the policy's order.

        ``user`` and ``partition`` filter (a name, a comma-separated list or a collection); a
        job matches a partition it runs or is predicted to start in, or one it allows.
        """
        query = select(Forecast).where(Forecast.current.is_(True))
        users = _names(user)
        if users:
            query = query.where(Forecast.user_name.in_(users))
        with self._transaction() as session:
            rows = [_stored_forecast(f) for f in session.scalars(query)]
        parts = set(_names(partition))
        if parts:
            rows = [f for f in rows if f.partition in parts or parts.intersection(f.partitions)]
        return sorted(rows, key=_queue_order)

    def forecast_for(self, slurm_job_id: str) -> StoredForecast | None:
        """The job's latest forecast (``current`` says whether it is still queued), or None."""
        with self._transaction() as session:
            row = session.scalars(select(Forecast).where(Forecast.slurm_job_id == slurm_job_id)).one_or_none()
            return None if row is None else _stored_forecast(row)

    def predictions_of(self, slurm_job_id: str) -> list[PredictionRecord]:
        """Every prediction made for the job, oldest first (a raised one follows the first)."""
        query = (
            select(Prediction)
            .join(Submission, Prediction.submission_id == Submission.id)
            .where(Submission.slurm_job_id == slurm_job_id)
            .order_by(Prediction.made_at, Prediction.id)
        )
        with self._transaction() as session:
            return [
                PredictionRecord(
                    slurm_job_id=slurm_job_id,
                    predicted_iterations=p.predicted_iterations,
                    model_version=p.model_version,
                    made_at_s=to_epoch_s(p.made_at),
                )
                for p in session.scalars(query)
            ]

    def finished_runs(
        self,
        *,
        group: str | None = None,
        user: str | None = None,
        ended_before_s: float | None = None,
    ) -> RunSummary:
        """Finished runs of a recurrence group (the explicit group, else the script hash) or of
        a user, that ended before ``ended_before_s``: the history a prediction rests on."""
        if group is None and user is None:
            raise ValueError("finished_runs needs a group or a user")
        query = (
            select(JobOutcome.iterations, JobOutcome.start_time, JobOutcome.end_time)
            .join(Submission, JobOutcome.submission_id == Submission.id)
            .where(JobOutcome.end_time.is_not(None))
        )
        if group is not None:
            query = query.where(
                or_(
                    Submission.recurrence_group == group,
                    and_(Submission.recurrence_group.is_(None), Submission.script_hash == group),
                )
            )
        if user is not None:
            query = query.where(Submission.user_name == user)
        if ended_before_s is not None:
            query = query.where(JobOutcome.end_time < to_datetime(ended_before_s))
        with self._transaction() as session:
            found = session.execute(query).all()
        iterations = [float(n) for n, _, _ in found if n is not None]
        run_times = [to_epoch_s(e) - to_epoch_s(s) for _, s, e in found if s is not None and e is not None]
        return RunSummary(
            count=len(found),
            median_iterations=statistics.median(iterations) if iterations else None,
            median_run_time_s=statistics.median(run_times) if run_times else None,
        )

    def recent_accuracy(self, *, limit: int = 200) -> AccuracySummary:
        """Prediction and forecast error over the ``limit`` most recently ended jobs."""
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit!r}")
        recent = (
            select(Submission.id, Submission.slurm_job_id, JobOutcome)
            .join(JobOutcome, JobOutcome.submission_id == Submission.id)
            .where(JobOutcome.end_time.is_not(None))
            .order_by(JobOutcome.end_time.desc(), JobOutcome.id.desc())
            .limit(limit)
        )
        with self._transaction() as session:
            finished = session.execute(recent).all()
            ids = [submission_id for submission_id, _, _ in finished]
            job_ids = [job_id for _, job_id, _ in finished]
            first_prediction: dict[int, float] = {}
            forecasts: dict[str, Forecast] = {}
            if ids:
                ranked = (
                    select(
                        Prediction.submission_id,
                        Prediction.predicted_iterations,
                        func.row_number()
                        .over(partition_by=Prediction.submission_id, order_by=(Prediction.made_at, Prediction.id))
                        .label("position"),
                    )
                    .where(Prediction.submission_id.in_(ids), Prediction.model_version != "raised")
                    .subquery()
                )
                for submission_id, iterations in session.execute(
                    select(ranked.c.submission_id, ranked.c.predicted_iterations).where(ranked.c.position == 1)
                ):
                    first_prediction[submission_id] = iterations
                forecasts = {
                    f.slurm_job_id: f
                    for f in session.scalars(select(Forecast).where(Forecast.slurm_job_id.in_(job_ids)))
                }
            iteration_errors: list[float] = []
            start_errors: list[float] = []
            end_errors: list[float] = []
            for submission_id, job_id, outcome in finished:
                predicted = first_prediction.get(submission_id)
                if predicted is not None and outcome.iterations:
                    iteration_errors.append(abs(predicted - outcome.iterations) / outcome.iterations * 100.0)
                forecast = forecasts.get(job_id)
                if forecast is None:
                    continue
                if forecast.first_predicted_start is not None and outcome.start_time is not None:
                    start_errors.append(abs(to_epoch_s(forecast.first_predicted_start) - to_epoch_s(outcome.start_time)))
                if forecast.first_predicted_end is not None and outcome.end_time is not None:
                    end_errors.append(abs(to_epoch_s(forecast.first_predicted_end) - to_epoch_s(outcome.end_time)))

        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None

        return AccuracySummary(
            finished_jobs=len(finished),
            median_abs_pct_iterations_error=median(iteration_errors),
            iterations_samples=len(iteration_errors),
            median_abs_start_error_s=median(start_errors),
            start_samples=len(start_errors),
            median_abs_end_error_s=median(end_errors),
            end_samples=len(end_errors),
        )

    # -- retention ---------------------------------------------------------------------

    def prune_older_than(self, days: float, *, now_s: float | None = None) -> PruneResult:
        """Delete history older than ``days`` (the only verb that deletes anything).

        A submission goes, with its outcome and predictions, when it was submitted before the
        cutoff and did not end after it (jobs still known to be running are kept). Predictions
        made before the cutoff go too. Scheduler state is never pruned.
        """
        if not math.isfinite(days) or days <= 0:
            raise ValueError(f"days must be a positive number, got {days!r}")
        cutoff = to_datetime((time.time() if now_s is None else now_s) - days * _SECONDS_PER_DAY)
        with self._transaction() as session:
            old_ids = select(Submission.id).outerjoin(
                JobOutcome, JobOutcome.submission_id == Submission.id
            ).where(
                Submission.submit_time < cutoff,
                or_(JobOutcome.end_time.is_(None), JobOutcome.end_time < cutoff),
            )
            doomed = list(session.scalars(old_ids))
            predictions = outcomes = submissions = 0
            for chunk in _chunks(doomed, 500):
                predictions += _rowcount(
                    session.execute(delete(Prediction).where(Prediction.submission_id.in_(chunk)))
                )
                outcomes += _rowcount(
                    session.execute(delete(JobOutcome).where(JobOutcome.submission_id.in_(chunk)))
                )
                submissions += _rowcount(
                    session.execute(delete(Submission).where(Submission.id.in_(chunk)))
                )
            predictions += _rowcount(
                session.execute(delete(Prediction).where(Prediction.made_at < cutoff))
            )
            forecasts = _rowcount(
                session.execute(
                    delete(Forecast).where(Forecast.current.is_(False), Forecast.made_at < cutoff)
                )
            )
            return PruneResult(
                submissions=submissions, outcomes=outcomes, predictions=predictions, forecasts=forecasts
            )


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _finite_datetime(epoch_s: float | None) -> datetime | None:
    """A predicted time for the database; "never" (infinite) is stored as NULL."""
    value = _finite(epoch_s)
    return None if value is None else to_datetime(value)


def _names(value: str | Collection[str] | None) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value
    return [item.strip() for item in items if item and item.strip()]


def _queue_order(f: StoredForecast) -> tuple[Any, ...]:
    if f.running:
        return (0, f.predicted_end_s if f.predicted_end_s is not None else math.inf, f.slurm_job_id)
    position = f.position if f.position is not None else math.inf
    return (1, position, f.slurm_job_id)


def _stored_forecast(f: Forecast) -> StoredForecast:
    return StoredForecast(
        slurm_job_id=f.slurm_job_id,
        user=f.user_name,
        policy=f.policy,
        running=f.running,
        accelerators=f.accelerators,
        predicted_start_s=_optional_epoch(f.predicted_start),
        predicted_end_s=_optional_epoch(f.predicted_end),
        position=f.position,
        held=f.held,
        job_name=f.job_name,
        partition=f.partition,
        partitions=_split_partitions(f.partitions),
        predicted_iterations=f.predicted_iterations,
        expected_iterations=f.expected_iterations,
        virtual_remaining_s=f.virtual_remaining_s,
        virtual_size_s=f.virtual_size_s,
        reason=f.reason,
        end_unknown=bool(f.end_unknown),
        made_at_s=to_epoch_s(f.made_at),
        current=f.current,
        first_made_at_s=to_epoch_s(f.first_made_at),
        first_predicted_start_s=_optional_epoch(f.first_predicted_start),
        first_predicted_end_s=_optional_epoch(f.first_predicted_end),
    )


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _rowcount(result: Any) -> int:
    return int(result.rowcount or 0)


def _split_partitions(value: str | None) -> tuple[str, ...]:
    return tuple(p for p in (value or "").split(",") if p)


def _submission_record(row: Submission) -> SubmissionRecord:
    return SubmissionRecord(
        slurm_job_id=row.slurm_job_id,
        user=row.user_name,
        submit_time_s=to_epoch_s(row.submit_time),
        source=row.source,
        uid=row.uid,
        account=row.account,
        job_name=row.job_name,
        partitions=_split_partitions(row.partitions),
        accelerators=row.accelerators,
        accelerator_type=row.accelerator_type,
        parallel_data=row.parallel_data,
        parallel_pipeline=row.parallel_pipeline,
        parallel_tensor=row.parallel_tensor,
        micro_batches=row.micro_batches,
        model_name=row.model_name,
        workload_class=row.workload_class,
        script_hash=row.script_hash,
        recurrence_group=row.recurrence_group,
        command=row.command,
        time_limit_s=row.time_limit_s,
        iterations_hint=row.iterations_hint,
        serve_model=row.serve_model,
        parallel_tensor_auto=row.parallel_tensor_auto,
    )


def _history_row(s: Submission, o: JobOutcome | None) -> HistoryRow:
    return HistoryRow(
        job_id=s.slurm_job_id,
        user=s.user_name,
        uid=s.uid,
        account=s.account,
        job_name=s.job_name,
        group=s.recurrence_group or s.script_hash,
        partitions=_split_partitions(s.partitions),
        accelerators=None if s.accelerators is None else float(s.accelerators),
        accelerator_type=s.accelerator_type,
        parallel_data=s.parallel_data,
        parallel_pipeline=s.parallel_pipeline,
        parallel_tensor=s.parallel_tensor,
        micro_batches=s.micro_batches,
        model_name=s.model_name,
        workload_class=s.workload_class,
        script_hash=s.script_hash,
        command=s.command,
        time_limit_s=s.time_limit_s,
        submit_time_s=to_epoch_s(s.submit_time),
        source=s.source,
        iterations_hint=s.iterations_hint,
        start_time_s=None if o is None else _optional_epoch(o.start_time),
        end_time_s=None if o is None else _optional_epoch(o.end_time),
        exit_state=None if o is None else o.exit_state,
        exit_code=None if o is None else o.exit_code,
        nodes=None if o is None else o.nodes,
        accelerator_type_used=None if o is None else o.accelerator_type_used,
        iterations=None if o is None else o.iterations,
    )
