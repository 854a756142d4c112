"""One cycle's forecasts as rows for the database, the HTTP endpoint and ``asrpt explain``.

The forecast itself (``asrpt.sim.forecast``) gives each job a start and an end. This module
adds what a user asks next, all of it already decided in the cycle: the job's place in the
policy's order, the policy's reason, whether asrpt holds it, where it is predicted to run,
the iterations the policy ranked it by and those the forecast assumed, and, for A-SRPT, its
remaining work on the virtual single machine. Nothing is recomputed here.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from asrpt.core.model import ClusterSnapshot, Decision, Job
from asrpt.db.repository import ForecastRecord
from asrpt.sim.forecast import JobForecast


def virtual_work_s(state: Any, job_ids: Iterable[str]) -> dict[str, tuple[float, float]]:
    """(remaining, total) virtual work in seconds of each job the policy state sizes.

    Only A-SRPT's state has virtual machines (``sizes_s`` and ``queue``, plus ``machines`` by
    pool with ``pool_of``, or a single ``machine``); other policies yield nothing. A job in the
    dispatch queue Q is virtually complete (remaining 0).
    """
    sizes = getattr(state, "sizes_s", None)
    if not isinstance(sizes, Mapping):
        return {}
    machines = getattr(state, "machines", None)
    pool_of = getattr(state, "pool_of", None)
    single = None if isinstance(machines, Mapping) else getattr(state, "machine", None)
    if single is None and not isinstance(machines, Mapping):
        return {}
    in_queue = set(getattr(state, "queue", ()) or ())
    out: dict[str, tuple[float, float]] = {}
    for job_id in job_ids:
        size = sizes.get(job_id)
        if size is None:
            continue
        if job_id in in_queue:
            out[job_id] = (0.0, float(size))
            continue
        machine = single
        if machine is None:
            machine = machines.get(pool_of.get(job_id, "") if isinstance(pool_of, Mapping) else "")  # type: ignore[union-attr]
        remaining = None if machine is None else machine.remaining_s(job_id)
        if remaining is not None:
            out[job_id] = (float(remaining), float(size))
    return out


def forecast_records(
    snapshot: ClusterSnapshot,
    decision: Decision,
    forecasts: Mapping[str, JobForecast],
    *,
    policy: str,
    state: Any,
    expected_iterations: Callable[[Job], float],
    job_names: Mapping[str, str] | None = None,
    job_users: Mapping[str, str] | None = None,
    job_partitions: Mapping[str, tuple[str, ...]] | None = None,
    notes: Mapping[str, str] | None = None,
) -> list[ForecastRecord]:
    """Rows for every running and pending job of ``snapshot``, running jobs first.

    ``job_names``, ``job_users`` and ``job_partitions`` come from Slurm's view of the jobs
    (the scheduling core does not carry names); a job missing there falls back to what the
    core knows. ``notes`` are what the daemon decided before the policy (a serving job's
    partition from its plan); a pending job's note follows the policy's reason.
    """
    names = job_names or {}
    users = job_users or {}
    allowed = job_partitions or {}
    position = {job_id: i + 1 for i, job_id in enumerate(dict.fromkeys(decision.order))}
    holds = set(decision.holds)
    virtual = virtual_work_s(state, (job.job_id for job in snapshot.pending))
    rows: list[ForecastRecord] = []

    def common(job: Job, f: JobForecast | None) -> dict[str, Any]:
        return dict(
            slurm_job_id=job.job_id,
            user=job.user or users.get(job.job_id) or "",
            policy=policy,
            accelerators=job.accelerators,
            predicted_start_s=None if f is None else f.start_s,
            predicted_end_s=None if f is None else f.end_s,
            job_name=names.get(job.job_id) or None,
            partitions=allowed.get(job.job_id) or job.allowed_partitions,
            predicted_iterations=job.predicted_iterations,
            expected_iterations=float(expected_iterations(job)),
            end_unknown=bool(f is not None and f.end_unknown),
        )

    for running in snapshot.running:
        job = running.job
        f = forecasts.get(job.job_id)
        values = common(job, f)
        values["predicted_start_s"] = running.start_time_s
        rows.append(ForecastRecord(**values, running=True, partition=running.placement.partition))
    for job in snapshot.pending:
        f = forecasts.get(job.job_id)
        remaining, size = virtual.get(job.job_id, (None, None))
        rows.append(
            ForecastRecord(
                **common(job, f),
                running=False,
                position=position.get(job.job_id),
                held=job.job_id in holds,
                partition=None if f is None else f.partition,
                virtual_remaining_s=remaining,
                virtual_size_s=size,
                reason="; ".join(r for r in (decision.reasons.get(job.job_id), (notes or {}).get(job.job_id)) if r) or None,
            )
        )
    return rows

