"""A job's forecast as ``asrpt queue/eta/explain`` show it: plain records, standard library
only, so that the CLI can carry them from asrptd's socket without loading the database stack
(:mod:`asrpt.db.repository` stores and reads them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ForecastRecord:
    """One job's forecast as a daemon cycle made it: what ``asrpt queue/eta/explain`` show."""

    slurm_job_id: str
    user: str
    #: The policy that ordered the queue.
    policy: str
    running: bool
    accelerators: int
    #: Predicted start and end, epoch seconds; None (or infinite) when the forecast cannot
    #: place the job. A running job's start is its real start.
    predicted_start_s: float | None
    predicted_end_s: float | None
    #: 1-based place in the policy's order of pending jobs; None for running jobs.
    position: int | None = None
    #: Held by asrpt for a consolidated placement (communication-heavy).
    held: bool = False
    job_name: str | None = None
    #: Where it runs, or where the forecast starts it.
    partition: str | None = None
    #: Partitions the job allows.
    partitions: tuple[str, ...] = ()
    #: Iterations the policy ranked the job by (0 for an unseen job under the paper's rule).
    predicted_iterations: float | None = None
    #: Iterations the forecast assumed the job runs.
    expected_iterations: float | None = None
    #: A-SRPT's virtual single machine: remaining and total virtual work, seconds (None for
    #: other policies and running jobs).
    virtual_remaining_s: float | None = None
    virtual_size_s: float | None = None
    #: Why the job sits where it does, in the policy's words.
    reason: str | None = None
    #: No history to forecast from: ``predicted_end_s`` is the latest end the time limit
    #: allows, not a forecast (shown as "unknown, at most ...").
    end_unknown: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredForecast(ForecastRecord):
    """A forecast as stored: the latest, when it was made, and the job's first one."""

    made_at_s: float
    #: Whether the job was in the queue at the last cycle.
    current: bool
    first_made_at_s: float
    first_predicted_start_s: float | None
    first_predicted_end_s: float | None
