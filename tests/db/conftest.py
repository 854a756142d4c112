"""Databases for the repository and migration tests: a SQLite file, and PostgreSQL if configured.

PostgreSQL comes from ``ASRPT_TEST_POSTGRES_URL`` (``contrib/ci/start-postgres.sh`` starts
one and prints it). The tests drop and recreate asrpt's own tables in that database, so
point it at a throwaway database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

from asrpt.db.migrate import upgrade_engine
from asrpt.db.models import metadata
from asrpt.db.repository import HistoryRepository
from asrpt.db.session import make_engine

POSTGRES_URL_ENV = "ASRPT_TEST_POSTGRES_URL"


def _postgres_url() -> str | None:
    return os.environ.get(POSTGRES_URL_ENV) or None


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "postgresql",
        id="postgresql",
        marks=[
            pytest.mark.postgres,
            pytest.mark.skipif(
                _postgres_url() is None,
                reason=f"{POSTGRES_URL_ENV} is not set (contrib/ci/start-postgres.sh starts a server)",
            ),
        ],
    ),
]


def _wipe_postgres(engine: Engine) -> None:
    """Drop asrpt's tables (and Alembic's bookkeeping) so each test starts from nothing."""
    with engine.begin() as connection:
        metadata.drop_all(connection)
        connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
    assert not set(inspect(engine).get_table_names()) & set(metadata.tables)


@pytest.fixture(params=BACKENDS)
def empty_engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[Engine]:
    """An engine on a database without asrpt's schema."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'history.db'}", create=True)
    else:
        engine = make_engine(_postgres_url())  # type: ignore[arg-type]
        _wipe_postgres(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def migrated_engine(empty_engine: Engine) -> Engine:
    upgrade_engine(empty_engine)
    return empty_engine


@pytest.fixture
def repository(migrated_engine: Engine) -> HistoryRepository:
    return HistoryRepository(migrated_engine)
