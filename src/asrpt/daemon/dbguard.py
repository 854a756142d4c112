"""The history must not vanish silently: a deleted, replaced or read-only database is said.

Why: ``asrptd`` upgrades the schema at start, so a SQLite file deleted (or a PostgreSQL
database recreated) would otherwise come back as an empty history, losing every prediction,
outcome and the policy state without a word; and a SQLite file deleted while the daemon runs
keeps being written through the open descriptor, into a file nobody will see again.

So the daemon keeps an identity: a random id saved in the database and, per database URL, in
``[daemon] state_dir``. At start the two must agree (or neither exist: a first start); while
it runs, a SQLite file must stay the file it opened. A start-up write proves the database is
writable. Each failure is a :class:`DatabaseUnavailable` naming the database and what to do.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from pathlib import Path

from asrpt.db.session import display_url, normalize_url, sqlite_path
from asrpt.exceptions import DatabaseUnavailable

log = logging.getLogger(__name__)

STATE_KEY = "daemon:database_id"


def _marker(state_dir: str, url: str) -> Path:
    digest = hashlib.sha256(str(normalize_url(url)).encode()).hexdigest()[:16]
    return Path(state_dir) / f"database-{digest}.id"


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def check_before_upgrade(url: str, state_dir: str) -> None:
    """Refuse to start (and to create a schema) when the SQLite file this daemon used is gone."""
    path = sqlite_path(normalize_url(url))
    marker = _marker(state_dir, url)
    if path is not None and not path.exists() and marker.exists():
        raise DatabaseUnavailable(
            display_url(url),
            f"the database file {path} is missing, but asrptd kept its history there before ({marker}); "
            f"restore it from a backup, or delete {marker} to start a new, empty history",
        )


class DatabaseGuard:
    """Checks at start and at every cycle that the history is the one asrptd has been using."""

    def __init__(self, url: str, state_dir: str) -> None:
        self.url = url
        self.shown = display_url(url)
        self.marker = _marker(state_dir, url)
        self.path = sqlite_path(normalize_url(url))
        self.file_id = _file_identity(self.path) if self.path is not None else None

    def check_at_start(self, repository) -> None:
        """The database's id must match this host's record of it; then one write (read-only?)."""
        stored = repository.load_state(STATE_KEY)
        try:
            remembered = self.marker.read_text().strip() if self.marker.exists() else None
        except OSError as error:
            log.warning("cannot read %s (%s); the database's identity is not checked", self.marker, error.strerror)
            remembered = None
        if remembered and stored != remembered:
            raise DatabaseUnavailable(
                self.shown,
                f"this is not the history asrptd kept before (expected id {remembered} from {self.marker}, "
                f"found {stored or 'an empty history'}); it was deleted or replaced: restore it from a backup, "
                f"or delete {self.marker} to start a new history",
            )
        identity = stored or uuid.uuid4().hex
        try:
            repository.save_state(STATE_KEY, identity)  # also proves the database is writable
        except DatabaseUnavailable as error:
            raise DatabaseUnavailable(self.shown, f"cannot be written at start ({error.reason}); is it read-only?") from error
        if remembered != identity:
            try:
                self.marker.parent.mkdir(parents=True, exist_ok=True)
                self.marker.write_text(identity + "\n")
            except OSError as error:
                log.warning("cannot write %s (%s); a deleted database will not be detected at start", self.marker, error.strerror)

    def check(self) -> None:
        """Before each cycle: a SQLite file deleted or replaced since start fails the cycle."""
        if self.path is None or self.file_id is None:
            return
        now = _file_identity(self.path)
        if now != self.file_id:
            what = "deleted" if now is None else "replaced by another file"
            raise DatabaseUnavailable(
                self.shown,
                f"the database file {self.path} was {what} while asrptd ran; nothing more is written to it. "
                "Restore it and restart asrptd (a restart with no file refuses to start over an empty history)",
            )
