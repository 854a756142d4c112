"""Text from users and squeue fits its column on every backend: NUL removed, cut to the
column's length, never a DataError that fails the whole cycle's transaction (PostgreSQL
refuses both; SQLite stored them as they were, so the two backends disagreed)."""

from __future__ import annotations

import pytest
from sqlalchemy import String, Text

from asrpt.db.models import Forecast, Submission, metadata
from asrpt.db.repository import ForecastRecord, HistoryRepository, OutcomeRecord, SubmissionRecord

NOW_S = 1_750_000_000.0


def test_every_text_column_is_cleaned_on_the_way_in() -> None:
    """No free-text column is a plain String/Text: each one removes NUL and keeps to its length."""
    plain = [
        f"{table.name}.{column.name}"
        for table in metadata.sorted_tables
        for column in table.columns
        if type(column.type) in (String, Text)
    ]
    assert plain == [], "columns written without the NUL/length guard"


def test_long_and_nul_text_is_stored_cleaned(repository: HistoryRepository) -> None:
    user_limit = Submission.__table__.c.user_name.type.length
    name_limit = Submission.__table__.c.job_name.type.length
    model_limit = Submission.__table__.c.model_name.type.length
    assert (user_limit, name_limit, model_limit) == (128, 256, 128)
    repository.record_submission(SubmissionRecord(
        slurm_job_id="7", user="u" * 300, submit_time_s=NOW_S, source="slurm", account="a\x00b",
        job_name="n\x00" * 300, model_name="m" * 200, workload_class="bert\x00", recurrence_group="g" * 400,
        command="echo a\x00b", partitions=("p\x00q",),
    ), now_s=NOW_S)
    stored = repository.get_submission("7")
    assert stored is not None
    assert stored.user == "u" * user_limit and stored.account == "ab"
    assert stored.job_name == "n" * name_limit and stored.model_name == "m" * model_limit
    assert stored.workload_class == "bert" and stored.command == "echo ab" and stored.partitions == ("pq",)
    assert stored.recurrence_group == "g" * 256


def test_long_and_nul_text_in_forecasts_and_outcomes_is_stored_cleaned(repository: HistoryRepository) -> None:
    repository.record_submission(SubmissionRecord(slurm_job_id="8", user="bob", submit_time_s=NOW_S, source="slurm"))
    repository.record_outcome(OutcomeRecord(slurm_job_id="8", exit_state="COMPLE\x00TED", nodes="gpu\x00-1"), now_s=NOW_S)
    written = repository.record_forecasts(NOW_S, [ForecastRecord(
        slurm_job_id="8", user="u" * 200, policy="asrpt", running=False, accelerators=1,
        predicted_start_s=NOW_S, predicted_end_s=NOW_S + 60, job_name="x" * 300 + "\x00",
        partitions=("p" * 600,), partition="q\x00", reason="why\x00",
    )])
    assert written == 1
    stored = repository.forecast_for("8")
    assert stored is not None
    assert stored.user == "u" * Forecast.__table__.c.user_name.type.length
    assert stored.job_name == "x" * 256 and stored.partition == "q" and stored.reason == "why"


def test_the_light_name_limit_is_the_history_columns_length() -> None:
    """The wrapper (which cannot import SQLAlchemy) warns at the length the columns hold."""
    from asrpt.comment_hints import MAX_NAME_CHARS

    for column in ("model_name", "workload_class", "serve_model"):
        assert Submission.__table__.c[column].type.length == MAX_NAME_CHARS, column
