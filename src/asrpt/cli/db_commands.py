"""`asrpt db upgrade`, `asrpt db prune` and `asrpt db grant-reader`: schema migrations, retention
of the history, and a read-only PostgreSQL role for users' reads."""

from __future__ import annotations

import argparse
import sys

from asrpt.cli.site_config import DATABASE_URL_ENV, resolve_database_url
from asrpt.exceptions import AsrptError
from asrpt.paths import DEFAULT_DATABASE_URL

__all__ = ["DATABASE_URL_ENV", "add_db_parser", "resolve_database_url"]


def _add_url_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=None,
        help=(
            "database URL, e.g. sqlite:////var/lib/asrpt/asrpt.db or "
            f"postgresql+psycopg://user@host/asrpt (default: ${DATABASE_URL_ENV}, else [database] url "
            f"in the daemon's configuration ($ASRPT_CONFIG or /etc/asrpt/asrpt.toml), else {DEFAULT_DATABASE_URL})"
        ),
    )


def add_db_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``db upgrade``, ``db prune`` and ``db grant-reader``; returns the ``db`` parser."""
    db = subparsers.add_parser("db", help="manage the job-history database")
    commands = db.add_subparsers(dest="db_command", metavar="COMMAND", required=True)

    up = commands.add_parser(
        "upgrade",
        help="create the database or migrate it to this version's schema",
        description="Run the packaged migrations up to the newest revision. Safe to repeat.",
    )
    _add_url_option(up)
    up.set_defaults(func=run_db_upgrade)

    prune = commands.add_parser(
        "prune",
        help="delete job history older than N days",
        description=(
            "Delete submissions (with their outcomes and predictions) submitted and finished "
            "more than N days ago, and predictions made before then. Nothing else deletes history."
        ),
    )
    prune.add_argument(
        "--older-than-days", type=_positive_float, required=True, metavar="N", help="age in days"
    )
    _add_url_option(prune)
    prune.set_defaults(func=run_db_prune)

    reader = commands.add_parser(
        "grant-reader",
        help="let a PostgreSQL role read the history, and nothing else (for [database] read_url)",
        description=(
            "Grant ROLE SELECT on asrpt's tables, now and after later upgrades, and take back every other "
            "table privilege, so that a URL users can read ([database] read_url) cannot change the "
            "scheduler's database. Run as the database's owner; the role must exist (CREATE ROLE needs "
            "a superuser or CREATEROLE). PostgreSQL only."
        ),
    )
    reader.add_argument("role", metavar="ROLE", help="an existing PostgreSQL role")
    _add_url_option(reader)
    reader.set_defaults(func=run_db_grant_reader)
    return db


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of days, got {text!r}")
    return value


def run_db_upgrade(args: argparse.Namespace) -> int:
    from asrpt.db.migrate import upgrade
    from asrpt.db.session import display_url

    url = resolve_database_url(args.url)
    try:
        revision = upgrade(url)
    except AsrptError as error:
        print(f"asrpt db upgrade: {error}", file=sys.stderr)
        return 1
    print(f"{display_url(url)}: schema at revision {revision}")
    return 0


def run_db_prune(args: argparse.Namespace) -> int:
    from asrpt.db.repository import HistoryRepository
    from asrpt.db.session import display_url

    url = resolve_database_url(args.url)
    try:
        repository = HistoryRepository.from_url(url)
        try:
            result = repository.prune_older_than(args.older_than_days)
        finally:
            repository.close()
    except AsrptError as error:
        print(f"asrpt db prune: {error}", file=sys.stderr)
        return 1
    print(
        f"{display_url(url)}: deleted {result.submissions} submissions, "
        f"{result.outcomes} outcomes, {result.predictions} predictions, "
        f"{result.forecasts} forecasts older than {args.older_than_days:g} days"
    )
    return 0


def run_db_grant_reader(args: argparse.Namespace) -> int:
    from asrpt.db.roles import grant_reader
    from asrpt.db.session import display_url

    url = resolve_database_url(args.url)
    try:
        schema = grant_reader(url, args.role)
    except AsrptError as error:
        print(f"asrpt db grant-reader: {error}", file=sys.stderr)
        return 1
    print(f"{display_url(url)}: role {args.role} may SELECT from the tables of schema {schema} (and later ones), nothing else")
    return 0
