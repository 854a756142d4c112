"""The one scheduling loop: snapshot -> predictions -> decide -> apply -> record.

The daemon drives it on a timer with the Slurm backend and the system clock; the simulator
drives it from its event loop with ``SimCluster`` and a simulated clock; the forecast drives it
on a copy of the present with predicted durations. None of them has a mode flag here.
"""

from __future__ import annotations

from typing import Protocol

from asrpt.core.model import ClusterSnapshot, Decision
from asrpt.core.policies.base import Policy, PolicyState


class Clock(Protocol):
    def now_s(self) -> float: ...


class ClusterBackend(Protocol):
    def snapshot(self) -> ClusterSnapshot:
        """The cluster as it is now; raises ``SlurmUnreachable``/``SlurmOutputMalformed``."""
        ...

    def apply(self, decision: Decision) -> None: ...


class Predictions(Protocol):
    def annotate(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterSnapshot:
        """The snapshot with ``predicted_iterations`` filled in for its jobs."""
        ...


class DecisionLog(Protocol):
    def record(self, now_s: float, snapshot: ClusterSnapshot, decision: Decision) -> None: ...


class SchedulingLoop:
    def __init__(
        self,
        *,
        backend: ClusterBackend,
        clock: Clock,
        policy: Policy,
        predictions: Predictions,
        state: PolicyState | None = None,
        log: DecisionLog | None = None,
    ) -> None:
        self.backend = backend
        self.clock = clock
        self.policy = policy
        self.predictions = predictions
        self.state = policy.new_state() if state is None else state
        self.log = log
        #: The annotated snapshot of the current (or last) cycle: what the policy decided on.
        self.last_snapshot: ClusterSnapshot | None = None

    def tick(self, now_s: float | None = None) -> Decision:
        """One cycle at ``now_s``: the cycle's one clock reading, taken here unless the caller
        took it (the daemon uses the same instant for its ETA texts and records)."""
        if now_s is None:
            now_s = self.clock.now_s()
        snapshot = self.predictions.annotate(self.backend.snapshot(), now_s)
        self.last_snapshot = snapshot
        decision = self.policy.decide(snapshot, now_s, self.state)
        self.backend.apply(decision)
        if self.log is not None:
            self.log.record(now_s, snapshot, decision)
        return decision
