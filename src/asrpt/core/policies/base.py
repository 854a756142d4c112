"""The one interface every scheduling policy implements (A-SRPT and the baselines)."""

from __future__ import annotations

from typing import Any, Protocol

from asrpt.core.model import ClusterSnapshot, Decision


class PolicyState(Protocol):
    """What a policy remembers between cycles; serialisable so a restarted daemon continues."""

    def to_dict(self) -> dict[str, Any]: ...


class Policy(Protocol):
    #: Name used on the command line and in reports.
    name: str

    def new_state(self) -> PolicyState:
        """A fresh state for an empty history."""
        ...

    def restore_state(self, data: dict[str, Any]) -> PolicyState:
        """The state from ``PolicyState.to_dict`` output."""
        ...

    def decide(self, snapshot: ClusterSnapshot, now_s: float, state: PolicyState) -> Decision:
        """Pure apart from updating ``state``: no I/O, no clock, no randomness without a seed."""
        ...
