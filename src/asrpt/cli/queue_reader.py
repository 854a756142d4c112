"""The forecasts one uid may see, read from the history: what ``asrpt queue/eta/explain`` show.

One implementation for both ways a user reads the queue: the CLI on the database itself, and
asrptd's Unix socket on behalf of the connected uid (:mod:`asrpt.daemon.local_socket`). Under
Slurm's ``PrivateData=jobs`` a uid other than root and the SlurmUser sees only its own jobs
(:mod:`asrpt.cli.queue_privacy`); another user's job asked for by id gets the same answer as an
unknown one, and in ``explain`` the jobs ahead come without id, name, user or reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asrpt.cli.queue_privacy import JobPrivacy, redacted
from asrpt.exceptions import UnknownJob


class QueueReader:
    """``uid``'s view of the stored forecasts under Slurm's setting, which ``privacy`` reads
    once the history has answered (a caller who cannot read it is told that, not about Slurm)."""

    def __init__(self, repository: Any, privacy: Callable[[], JobPrivacy], uid: int) -> None:
        self.repository = repository
        self._privacy = privacy
        self.uid = uid

    def queue(self, user: Any = None, partition: Any = None) -> list[Any]:
        """The current forecasts in scheduling order (filters as ``latest_forecasts``)."""
        rows = self.repository.latest_forecasts(user=user, partition=partition)
        return self._privacy().visible(rows, self.uid)

    def eta(self, job_id: str) -> Any:
        """The job's latest forecast; :class:`UnknownJob` when there is none the caller may see."""
        row = self.repository.forecast_for(job_id)
        privacy = self._privacy()
        if row is None or not privacy.visible([row], self.uid):
            raise unknown_job(job_id, private=privacy.private_jobs)
        return row

    def explain(self, job_id: str) -> tuple[Any, dict[str, Any]]:
        """The job's forecast and :func:`gather_explanation`'s facts."""
        row = self.eta(job_id)
        return row, gather_explanation(self.repository, row, privacy=self._privacy(), uid=self.uid)


def unknown_job(job_id: str, *, private: bool = False) -> UnknownJob:
    why = (
        f"job {job_id} has no forecast: it is not an accelerator job asrptd schedules, or the daemon "
        "has not run a cycle since it was submitted"
    )
    return UnknownJob(f"{why} (Slurm's PrivateData=jobs: you see only your own jobs)" if private else why)


def gather_explanation(repository: Any, row: Any, *, privacy: Any = None, uid: int = 0) -> dict[str, Any]:
    """Everything ``asrpt explain`` says about a job, as plain data (its ``--json``); under
    ``privacy``'s PrivateData=jobs, other users' jobs come without id, name, user or reason."""
    from asrpt.cli.queue_view import job_json

    def shown(other: Any) -> dict[str, Any]:
        if privacy is None or privacy.visible([other], uid):
            return job_json(other)
        return redacted(job_json(other))

    facts: dict[str, Any] = {"job": job_json(row)}
    submission = repository.get_submission(row.slurm_job_id)
    predictions = repository.predictions_of(row.slurm_job_id)
    group = (submission.recurrence_group or submission.script_hash) if submission else None
    first_made_s = predictions[0].made_at_s if predictions else None
    history: dict[str, Any] = {
        "group": group,
        "iterations_hint": submission.iterations_hint if submission else None,
        "predictions": [
            {"predicted_iterations": p.predicted_iterations, "model_version": p.model_version, "made_at_s": p.made_at_s}
            for p in predictions
        ],
    }
    if group:
        runs = repository.finished_runs(group=group, ended_before_s=first_made_s)
        history["group_runs"] = {"count": runs.count, "median_iterations": runs.median_iterations, "median_run_time_s": runs.median_run_time_s}
    if row.user:
        runs = repository.finished_runs(user=row.user, ended_before_s=first_made_s)
        history["user_runs"] = {"count": runs.count, "median_iterations": runs.median_iterations, "median_run_time_s": runs.median_run_time_s}
    facts["history"] = history

    ahead: list[dict[str, Any]] = []
    running_here: list[dict[str, Any]] = []
    if row.current:
        queue = repository.latest_forecasts()
        if not row.running and row.position is not None:
            ahead = [
                shown(other)
                for other in queue
                if not other.running and other.position is not None and other.position < row.position
            ]
        mine = {row.partition} if row.partition else set(row.partitions)
        running_here = [
            shown(other)
            for other in queue
            if other.running and other.slurm_job_id != row.slurm_job_id and (not mine or other.partition in mine)
        ]
    facts["ahead"] = ahead
    facts["running_on_its_partitions"] = running_here
    return facts


