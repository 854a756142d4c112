"""The packaged Alembic migrations build exactly the schema of asrpt.db.models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
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
    assert migrate.upgrade_engine(empty_engine) == migrate.head_revision() == "0002"
    assert _schema_diff(empty_engine) == []
    assert set(metadata.tables) <= set(inspect(empty_engine).get_table_names())


def test_upgrade_twice_is_a_no_op(migrated_engine: Engine) -> None:
    assert migrate.upgrade_engine(migrated_engine) == "0002"
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
    assert migrate.upgrade(f"sqlite:///{path}") == "0002"
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
    from asrpt.db.repository import ForecastRecord, HistoryRepository, SubmissionRecord

    assert migrate.upgrade_engine(empty_engine, revision="0001") == "0001"
    assert "forecasts" not in inspect(empty_engine).get_table_names()
    old = HistoryRepository(empty_engine)
    old.record_submission(SubmissionRecord(slurm_job_id="1", user="alice", submit_time_s=1.0e9, source="slurm"))
    old.record_prediction("1", predicted_iterations=10.0, model_version="v", made_at_s=1.0e9)
    with pytest.raises(MigrationRequired, match="asrpt db upgrade"):
        old.latest_forecasts()

    assert migrate.upgrade_engine(empty_engine) == "0002"
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
    assert repository.get_submission("1") is not None
