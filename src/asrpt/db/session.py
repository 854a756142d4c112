"""Engines and sessions for the history database.

SQLite is the default: one file, written by the daemon alone, read by CLI commands at the
same time, hence WAL (readers do not block the writer) and a busy timeout (a reader's
checkpoint or a second writer makes us wait instead of failing at once). PostgreSQL is
used when the URL says so, through psycopg 3.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, exc
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from asrpt.exceptions import DatabaseUnavailable, MigrationRequired

#: How long a SQLite writer waits for a lock before giving up, seconds.
DEFAULT_BUSY_TIMEOUT_S = 5.0


def normalize_url(url: str | URL) -> URL:
    """Parse ``url`` and pick our drivers: bare ``postgresql://`` means psycopg 3, not psycopg2."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError as error:
        raise DatabaseUnavailable(str(url), f"not a database URL ({error})") from error
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise DatabaseUnavailable(
            display_url(parsed), "unsupported database (use sqlite:// or postgresql+psycopg://)"
        )
    return parsed


def display_url(url: str | URL) -> str:
    """The URL as it may appear in logs and error messages (password masked)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return str(url)


def sqlite_path(url: URL) -> Path | None:
    """The database file of a SQLite URL, or None for an in-memory database."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or url.query.get("mode") == "memory":
        return None
    return Path(database)


def make_engine(
    url: str | URL,
    *,
    create: bool = False,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    echo: bool = False,
) -> Engine:
    """Build an engine for ``url``.

    Parameters
    ----------
    url:
        ``sqlite:///relative.db``, ``sqlite:////absolute.db``, ``sqlite://`` (memory) or
        ``postgresql+psycopg://user:password@host:port/dbname``.
    create:
        For SQLite, whether a missing database file may be created (``asrpt db upgrade``
        does; everything else expects a migrated database and fails clearly without one).
    busy_timeout_s:
        How long SQLite waits on a lock held by another connection, seconds.

    Raises
    ------
    DatabaseUnavailable
        The URL is not usable, or the SQLite file (or its directory) is missing.
    """
    parsed = normalize_url(url)
    shown = display_url(parsed)
    if parsed.get_backend_name() == "sqlite":
        path = sqlite_path(parsed)
        if path is not None:
            if not path.exists():
                if not create:
                    raise MigrationRequired(
                        shown, "database file does not exist; create it with `asrpt db upgrade`"
                    )
                if not path.parent.is_dir():
                    raise DatabaseUnavailable(shown, f"directory {path.parent} does not exist")
                _create_private_file(path, shown)
        engine = create_engine(
            parsed, echo=echo, connect_args={"timeout": busy_timeout_s}
        )
        _configure_sqlite(engine, busy_timeout_s=busy_timeout_s, wal=path is not None)
        return engine
    return create_engine(
        parsed,
        echo=echo,
        pool_pre_ping=True,
        connect_args={"connect_timeout": max(1, round(busy_timeout_s))},
    )


#: Mode of a SQLite history asrpt creates: its owner only (submissions carry users' commands,
#: secrets included); SQLite gives its -wal and -shm files the same mode. Users read through
#: asrptd's socket.
SQLITE_FILE_MODE = 0o600


def _create_private_file(path: Path, shown: str) -> None:
    """Create the empty database file with :data:`SQLITE_FILE_MODE` before SQLite opens it
    (SQLite would create it with the umask's mode, 0644 as a rule)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, SQLITE_FILE_MODE))
    except FileExistsError:
        pass  # created meanwhile by another process: SQLite opens that one
    except OSError as error:
        raise DatabaseUnavailable(shown, f"cannot create {path}: {error.strerror}") from error


def close_to_others(url: str | URL) -> list[Path]:
    """Take other users' access away from a SQLite history and its -wal/-shm (one made before
    asrpt created it 0600); the owner's group keeps its bits. Returns the files changed; a
    file this process may not chmod is left alone."""
    path = sqlite_path(normalize_url(url))
    changed: list[Path] = []
    if path is None:
        return changed
    for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            mode = candidate.stat().st_mode & 0o7777
            if mode & 0o007:
                os.chmod(candidate, mode & ~0o007)
                changed.append(candidate)
        except OSError:
            continue
    return changed


def _configure_sqlite(engine: Engine, *, busy_timeout_s: float, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        # The sqlite3 module opens transactions implicitly before DML only, so these
        # PRAGMAs run outside a transaction, as journal_mode requires.
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            if wal:
                cursor.execute("PRAGMA journal_mode = WAL")
                cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (the repository returns plain data)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


#: PostgreSQL's SQLSTATE for "permission denied": a role without the grant, the admin's to fix.
_INSUFFICIENT_PRIVILEGE = "42501"
_MISSING_SCHEMA_MARKERS = ("no such table", "undefinedtable", "does not exist")
#: What SQLite says of a file that is not (or no longer) a database.
_DAMAGED_MARKERS = ("file is not a database", "database disk image is malformed")


@contextlib.contextmanager
def translate_errors(engine: Engine) -> Iterator[None]:
    """Turn driver errors into :class:`DatabaseUnavailable` / :class:`MigrationRequired`.

    A locked SQLite file, an unreachable server, a missing schema or a PostgreSQL role without
    the privilege is something an admin fixes, so it gets a message that names the database; constraint violations and the
    like are bugs and pass through unchanged.
    """
    shown = display_url(engine.url)
    try:
        yield
    except (exc.OperationalError, exc.ProgrammingError) as error:
        reason = str(error.orig) if error.orig is not None else str(error)
        lowered = f"{type(error.orig).__name__} {reason}".lower()
        if any(marker in lowered for marker in _MISSING_SCHEMA_MARKERS) and (
            "table" in lowered or "relation" in lowered
        ):
            raise MigrationRequired(
                shown, f"schema missing ({reason.strip()}); run `asrpt db upgrade`"
            ) from error
        if getattr(error.orig, "sqlstate", None) == _INSUFFICIENT_PRIVILEGE:
            raise DatabaseUnavailable(
                shown, f"{reason.strip().splitlines()[0]} (a reader role needs `asrpt db grant-reader ROLE`)"
            ) from error
        if isinstance(error, exc.ProgrammingError):
            raise
        if isinstance(error.orig, sqlite3.OperationalError) and "locked" in lowered:
            raise DatabaseUnavailable(
                shown, f"database is locked by another process ({reason.strip()})"
            ) from error
        raise DatabaseUnavailable(shown, reason.strip()) from error
    except exc.DatabaseError as error:  # after its subclasses above; IntegrityError etc. pass on
        reason = str(error.orig) if error.orig is not None else str(error)
        if isinstance(error.orig, sqlite3.DatabaseError) and any(m in reason.lower() for m in _DAMAGED_MARKERS):
            raise DatabaseUnavailable(
                shown, f"is not a SQLite database or is damaged ({reason.strip()}); nothing was written to it: "
                "restore it from a backup, or move it aside to start a new history"
            ) from error
        raise
