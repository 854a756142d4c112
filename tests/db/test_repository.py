"""The history repository on SQLite and PostgreSQL (same tests, both backends)."""

from __future__ import annotations

import sqlite3
from datetime import datetime

import pytest
from sqlalchemy import func, select

from asrpt.db.migrate import upgrade
from asrpt.db.models import JobOutcome, Prediction, Submission, UtcDateTime
from asrpt.db.repository import (
    HistoryRepository,
    OutcomeRecord,
    SubmissionRecord,
    to_datetime,
)
from asrpt.db.session import make_engine
from asrpt.exceptions import DatabaseUnavailable, MigrationRequired, UnknownJob
from asrpt.predict.features import COLUMN, build_features

DAY_S = 86_400.0
NOW_S = 1_750_000_000.25  # a fixed "now", with a fraction to check time round trips


def submission(job_id: str = "100", **overrides) -> SubmissionRecord:
    fields = dict(
        slurm_job_id=job_id,
        user="alice",
        submit_time_s=NOW_S - 3600.0,
        source="plugin",
        uid=1001,
        account="vision",
        job_name="train-resnet",
        partitions=("a100", "v100"),
        accelerators=8,
        accelerator_type="a100",
        time_limit_s=7200.0,
    )
    fields.update(overrides)
    return SubmissionRecord(**fields)


def count(repository: HistoryRepository, model) -> int:
    with repository.engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(model)).scalar_one()


def test_record_submission_is_idempotent_and_round_trips(repository: HistoryRepository) -> None:
    record = submission()
    repository.record_submission(record, now_s=NOW_S)
    repository.record_submission(record, now_s=NOW_S + 5)
    assert count(repository, Submission) == 1
    assert repository.get_submission("100") == record
    assert repository.get_submission("nope") is None


def test_plugin_wins_identity_and_wrapper_adds_what_only_it_knows(repository: HistoryRepository) -> None:
    wrapper = SubmissionRecord(
        slurm_job_id="7",
        user="mallory",  # the wrapper runs as the user: its word on identity does not count
        uid=0,
        submit_time_s=NOW_S - 10.0,
        source="wrapper",
        accelerators=1,
        model_name="gpt2",
        workload_class="transformer",
        parallel_data=2,
        parallel_pipeline=2,
        parallel_tensor=2,
        micro_batches=8,
        script_hash="abc123",
        command="python train.py",
        iterations_hint=5000.0,
    )
    plugin = submission("7", submit_time_s=NOW_S - 12.0, command="/home/alice/job.sh")

    # Wrapper after plugin: identity untouched, the wrapper's own fields filled in.
    repository.record_submission(plugin)
    repository.record_submission(wrapper)
    merged = repository.get_submission("7")
    assert merged is not None
    assert (merged.user, merged.uid, merged.accelerators, merged.source) == ("alice", 1001, 8, "plugin")
    assert merged.submit_time_s == pytest.approx(NOW_S - 12.0)
    assert merged.command == "/home/alice/job.sh"  # the plugin knew it; the wrapper does not override
    assert (merged.model_name, merged.parallel_tensor, merged.micro_batches) == ("gpt2", 2, 8)
    assert (merged.script_hash, merged.iterations_hint) == ("abc123", 5000.0)

    # Plugin after wrapper: the plugin's identity replaces the wrapper's, wrapper fields stay.
    repository.record_submission(SubmissionRecord(**{**_fields(wrapper), "slurm_job_id": "8"}))
    repository.record_submission(submission("8"))
    merged = repository.get_submission("8")
    assert merged is not None
    assert (merged.user, merged.uid, merged.accelerators, merged.source) == ("alice", 1001, 8, "plugin")
    assert (merged.model_name, merged.iterations_hint) == ("gpt2", 5000.0)
    assert count(repository, Submission) == 2


def _fields(record: SubmissionRecord) -> dict:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def test_record_outcome_merges_and_requires_a_submission(repository: HistoryRepository) -> None:
    with pytest.raises(UnknownJob, match="42"):
        repository.record_outcome(OutcomeRecord(slurm_job_id="42", exit_state="COMPLETED"))
    repository.record_submission(submission("42"))
    repository.record_outcome(OutcomeRecord(slurm_job_id="42", start_time_s=NOW_S - 1800.5, nodes="gpu[01-02]"))
    repository.record_outcome(
        OutcomeRecord(
            slurm_job_id="42",
            end_time_s=NOW_S - 60.0,
            exit_state="COMPLETED",
            exit_code=0,
            accelerator_type_used="a100",
            iterations=12_000.0,
        )
    )
    assert count(repository, JobOutcome) == 1
    (row,) = repository.history_rows()
    assert row.start_time_s == NOW_S - 1800.5
    assert row.end_time_s == NOW_S - 60.0
    assert row.run_time_s == pytest.approx(1740.5)
    assert (row.nodes, row.exit_state, row.iterations) == ("gpu[01-02]", "COMPLETED", 12_000.0)


def test_predictions_latest_per_job(repository: HistoryRepository) -> None:
    for job_id in ("1", "2", "3"):
        repository.record_submission(submission(job_id))
    repository.record_prediction("1", predicted_iterations=100.0, model_version="rf-1", made_at_s=NOW_S)
    repository.record_prediction("1", predicted_iterations=200.0, model_version="raise", made_at_s=NOW_S + 60)
    repository.record_prediction("2", predicted_iterations=0.0, model_version="rf-1", made_at_s=NOW_S)
    with pytest.raises(UnknownJob):
        repository.record_prediction("9", predicted_iterations=1.0, model_version="rf-1", made_at_s=NOW_S)
    with pytest.raises(ValueError):
        repository.record_prediction("1", predicted_iterations=-1.0, model_version="rf-1", made_at_s=NOW_S)

    latest = repository.latest_predictions()
    assert set(latest) == {"1", "2"}
    assert (latest["1"].predicted_iterations, latest["1"].model_version) == (200.0, "raise")
    assert latest["1"].made_at_s == NOW_S + 60
    assert set(repository.latest_predictions(["2", "3"])) == {"2"}
    assert repository.latest_predictions([]) == {}
    assert count(repository, Prediction) == 3


def test_history_rows_feed_the_feature_builder(repository: HistoryRepository) -> None:
    for i in range(3):
        repository.record_submission(
            submission(str(i), submit_time_s=NOW_S + i * 3600.0, script_hash="s1")
        )
        repository.record_outcome(
            OutcomeRecord(
                slurm_job_id=str(i),
                start_time_s=NOW_S + i * 3600.0,
                end_time_s=NOW_S + i * 3600.0 + 600.0,
                exit_state="FAILED" if i == 1 else "COMPLETED",
                iterations=1000.0 * (i + 1),
            )
        )
    repository.record_submission(submission("pending", submit_time_s=NOW_S + 4 * 3600.0, script_hash="s1"))

    rows = repository.history_rows()
    assert [r.job_id for r in rows] == ["0", "1", "2", "pending"]
    assert rows[0].group == "s1"  # the script hash stands in for a missing explicit group
    assert [r.job_id for r in repository.history_rows(finished_only=True)] == ["0", "1", "2"]
    assert [r.job_id for r in repository.history_rows(exit_states={"COMPLETED"})] == ["0", "2"]
    assert [r.job_id for r in repository.history_rows(since_s=NOW_S + 3600.0)] == ["1", "2", "pending"]

    X = build_features(rows)
    assert X[3, COLUMN["group_count"]] == 3
    assert X[0, COLUMN["group_count"]] == 0


def test_scheduler_state_round_trip(repository: HistoryRepository) -> None:
    assert repository.load_state("asrpt.policy") is None
    assert repository.load_state("asrpt.policy", default={}) == {}
    state = {"virtual_remaining_s": {"12": 30.5}, "order": ["12", "9"], "raised": True}
    repository.save_state("asrpt.policy", state, now_s=NOW_S)
    repository.save_state("asrpt.policy", {**state, "order": ["9"]}, now_s=NOW_S + 1)
    assert repository.load_state("asrpt.policy") == {**state, "order": ["9"]}


def test_prune_deletes_only_old_rows(repository: HistoryRepository) -> None:
    old, old_but_ran_late, recent, old_unfinished = "old", "late", "recent", "stuck"
    repository.record_submission(submission(old, submit_time_s=NOW_S - 40 * DAY_S))
    repository.record_outcome(OutcomeRecord(slurm_job_id=old, end_time_s=NOW_S - 39 * DAY_S))
    repository.record_prediction(old, predicted_iterations=5.0, model_version="v", made_at_s=NOW_S - 40 * DAY_S)
    repository.record_submission(submission(old_but_ran_late, submit_time_s=NOW_S - 40 * DAY_S))
    repository.record_outcome(OutcomeRecord(slurm_job_id=old_but_ran_late, end_time_s=NOW_S - 10 * DAY_S))
    repository.record_prediction(
        old_but_ran_late, predicted_iterations=5.0, model_version="v", made_at_s=NOW_S - 35 * DAY_S
    )
    repository.record_prediction(
        old_but_ran_late, predicted_iterations=10.0, model_version="v", made_at_s=NOW_S - 20 * DAY_S
    )
    repository.record_submission(submission(recent, submit_time_s=NOW_S - 1 * DAY_S))
    repository.record_prediction(recent, predicted_iterations=7.0, model_version="v", made_at_s=NOW_S - DAY_S)
    repository.record_submission(submission(old_unfinished, submit_time_s=NOW_S - 60 * DAY_S))
    repository.save_state("k", {"v": 1}, now_s=NOW_S - 100 * DAY_S)

    result = repository.prune_older_than(30, now_s=NOW_S)

    assert (result.submissions, result.outcomes) == (2, 1)
    assert result.predictions == 2  # the old job's, and the late job's prediction made 35 days ago
    assert [r.job_id for r in repository.history_rows()] == [old_but_ran_late, recent]
    latest = repository.latest_predictions()
    assert latest[old_but_ran_late].predicted_iterations == 10.0
    assert latest[recent].predicted_iterations == 7.0
    assert repository.load_state("k") == {"v": 1}
    assert repository.prune_older_than(30, now_s=NOW_S).submissions == 0
    with pytest.raises(ValueError):
        repository.prune_older_than(0, now_s=NOW_S)


def test_naive_datetimes_are_refused_at_the_edge() -> None:
    with pytest.raises(ValueError, match="naive"):
        UtcDateTime().process_bind_param(datetime(2025, 1, 1), dialect=None)  # type: ignore[arg-type]
    aware = to_datetime(NOW_S)
    assert aware.tzinfo is not None and aware.timestamp() == NOW_S


def test_locked_sqlite_database_gives_a_clear_error(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    upgrade(url)
    holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    repository = HistoryRepository(make_engine(url, busy_timeout_s=0.1))
    try:
        with pytest.raises(DatabaseUnavailable) as caught:
            repository.record_submission(submission())
        assert url in str(caught.value)
        assert "locked" in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        repository.close()
    # Once the lock is gone the same repository works.
    repository = HistoryRepository(make_engine(url))
    try:
        repository.record_submission(submission())
        assert repository.get_submission("100") is not None
    finally:
        repository.close()


def test_missing_sqlite_database_gives_a_clear_error(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'absent.db'}"
    with pytest.raises(MigrationRequired) as caught:
        HistoryRepository.from_url(url)
    assert url in str(caught.value) and "asrpt db upgrade" in str(caught.value)
    assert not (tmp_path / "absent.db").exists()


def test_unmigrated_database_gives_a_clear_error(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    repository = HistoryRepository(make_engine(url, create=True))
    try:
        with pytest.raises(MigrationRequired) as caught:
            repository.latest_predictions()
        assert url in str(caught.value)
    finally:
        repository.close()


def test_unreachable_postgresql_names_the_url_without_its_password() -> None:
    url = "postgresql://asrpt:s3cret@127.0.0.1:1/asrpt"
    repository = HistoryRepository(make_engine(url, busy_timeout_s=1))
    try:
        with pytest.raises(DatabaseUnavailable) as caught:
            repository.load_state("k")
    finally:
        repository.close()
    message = str(caught.value)
    assert "127.0.0.1:1/asrpt" in message
    assert "s3cret" not in message
