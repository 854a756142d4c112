"""``SimCluster``: a backend that does with a decision what slurmctld would, in simulated time.

The daemon pins the decision's starts (node lists, the highest priorities) and holds its
holds; Slurm starts the starts at once. So does this backend, on their placements. Then,
with ``slurm_fills`` (the default), it does what Slurm's own main scheduler and backfill would
do with the priorities written: start any other pending, not held job that fits, in the
decision's order (jobs missing from it after, by submit time then id), EASY backfill on time
limits (:mod:`asrpt.sim.slurmctld`). A policy's effect in simulation is then the effect its
writes have on Slurm: a job it declines to start without holding it runs anyway if it fits.
``slurm_fills=False`` is the idealised model in which exactly ``decision.starts`` run.

Preempted jobs are requeued with the iterations they have left. A job's true end is its start
plus its true iterations times the per-iteration time of its placement, and never later than
its start plus its time limit: Slurm kills a job there (TIMEOUT), so the accelerators are free
from then on whatever the job still had to do.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Sequence

from asrpt.core.model import ChangeLog, ClusterSnapshot, Decision, Job, Node, Partition, PendingJobs, Placement, RunningJob
from asrpt.core.speed import SpeedTable, default_speed_table
from asrpt.sim.slurmctld import SlurmScheduler


class Oversubscribed(RuntimeError):
    """A decision asked for accelerators that are not free: a policy bug, never hidden."""


@dataclass(slots=True)
class JobRecord:
    """What happened to one job, for the metrics."""

    job: Job
    first_start_s: float | None = None
    end_s: float | None = None
    preemptions: int = 0
    #: Accelerator-seconds of service received (run time x accelerators, over all runs).
    service_s: float = 0.0
    #: Partition of each run, in order.
    partitions: list[str] = field(default_factory=list)
    #: Distinct nodes of the first run (whoever started it: the policy or Slurm on its own).
    first_nodes: int | None = None


@dataclass(frozen=True, slots=True)
class RequeueCost:
    """What stopping a running job costs it, as with Slurm's requeue of a checkpointing job.

    Slurm cannot pause a GPU job and give its accelerators to another: a preemption is a
    requeue, and the job later restarts from its last checkpoint. So a preempted job keeps only
    the iterations up to its last checkpoint (one every ``checkpoint_interval_s`` of run time;
    0 keeps everything) and its next run first spends ``restart_s`` starting up again (loading
    the checkpoint, the model, the data). ``RequeueCost()`` is free preemption.
    """

    checkpoint_interval_s: float = 0.0
    restart_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("checkpoint_interval_s", "restart_s"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    def kept_run_s(self, ran_s: float) -> float:
        """Of ``ran_s`` seconds of run, the seconds whose work the last checkpoint kept."""
        if self.checkpoint_interval_s <= 0:
            return ran_s
        return math.floor(ran_s / self.checkpoint_interval_s) * self.checkpoint_interval_s

    @property
    def free(self) -> bool:
        return self.checkpoint_interval_s == 0 and self.restart_s == 0

    @classmethod
    def parse(cls, text: str) -> "RequeueCost":
        """``CHECKPOINT_S,RESTART_S`` (seconds) or ``free``, as the CLIs take it."""
        if text.strip().lower() == "free":
            return cls()
        parts = text.split(",")
        try:
            if len(parts) != 2:
                raise ValueError("expected two numbers")
            return cls(float(parts[0]), float(parts[1]))
        except ValueError as error:
            raise ValueError(f"{text!r}: expected CHECKPOINT_S,RESTART_S (seconds, >= 0) or 'free' ({error})") from None


#: The simulator's default: a checkpoint every 30 minutes of run, a minute to start again.
#: Our assumption, not a measurement: DL jobs commonly checkpoint every epoch or N steps.
DEFAULT_REQUEUE_COST = "1800,60"


class SimCluster:
    def __init__(self, partitions: Sequence[Partition], nodes: Sequence[Node], *,
                 speed: SpeedTable | None = None, slurm_fills: bool = True,
                 requeue_cost: RequeueCost = RequeueCost()) -> None:
        """``speed`` places the jobs Slurm starts on its own (the policy's table; default
        the built-in one); ``slurm_fills`` switches that model on (see the module doc);
        ``requeue_cost`` is what a preemption costs the job (free by default)."""
        self.requeue_cost = requeue_cost
        self.partitions = tuple(partitions)
        self.slurm: SlurmScheduler | None = (
            SlurmScheduler(self.partitions, speed if speed is not None else default_speed_table()) if slurm_fills else None
        )
        #: Jobs Slurm started on its own at the last ``apply`` (beyond the decision's starts).
        self.last_fills: list[Placement] = []
        self._nodes: dict[str, Node] = {n.name: replace(n, accelerators_free=n.accelerators_total) for n in nodes}
        self._node_tuple: tuple[Node, ...] | None = None
        self.now_s = 0.0
        self.pending: dict[str, Job] = {}
        self.running: dict[str, RunningJob] = {}
        #: (true end time, job id, start time): the next completions.
        self._ends: list[tuple[float, str, float]] = []
        self.records: dict[str, JobRecord] = {}
        #: Every change to ``pending``, so policies update in O(changes) (see ``PendingJobs``).
        self._log = ChangeLog()
        self._running_tuple: tuple[RunningJob, ...] | None = None

    # -- driven by the engine ----------------------------------------------------------------
    def submit(self, job: Job) -> None:
        if job.job_id in self.records:
            raise ValueError(f"job {job.job_id} submitted twice")
        self.records[job.job_id] = JobRecord(job)
        self.pending[job.job_id] = job
        self._log.ids.append(job.job_id)
        if self.slurm is not None:
            self.slurm.added(job)

    def adopt_running(self, running: RunningJob, remaining_iterations: float) -> None:
        """Take over a job that is already running (a forecast starts from the present)."""
        job = running.job
        if job.job_id in self.records:
            raise ValueError(f"job {job.job_id} adopted twice")
        for name, count in running.placement.node_counts.items():
            node = self._nodes[name]
            if count > node.accelerators_free:
                raise Oversubscribed(f"running job {job.job_id} does not fit on {name}")
            self._nodes[name] = replace(node, accelerators_free=node.accelerators_free - count)
        self._node_tuple = None
        self.records[job.job_id] = JobRecord(job, first_start_s=running.start_time_s, partitions=[running.placement.partition],
                                             first_nodes=len(running.placement.node_counts))
        self.running[job.job_id] = running
        self._running_tuple = None
        end_s = self.now_s + max(remaining_iterations, 0.0) * running.placement.iteration_time_s
        limit_s = job.time_limit_s
        if limit_s is not None and limit_s > 0:
            end_s = max(self.now_s, min(end_s, running.start_time_s + limit_s))
        heapq.heappush(self._ends, (end_s, job.job_id, running.start_time_s))

    def next_end_s(self) -> float:
        return self._ends[0][0] if self._ends else float("inf")

    def finish_until(self, t_s: float) -> list[RunningJob]:
        """Complete every job whose true end is at or before ``t_s``; returns them."""
        finished: list[RunningJob] = []
        while self._ends and self._ends[0][0] <= t_s:
            end_s, job_id, start_s = heapq.heappop(self._ends)
            running = self.running.get(job_id)
            if running is None or running.start_time_s != start_s:
                continue  # stale entry of a preempted run
            del self.running[job_id]
            self._running_tuple = None
            self._release(running)
            record = self.records[job_id]
            record.end_s = end_s
            record.service_s += (end_s - start_s) * running.job.accelerators
            finished.append(running)
        return finished

    def accelerators_total(self) -> int:
        return sum(n.accelerators_total for n in self._nodes.values())

    # -- ClusterBackend ----------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        if self._node_tuple is None:
            self._node_tuple = tuple(self._nodes.values())
        if self._running_tuple is None:
            self._running_tuple = tuple(self.running.values())
        return ClusterSnapshot(
            partitions=self.partitions,
            nodes=self._node_tuple,
            pending=PendingJobs(self.pending, self._log),
            running=self._running_tuple,
        )

    def apply(self, decision: Decision) -> None:
        for job_id in decision.preempts:
            self._preempt(job_id)
        for placement in decision.starts:
            self._start(placement)
        self.last_fills = []
        slurm = self.slurm
        if slurm is None or not self.pending:
            return
        # A job requeued by this decision's preemption is not started again in the same pass:
        # Slurm gives a requeued job a begin time in the future, and restarting it at once
        # would undo the preemption (the policy sees it again next cycle).
        held = {j for j in (*decision.holds, *decision.preempts) if j in self.pending}
        if self._node_tuple is None:
            self._node_tuple = tuple(self._nodes.values())
        if not slurm.could_start(self._node_tuple, (self.pending[j] for j in held)):
            return  # nothing could fit: the priority order need not even be built
        fills = slurm.starts(self.snapshot(), self.now_s, decision.order, self.pending, held)
        for placement in fills:
            self._start(placement)
        self.last_fills = fills

    # -- internals ---------------------------------------------------------------------------
    def _start(self, placement: Placement) -> None:
        job = self.pending.get(placement.job_id)
        if job is None:
            raise ValueError(f"decision starts {placement.job_id}, which is not pending")
        if len(placement.worker_nodes) != job.accelerators:
            raise Oversubscribed(
                f"job {job.job_id} needs {job.accelerators} accelerators, placement gives "
                f"{len(placement.worker_nodes)} (gang scheduling violated)"
            )
        for name, count in placement.node_counts.items():
            node = self._nodes[name]
            if node.partition != placement.partition or count > node.accelerators_free:
                raise Oversubscribed(
                    f"job {job.job_id} wants {count} on {name} ({node.partition}) with "
                    f"{node.accelerators_free} free"
                )
            self._nodes[name] = replace(node, accelerators_free=node.accelerators_free - count)
        self._node_tuple = None
        del self.pending[job.job_id]
        self._log.ids.append(job.job_id)
        if self.slurm is not None:
            self.slurm.removed(job)
        running = RunningJob(job=job, placement=placement, start_time_s=self.now_s)
        self.running[job.job_id] = running
        self._running_tuple = None
        record = self.records[job.job_id]
        if record.first_start_s is None:
            record.first_start_s = self.now_s
            record.first_nodes = len(placement.node_counts)
        record.partitions.append(placement.partition)
        true_n = job.true_iterations if job.true_iterations is not None else 0.0
        run_s = true_n * placement.iteration_time_s
        if job.time_limit_s is not None and job.time_limit_s > 0:
            run_s = min(run_s, job.time_limit_s)  # Slurm's TIMEOUT; a requeued job's limit starts again
        heapq.heappush(self._ends, (self.now_s + run_s, job.job_id, self.now_s))

    def _release(self, running: RunningJob) -> None:
        for name, count in running.placement.node_counts.items():
            node = self._nodes[name]
            self._nodes[name] = replace(node, accelerators_free=node.accelerators_free + count)
        self._node_tuple = None

    def _preempt(self, job_id: str) -> None:
        running = self.running.pop(job_id, None)
        if running is None:
            raise ValueError(f"decision preempts {job_id}, which is not running")
        self._running_tuple = None
        self._release(running)
        ran_s = self.now_s - running.start_time_s
        alpha_s = running.placement.iteration_time_s
        done_n = self.requeue_cost.kept_run_s(ran_s) / alpha_s if alpha_s > 0 else 0.0
        job = running.job
        left_n = max((job.true_iterations or 0.0) - done_n, 0.0)
        if self.requeue_cost.restart_s and alpha_s > 0:
            # Start-up is time, not iterations; counted at the speed of the run it ended.
            left_n += self.requeue_cost.restart_s / alpha_s
        predicted = job.predicted_iterations
        if predicted is not None:
            predicted = max(predicted - done_n, 0.0)
        record = self.records[job_id]
        record.preemptions += 1
        record.service_s += ran_s * job.accelerators
        self.pending[job_id] = replace(job, true_iterations=left_n, predicted_iterations=predicted)
        self._log.ids.append(job_id)
        if self.slurm is not None:
            self.slurm.added(self.pending[job_id])
