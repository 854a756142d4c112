"""The packaged Alembic migrations build exactly the schema of asrpt.db.models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

from asrpt.db import migrate
from asrpt.db.models import metadata
from asrpt.db.session import make_engine
from asrpt.exceptions import DatabaseUnavailable, MigrationRequired


def _schema_diff(engine: Engine) -> list:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, metadata)


def test_upgrade_empty_database_to_head_matches_models(empty_engine: Engine) -> None:
    assert migrate.current_revision(empty_engine) is None
    assert migrate.upgrade_engine(empty_engine) == migrate.head_revision() == "0004"
    assert _schema_diff(empty_engine) == []
    assert set(metadata.tables) <= set(inspect(empty_engine).get_table_names())


def test_upgrade_twice_is_a_no_op(migrated_engine: Engine) -> None:
    assert migrate.upgrade_engine(migrated_engine) == "0004"
    assert _schema_diff(migrated_engine) == []


def test_downgrade_to_base_removes_everything_and_upgrade_restores_it(migrated_engine: Engine) -> None:
    migrate.downgrade_engine(migrated_engine, revision="base")
    assert migrate.current_revision(migrated_engine) is None
    assert not set(metadata.tables) & set(inspect(migrated_engine).get_table_names())
    migrate.upgrade_engine(migrated_engine)
    assert _schema_diff(migrated_engine) == []


def test_require_current(empty_engine: Engine) -> None:
    with pytest.raises(MigrationRequired, match="asrpt db upgrade"):
        migrate.require_current(empty_engine)
    migrate.upgrade_engine(empty_engine)
    migrate.require_current(empty_engine)


def test_upgrade_by_url_creates_sqlite_file_without_alembic_ini(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no alembic.ini anywhere near
    path = tmp_path / "new" / "asrpt.db"
    path.parent.mkdir()
    assert migrate.upgrade(f"sqlite:///{path}") == "0004"
    assert path.exists()
    engine = make_engine(f"sqlite:///{path}")
    try:
        assert _schema_diff(engine) == []
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()


def test_upgrade_into_missing_directory_names_the_url(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/absent/asrpt.db"
    with pytest.raises(DatabaseUnavailable) as caught:
        migrate.upgrade(url)
    assert url in str(caught.value)
    assert "does not exist" in str(caught.value)


def test_0002_adds_forecasts_and_keeps_the_history(empty_engine: Engine) -> None:
    """Seed a 0001 database, upgrade, verify: the history is untouched, forecasts work, and
    stepping back to 0001 removes only the forecasts."""
    from asrpt.db.repository import ForecastRecord, HistoryRepository

    assert migrate.upgrade_engine(empty_engine, revision="0001") == "0001"
    assert "forecasts" not in inspect(empty_engine).get_table_names()
    old = HistoryRepository(empty_engine)
    # The repository writes today's columns; a 0001 row is written as 0001 knew it.
    _insert_old_submission(empty_engine, "1", "alice")
    with empty_engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO predictions (submission_id, model_version, predicted_iterations, made_at) "
            "SELECT id, 'v', 10.0, '2001-09-09 01:46:40+00:00' FROM submissions WHERE slurm_job_id = '1'"
        )
    with pytest.raises(MigrationRequired, match="asrpt db upgrade"):
        old.latest_forecasts()

    assert migrate.upgrade_engine(empty_engine) == "0004"
    assert _schema_diff(empty_engine) == []
    repository = HistoryRepository(empty_engine)
    assert repository.get_submission("1") is not None
    assert repository.latest_predictions()["1"].predicted_iterations == 10.0
    row = ForecastRecord(
        slurm_job_id="1", user="alice", policy="asrpt", running=False, accelerators=1,
        predicted_start_s=1.0e9 + 60, predicted_end_s=1.0e9 + 120,
    )
    assert repository.record_forecasts(1.0e9, [row]) == 1
    assert [f.slurm_job_id for f in repository.latest_forecasts()] == ["1"]

    migrate.downgrade_engine(empty_engine, revision="0001")
    assert "forecasts" not in inspect(empty_engine).get_table_names()
    with empty_engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT user_name FROM submissions WHERE slurm_job_id = '1'").scalar() == "alice"


def _insert_old_submission(engine: Engine, job_id: str, user: str, **columns: object) -> None:
    """A submission row with only the columns every revision has (plus ``columns``)."""
    values = {"slurm_job_id": job_id, "user_name": user, "submit_time": "2024-01-01 00:00:00+00:00",
              "source": "slurm", "recorded_at": "2024-01-01 00:00:00+00:00", **columns}
    names = ", ".join(values)
    marks = ", ".join(f":{name}" for name in values)
    with engine.begin() as connection:
        connection.execute(text(f"INSERT INTO submissions ({names}) VALUES ({marks})"), values)


def test_0003_adds_the_serving_columns_and_keeps_the_history(empty_engine: Engine) -> None:
    """Seed a 0002 database with a job, its outcome and prediction; upgrade; the old row reads
    back as not serving, a serving submission round-trips; stepping back to 0002 drops only
    the two columns (the history, outcomes and predictions stay)."""
    from asrpt.db.repository import HistoryRepository, OutcomeRecord, SubmissionRecord

    assert migrate.upgrade_engine(empty_engine, revision="0002") == "0002"
    columns = {c["name"] for c in inspect(empty_engine).get_columns("submissions")}
    assert not {"serve_model", "parallel_tensor_auto"} & columns
    _insert_old_submission(empty_engine, "1", "alice", parallel_tensor=2)  # a 0002 row

    assert migrate.upgrade_engine(empty_engine) == "0004"
    assert _schema_diff(empty_engine) == []
    repository = HistoryRepository(empty_engine)
    old = repository.get_submission("1")
    assert old is not None and old.parallel_tensor == 2
    assert (old.serve_model, old.parallel_tensor_auto) == (None, None)
    repository.record_outcome(OutcomeRecord(slurm_job_id="1", end_time_s=1.0e9, iterations=5.0))
    repository.record_prediction("1", predicted_iterations=10.0, model_version="v", made_at_s=1.0e9)
    repository.record_submission(
        SubmissionRecord(slurm_job_id="2", user="bob", submit_time_s=1.0e9, source="wrapper",
                         serve_model="llama-2-7b", parallel_tensor_auto=True)
    )
    stored = repository.get_submission("2")
    assert stored is not None and (stored.serve_model, stored.parallel_tensor_auto) == ("llama-2-7b", True)

    migrate.downgrade_engine(empty_engine, revision="0002")
    columns = {c["name"] for c in inspect(empty_engine).get_columns("submissions")}
    assert not {"serve_model", "parallel_tensor_auto"} & columns
    with empty_engine.connect() as connection:
        assert connection.exec_driver_sql("SELECT count(*) FROM submissions").scalar() == 2
        assert connection.exec_driver_sql("SELECT count(*) FROM job_outcomes").scalar() == 1
        assert connection.exec_driver_sql("SELECT count(*) FROM predictions").scalar() == 1
    migrate.upgrade_engine(empty_engine)
    assert _schema_diff(empty_engine) == []


def test_0004_adds_end_unknown_to_forecasts_and_old_rows_read_false(empty_engine: Engine) -> None:
    from asrpt.db.repository import ForecastRecord, HistoryRepository

    assert migrate.upgrade_engine(empty_engine, revision="0003") == "0003"
    assert "end_unknown" not in {c["name"] for c in inspect(empty_engine).get_columns("forecasts")}
    repository = HistoryRepository(empty_engine)
    assert migrate.upgrade_engine(empty_engine) == "0004"
    assert _schema_diff(empty_engine) == []
    rows = [ForecastRecord(slurm_job_id="1", user="a", policy="asrpt", running=True, accelerators=1,
                           predicted_start_s=1.0e9, predicted_end_s=1.0e9 + 600, end_unknown=True),
            ForecastRecord(slurm_job_id="2", user="a", policy="asrpt", running=False, accelerators=1,
                           predicted_start_s=1.0e9, predicted_end_s=1.0e9 + 60)]
    repository.record_forecasts(1.0e9, rows)
    with empty_engine.begin() as connection:
        connection.exec_driver_sql("UPDATE forecasts SET end_unknown = NULL WHERE slurm_job_id = '2'")
    stored = {f.slurm_job_id: f for f in repository.latest_forecasts()}
    assert stored["1"].end_unknown and not stored["2"].end_unknown
    migrate.downgrade_engine(empty_engine, revision="0003")
    assert "end_unknown" not in {c["name"] for c in inspect(empty_engine).get_columns("forecasts")}
