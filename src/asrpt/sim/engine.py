"""Discrete-event replay: arrivals and completions move a simulated clock, and at every event
the shared ``SchedulingLoop`` runs once against ``SimCluster``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from asrpt.core.model import Job, Node, Partition, RunningJob
from asrpt.core.policies.base import Policy, PolicyState
from asrpt.core.speed import SpeedTable
from asrpt.loop import SchedulingLoop
from asrpt.sim.cluster import JobRecord, RequeueCost, SimCluster
from asrpt.sim.predictors import SimPredictions


class SimulationStuck(RuntimeError):
    """Jobs wait, nothing runs, nothing arrives and the policy asks for no wake-up."""


class SimClock:
    def __init__(self, start_s: float = 0.0) -> None:
        self.t_s = start_s

    def now_s(self) -> float:
        return self.t_s


@dataclass(slots=True)
class SimResult:
    policy: str
    records: dict[str, JobRecord]
    accelerators_total: int
    decisions: int = 0
    #: (time, job id, event) for parity and debugging, only when asked for.
    events: list[tuple[float, str, str]] = field(default_factory=list)


def simulate(
    jobs: Sequence[Job],
    partitions: Sequence[Partition],
    nodes: Sequence[Node],
    policy: Policy,
    predictions: SimPredictions,
    *,
    progress: Callable[[int, int], None] | None = None,
    keep_events: bool = False,
    start_s: float | None = None,
    running: Sequence[tuple[RunningJob, float]] = (),
    state: PolicyState | None = None,
    slurm_fills: bool = True,
    speed: SpeedTable | None = None,
    requeue_cost: RequeueCost = RequeueCost(),
) -> SimResult:
    """Replay ``jobs`` (with true iterations) under ``policy``; every job ends exactly once.

    A forecast starts from the present instead of an empty cluster: ``start_s`` is now,
    ``running`` the jobs already running with the iterations each has left, ``state`` a copy
    of the policy state the live scheduler holds. ``slurm_fills``: Slurm's own scheduler
    starts what the policy leaves startable (see ``SimCluster``); off, exactly the decisions'
    starts run (the idealised model). ``speed`` places Slurm's own starts: by default the
    policy's table (``policy.speed``), since Slurm's jobs run as fast as the policy's would.
    ``requeue_cost``: what a preemption costs the preempted job (``RequeueCost``; free by default).
    """
    arrivals = sorted(jobs, key=lambda j: (j.submit_time_s, j.job_id))
    if speed is None:
        speed = getattr(policy, "speed", None)
    if slurm_fills and speed is None:
        raise ValueError(f"{policy.name}: the Slurm model needs a speed table (policy.speed or speed=)")
    cluster = SimCluster(partitions, nodes, speed=speed, slurm_fills=slurm_fills, requeue_cost=requeue_cost)
    first_s = arrivals[0].submit_time_s if arrivals else 0.0
    clock = SimClock(first_s if start_s is None else start_s)
    cluster.now_s = clock.t_s
    for running_job, remaining_iterations in running:
        cluster.adopt_running(running_job, remaining_iterations)
    loop = SchedulingLoop(backend=cluster, clock=clock, policy=policy, predictions=predictions, state=state)
    result = SimResult(policy=policy.name, records=cluster.records, accelerators_total=cluster.accelerators_total())
    next_arrival = 0
    wake_s = math.inf
    finished = 0
    total = len(arrivals)
    while next_arrival < total or cluster.pending or cluster.running:
        arrival_s = arrivals[next_arrival].submit_time_s if next_arrival < total else math.inf
        t_s = max(min(arrival_s, cluster.next_end_s(), wake_s), clock.t_s)
        if math.isinf(t_s):
            stuck = ", ".join(sorted(cluster.pending)[:10])
            raise SimulationStuck(
                f"{policy.name}: {len(cluster.pending)} job(s) wait on an idle cluster with nothing to "
                f"come (first: {stuck})"
            )
        clock.t_s = cluster.now_s = t_s
        done: list[RunningJob] = cluster.finish_until(t_s)
        for running in done:
            predictions.observe_finished(running.job, cluster.records[running.job.job_id], t_s)
            if keep_events:
                result.events.append((t_s, running.job.job_id, "end"))
        finished += len(done)
        while next_arrival < total and arrivals[next_arrival].submit_time_s <= t_s:
            job = arrivals[next_arrival]
            cluster.submit(predictions.predict(job, t_s))
            next_arrival += 1
        decision = loop.tick()
        result.decisions += 1
        if keep_events:
            result.events.extend((t_s, p.job_id, f"start {p.partition} {','.join(p.worker_nodes)}") for p in decision.starts)
            result.events.extend((t_s, p.job_id, f"start {p.partition} {','.join(p.worker_nodes)}") for p in cluster.last_fills)
            result.events.extend((t_s, j, "preempt") for j in decision.preempts)
        wake_s = decision.wake_at_s if decision.wake_at_s is not None and decision.wake_at_s > t_s else math.inf
        if progress is not None and done:
            progress(finished, total)
    return result
