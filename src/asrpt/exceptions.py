"""Errors asrpt raises on purpose.

Every error the project means to raise derives from :class:`AsrptError`, so an entry point
can catch that one class, print the message and exit non-zero, while a bug (any other
exception) still shows its traceback. A class's docstring is its default message; callers
add the evidence (the URL, the raw output, the offending line) that lets an admin act on it.
"""

from __future__ import annotations


class AsrptError(Exception):
    """asrpt failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(AsrptError):
    """The configuration is invalid."""


class DatabaseUnavailable(AsrptError):
    """The history database cannot be used."""

    def __init__(self, url: str, reason: str | None = None) -> None:
        #: The database URL with any password masked.
        self.url = url
        #: What went wrong, in the driver's words where there are some.
        self.reason = reason or (self.__doc__ or "").strip()
        super().__init__(f"database {url}: {self.reason}")


class MigrationRequired(DatabaseUnavailable):
    """The database schema is missing or older than this asrpt; run `asrpt db upgrade`."""


class UnknownJob(AsrptError, LookupError):
    """No submission is recorded for this job."""


class SlurmUnreachable(AsrptError):
    """Slurm did not answer (slurmctld down, timeout or command missing)."""


class SlurmOutputMalformed(AsrptError):
    """Slurm answered with output asrpt cannot parse."""


class TraceFormatError(AsrptError):
    """A trace file does not have the expected format."""
