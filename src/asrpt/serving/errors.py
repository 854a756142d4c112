"""Errors of the serving tools; all are :class:`asrpt.exceptions.AsrptError`, so the CLI
prints one line for them and a traceback only for bugs."""

from __future__ import annotations

from asrpt.exceptions import AsrptError, ConfigError, TraceFormatError


class ProfileFormatError(TraceFormatError):
    """A latency profile file does not have the expected format."""


class UnknownModel(ConfigError, LookupError):
    """The model is not in the table of known models."""


class UnknownAccelerator(ConfigError, LookupError):
    """The accelerator type is not in the table of known accelerators."""


class ClusterSpecError(ConfigError):
    """The cluster description cannot be parsed."""


class FitUnavailable(AsrptError, LookupError):
    """No fitted latency model covers this model, accelerator and tensor-parallel degree."""


class NotEnoughData(AsrptError):
    """Too few usable rows to fit and hold out."""
