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
    assert migrate.upgrade_engine(empty_engine) == migrate.head_revision() == "0001"
    assert _schema_diff(empty_engine) == []
    assert set(metadata.tables) <= set(inspect(empty_engine).get_table_names())


def test_upgrade_twice_is_a_no_op(migrated_engine: Engine) -> None:
    assert migrate.upgrade_engine(migrated_engine) == "0001"
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
    assert migrate.upgrade(f"sqlite:///{path}") == "0001"
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
