"""Immutable data the scheduling core works on.

The daemon builds these from Slurm, the simulator from a trace, the forecast from a copy of
the current state; the core never knows which. Times are float seconds (epoch or simulated,
the core does not care), bandwidths in gigabytes per second, sizes in gigabytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelConfig:
    """A job's mixed-parallel layout: data x pipeline x tensor workers, gang-scheduled."""

    #: Data-parallel replicas (d).
    data: int = 1
    #: Pipeline stages per replica (p).
    pipeline: int = 1
    #: Tensor-parallel ranks per stage (t).
    tensor: int = 1
    #: Micro-batches per iteration per replica (m); drives the pipeline bubble (m + p - 1).
    micro_batches: int = 1

    def __post_init__(self) -> None:
        for name in ("data", "pipeline", "tensor", "micro_batches"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelConfig.{name} must be a positive integer, got {value!r}")

    @property
    def workers(self) -> int:
        """Accelerators the job needs, all at once (gang)."""
        return self.data * self.pipeline * self.tensor

    @classmethod
    def data_parallel(cls, accelerators: int) -> "ParallelConfig":
        """Plain data parallelism: what a job that says nothing about its layout gets."""
        return cls(data=accelerators)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A job as the scheduler sees it.

    ``true_iterations`` exists only in simulation and is read only by oracle policies and the
    lower bound; everything else uses ``predicted_iterations``.
    """

    job_id: str
    submit_time_s: float
    parallel: ParallelConfig
    #: Key into the speed table (e.g. "resnet50", "bert"); decides compute and traffic per iteration.
    workload_class: str
    user: str = ""
    #: Recurrence group (script hash, trace group); jobs of one group are repeated runs.
    group: str = ""
    #: Partitions the job may run on; empty means any partition.
    allowed_partitions: tuple[str, ...] = ()
    #: Accelerator types the job may run on (case-insensitive); empty means any type.
    allowed_accelerators: tuple[str, ...] = ()
    predicted_iterations: float | None = None
    true_iterations: float | None = None
    #: The user's requested wall-time limit (what Slurm-style backfill trusts).
    time_limit_s: float | None = None

    @property
    def accelerators(self) -> int:
        return self.parallel.workers

    def allows(self, partition: "Partition") -> bool:
        """Whether the job may run on ``partition`` (by name and by accelerator type)."""
        if not self.allowed_partitions and not self.allowed_accelerators:
            return True
        return _allows(self.allowed_partitions, self.allowed_accelerators, partition.name, partition.accelerator)


@lru_cache(maxsize=4096)
def _allows(partitions: tuple[str, ...], accelerators: tuple[str, ...], name: str, accelerator: str) -> bool:
    """Cached: the same few restrictions are checked against the same partitions very often."""
    if partitions and name not in partitions:
        return False
    if accelerators:
        wanted = {a.lower() for a in accelerators}
        return accelerator.lower() in wanted or name.lower() in wanted
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """Nodes of one accelerator type and one interconnect."""

    name: str
    accelerator: str
    #: Bandwidth between accelerators of one node (NVLink/PCIe/HCCS), GB/s.
    intra_node_gbps: float = 150.0
    #: Bandwidth between nodes (per node NIC), GB/s.
    inter_node_gbps: float = 12.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    name: str
    partition: str
    accelerator: str
    accelerators_total: int
    accelerators_free: int

    def __post_init__(self) -> None:
        if not 0 <= self.accelerators_free <= self.accelerators_total:
            raise ValueError(
                f"node {self.name}: free accelerators {self.accelerators_free} outside "
                f"0..{self.accelerators_total}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where a job's workers go, and what that costs per iteration."""

    job_id: str
    partition: str
    #: Node of each worker, indexed by worker id (replica-major, then stage, then TP rank).
    worker_nodes: tuple[str, ...]
    #: Per-iteration time under this placement, seconds (alpha_i(x)).
    iteration_time_s: float
    #: Bytes per iteration that cross nodes (the cut weight), GB.
    cut_gb: float = 0.0
    #: Accelerators taken on each node (derived from ``worker_nodes``; read-only by convention).
    node_counts: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        counts: dict[str, int] = {}
        for node in self.worker_nodes:
            counts[node] = counts.get(node, 0) + 1
        object.__setattr__(self, "node_counts", counts)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningJob:
    job: Job
    placement: Placement
    start_time_s: float

    def predicted_end_s(self, iterations: float | None = None) -> float:
        """When the job ends if it runs ``iterations`` (default: its prediction)."""
        n = self.job.predicted_iterations if iterations is None else iterations
        return self.start_time_s + (n or 0.0) * self.placement.iteration_time_s


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSnapshot:
    """Everything the policy may look at in one cycle."""

    partitions: tuple[Partition, ...]
    nodes: tuple[Node, ...]
    pending: tuple[Job, ...]
    running: tuple[RunningJob, ...] = ()

    def partition(self, name: str) -> Partition:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What a policy wants done now.

    The simulator starts ``starts`` at once; the daemon turns them into Slurm priorities,
    node lists and holds and lets slurmctld start them.
    """

    #: Pending job ids, most urgent first (becomes Slurm priority order).
    order: tuple[str, ...]
    #: Jobs to start now, with their placements.
    starts: tuple[Placement, ...] = ()
    #: Pending jobs deliberately held (communication-heavy wait for a consolidated placement).
    holds: tuple[str, ...] = ()
    #: Running jobs to stop and requeue (only preemptive policies such as Tiresias use it).
    preempts: tuple[str, ...] = ()
    #: Why each pending job is where it is, for `asrpt explain`.
    reasons: Mapping[str, str] = field(default_factory=dict)
    #: Earliest time the policy wants to be asked again even if nothing happens (a hold expiring).
    wake_at_s: float | None = None
