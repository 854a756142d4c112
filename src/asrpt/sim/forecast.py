"""Predicted start and end of every job, by fast-forwarding the present.

The live scheduler's snapshot and a copy of its policy state are replayed by the simulator's
engine with the policy the daemon runs, so a forecast makes exactly the decisions the daemon
would if every job ran as predicted. There is no second copy of the scheduling logic here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from asrpt.core.model import ClusterSnapshot, Job, Node, RunningJob
from asrpt.core.placement import PlacementMemo, alpha_min_s
from asrpt.core.policies.base import Policy, PolicyState
from asrpt.core.speed import SpeedTable
from asrpt.sim.cluster import JobRecord
from asrpt.sim.engine import SimulationStuck, simulate


@dataclass(frozen=True, slots=True)
class JobForecast:
    job_id: str
    start_s: float
    end_s: float
    running: bool
    #: Where the job runs, or where the forecast starts it; None when it cannot be placed.
    partition: str | None = None
    #: The job's length is not known (no history, no hint): ``end_s`` is not a forecast but
    #: the latest end Slurm allows (start plus time limit), or inf without a limit.
    end_unknown: bool = False


class _AsGiven:
    """The forecast's jobs already carry the predictions the live scheduler uses."""

    def predict(self, job: Job, now_s: float) -> Job:
        return job

    def observe_finished(self, job: Job, record: JobRecord, now_s: float) -> None:
        return None

    def annotate(self, snapshot: ClusterSnapshot, now_s: float) -> ClusterSnapshot:
        return snapshot


#: What a forecast assumes a job without a prediction or a time limit runs, seconds.
UNPREDICTED_RUN_S = 3600.0


def iterations_for_s(job: Job, snapshot: ClusterSnapshot, speed: SpeedTable, run_s: float,
                     cache: dict[str, float] | None = None) -> float:
    """Iterations that take ``run_s`` at the job's best per-iteration time (alpha_min)."""
    alpha_s = cache.get(job.job_id) if cache is not None else None
    if alpha_s is None:
        alpha_s = alpha_min_s(job, snapshot.partitions, snapshot.nodes, speed)
        if cache is not None:
            cache[job.job_id] = alpha_s
    return run_s / alpha_s if alpha_s > 0 and not math.isinf(alpha_s) else 0.0


def predicted_or_time_limit(snapshot: ClusterSnapshot, speed: SpeedTable,
                            cache: dict[str, float] | None = None) -> Callable[[Job], float]:
    """asrpt's belief: a job runs its predicted iterations; one predicted 0 (unseen: ranked
    first) still runs for a while, so until its time limit (an hour without one). This is the
    daemon's rule (``Daemon._expected_iterations``); the accuracy replay uses it too."""

    def expected(job: Job) -> float:
        n = job.predicted_iterations or 0.0
        if n > 0:
            return n
        return iterations_for_s(job, snapshot, speed, job.time_limit_s or UNPREDICTED_RUN_S, cache)

    return expected


def time_limit_belief(snapshot: ClusterSnapshot, speed: SpeedTable,
                      cache: dict[str, float] | None = None) -> Callable[[Job], float]:
    """Slurm's belief: every job runs until its requested time limit (what backfill reserves
    on and ``squeue --start`` reports). A job without a limit runs its prediction, or an hour."""
    fallback = predicted_or_time_limit(snapshot, speed, cache)

    def expected(job: Job) -> float:
        if job.time_limit_s is None:
            return fallback(job)
        return iterations_for_s(job, snapshot, speed, job.time_limit_s, cache)

    return expected


def remaining_iterations(running: RunningJob, now_s: float, expected_iterations: float) -> float:
    """Iterations a running job has left by its prediction; one that outlived the prediction is
    expected to run as long again as it already has (the doubling rule)."""
    alpha_s = running.placement.iteration_time_s
    done = (now_s - running.start_time_s) / alpha_s if alpha_s > 0 else 0.0
    left = expected_iterations - done
    return left if left > 0 else max(done, 1.0)


def _usable_nodes(snapshot: ClusterSnapshot) -> tuple[Node, ...]:
    """Nodes sized to what jobs can use: free now plus what running jobs hold. A node that is
    down or drained (0 free, nothing of ours on it) contributes nothing."""
    held: dict[str, int] = {}
    for r in snapshot.running:
        for name, count in r.placement.node_counts.items():
            held[name] = held.get(name, 0) + count
    usable = []
    for node in snapshot.nodes:
        total = min(node.accelerators_total, node.accelerators_free + held.get(node.name, 0))
        if total > 0:
            usable.append(replace(node, accelerators_total=total, accelerators_free=total))
    return tuple(usable)


def length_unknown(job: Job) -> bool:
    """No prediction to forecast from: None, or the paper's 0 for an unseen job."""
    return not job.predicted_iterations or job.predicted_iterations <= 0


def forecast(
    snapshot: ClusterSnapshot,
    now_s: float,
    policy: Policy,
    state_data: Mapping[str, object],
    expected_iterations: Callable[[Job], float],
    unknown_length: Callable[[Job], bool] = length_unknown,
) -> dict[str, JobForecast]:
    """Start and end of every pending and running job if each runs ``expected_iterations``,
    and no job past its time limit (Slurm kills it there, and what waits behind it starts).

    ``state_data`` is the live policy state's ``to_dict()``; it is restored into a private copy
    so the live state is untouched. ``expected_iterations`` is what the forecast believes a job
    runs (for jobs the policy ranks by a predicted 0, a forecast still needs a length). A job
    for which ``unknown_length`` holds gets ``end_unknown``: its end is only the limit's bound,
    or infinite without a limit (the forecast still runs it as assumed, for the jobs behind).
    """
    state: PolicyState = policy.restore_state(dict(state_data))
    nodes = _usable_nodes(snapshot)
    speed: SpeedTable | None = getattr(policy, "speed", None)
    # A job whose request fits no partition it may use (say -N3 where its partition has two
    # nodes) can never start; left in, it would stall the replay and blank every job's ETA.
    never: list[Job] = []
    placeable: list[Job] = []
    grouping = PlacementMemo()
    for job in snapshot.pending:
        fits = speed is None or math.isfinite(alpha_min_s(job, snapshot.partitions, nodes, speed, grouping))
        (placeable if fits else never).append(job)
    pending = [replace(job, true_iterations=expected_iterations(job)) for job in placeable]
    running = [(r, remaining_iterations(r, now_s, expected_iterations(r.job))) for r in snapshot.running]
    try:
        result = simulate(
            pending,
            snapshot.partitions,
            nodes,
            policy,
            _AsGiven(),
            start_s=now_s,
            running=running,
            state=state,
        )
    except SimulationStuck:
        result = None
    out: dict[str, JobForecast] = {}
    running_ids = {r.job.job_id for r in snapshot.running}
    unknown = {job.job_id for job in (*snapshot.pending, *(r.job for r in snapshot.running)) if unknown_length(job)}
    limits = {job.job_id: job.time_limit_s for job in (*snapshot.pending, *(r.job for r in snapshot.running))}
    if result is None:
        return {
            job.job_id: JobForecast(job.job_id, math.inf, math.inf, job.job_id in running_ids, end_unknown=job.job_id in unknown)
            for job in (*snapshot.pending, *(r.job for r in snapshot.running))
        }
    for job_id, record in result.records.items():
        start_s = record.first_start_s if record.first_start_s is not None else math.inf
        end_s = record.end_s if record.end_s is not None else math.inf
        partition = record.partitions[0] if record.partitions else None
        if job_id in unknown:
            limit_s = limits.get(job_id)
            end_s = start_s + limit_s if limit_s and math.isfinite(start_s) else math.inf
        out[job_id] = JobForecast(job_id, start_s, end_s, job_id in running_ids, partition, job_id in unknown)
    for job in never:
        out[job.job_id] = JobForecast(job.job_id, math.inf, math.inf, False, end_unknown=job.job_id in unknown)
    return out
