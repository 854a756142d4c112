"""A read-only PostgreSQL role for users' reads of the history (``asrpt db grant-reader``).

Why: a URL every user can read must not be able to write the scheduler's database (a forged
prediction of 0 puts a job first). The role gets SELECT on asrpt's tables, now and on every
table later migrations create (default privileges of the role running them), and loses any
other table privilege; it is named in ``[database] read_url``. Creating the role (a login and
its password) is the admin's, since it needs CREATEROLE, which the database's owner need not
have. SQLite has no roles: the file's mode decides (asrpt creates it 0600).
"""

from __future__ import annotations

from sqlalchemy import text

from asrpt.db.session import display_url, make_engine, translate_errors
from asrpt.exceptions import DatabaseUnavailable

#: Table privileges taken back from the reader (everything but SELECT).
_WRITE_PRIVILEGES = "INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"


def grant_reader(url: str, role: str) -> str:
    """Make ``role`` a reader of the database at ``url`` (run as its owner); returns the schema."""
    engine = make_engine(url)
    shown = display_url(engine.url)
    try:
        if engine.dialect.name != "postgresql":
            raise DatabaseUnavailable(shown, "grant-reader is for PostgreSQL; a SQLite history is a file whose mode decides "
                                             "who reads it (asrpt creates it 0600; users read through asrptd's socket)")
        quote = engine.dialect.identifier_preparer.quote
        with translate_errors(engine), engine.begin() as connection:
            if connection.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": role}).scalar() is None:
                raise DatabaseUnavailable(shown, f"no role {role!r}: create it first, as a superuser or a role with "
                                                 f"CREATEROLE: CREATE ROLE {quote(role)} LOGIN PASSWORD '...'")
            database, schema = connection.execute(text("SELECT current_database(), current_schema()")).one()
            who, where = quote(role), quote(schema)
            for statement in (
                f"GRANT CONNECT ON DATABASE {quote(database)} TO {who}",
                f"GRANT USAGE ON SCHEMA {where} TO {who}",
                f"REVOKE CREATE ON SCHEMA {where} FROM {who}",
                f"REVOKE {_WRITE_PRIVILEGES} ON ALL TABLES IN SCHEMA {where} FROM {who}",
                f"GRANT SELECT ON ALL TABLES IN SCHEMA {where} TO {who}",
                f"ALTER DEFAULT PRIVILEGES IN SCHEMA {where} GRANT SELECT ON TABLES TO {who}",
            ):
                connection.execute(text(statement))
        return schema
    finally:
        engine.dispose()
