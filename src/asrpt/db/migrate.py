"""Run the packaged Alembic migrations from code.

The migrations ship inside the package (``asrpt/db/migrations``), so ``asrpt db upgrade``
and the daemon's start-up upgrade need no alembic.ini on the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib.resources import as_file, files
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import URL, Engine

from asrpt.db.session import display_url, make_engine, translate_errors
from asrpt.exceptions import MigrationRequired


@contextlib.contextmanager
def migrations_directory() -> Iterator[Path]:
    """The packaged migrations folder as a real path (extracted if the package is zipped)."""
    with as_file(files("asrpt.db") / "migrations") as path:
        yield Path(path)


def alembic_config(script_location: Path, url: str | URL | None = None) -> Config:
    """An Alembic ``Config`` built in memory; ``url`` only matters for offline (SQL) mode."""
    config = Config()
    config.set_main_option("script_location", str(script_location))
    if url is not None:
        # configparser interpolation: a literal "%" (URL-escaped passwords) must be doubled.
        config.set_main_option("sqlalchemy.url", str(url).replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest revision this asrpt ships."""
    with migrations_directory() as path:
        head = ScriptDirectory.from_config(alembic_config(path)).get_current_head()
    if head is None:  # pragma: no cover - the package always ships revisions
        raise RuntimeError("no migrations packaged")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for an empty database."""
    with translate_errors(engine), engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(url: str | URL, *, revision: str = "head") -> str:
    """Bring the database at ``url`` to ``revision`` (creating a SQLite file if needed).

    Returns the revision the database is at afterwards.

    Raises
    ------
    DatabaseUnavailable
        The database cannot be reached, is locked, or its directory does not exist.
    """
    engine = make_engine(url, create=True)
    try:
        return upgrade_engine(engine, revision=revision)
    finally:
        engine.dispose()


def upgrade_engine(engine: Engine, *, revision: str = "head") -> str:
    """:func:`upgrade` on an existing engine (tests and the daemon share theirs)."""
    with migrations_directory() as path:
        config = alembic_config(path)
        with translate_errors(engine), engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    reached = current_revision(engine)
    return reached or "base"


def downgrade_engine(engine: Engine, *, revision: str) -> None:
    """Step the schema back to ``revision`` ("base" drops everything asrpt created)."""
    with migrations_directory() as path:
        config = alembic_config(path)
        with translate_errors(engine), engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, revision)


def require_current(engine: Engine) -> None:
    """Raise :class:`MigrationRequired` unless the database is at this asrpt's head revision."""
    current = current_revision(engine)
    head = head_revision()
    if current != head:
        raise MigrationRequired(
            display_url(engine.url),
            f"schema at revision {current or 'none'}, this asrpt needs {head}; "
            "run `asrpt db upgrade`",
        )
