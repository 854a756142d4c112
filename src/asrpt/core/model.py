"""Immutable data the scheduling core works on.

The daemon builds these from Slurm, the simulator from a trace, the forecast from a copy of
the current state; the core never knows which. Times are float seconds (epoch or simulated,
the core does not care), bandwidths in gigabytes per second, sizes in gigabytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable, Iterator, Mapping, Sequence, overload

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
class RequestShape:
    """How a job asked Slurm for its accelerators, hence the allocations cons_tres may give it.

    Slurm never starts a job on whatever scattered slots are free: it allocates the shape the
    request names or nothing. Three kinds:

    * **fixed** (``nodes`` and ``per_node`` set; ``-N n --gres=gpu:k``, or ``--gpus`` with
      ``--gpus-per-node``): exactly ``nodes`` nodes of one partition with ``per_node`` each.
    * **spread** (``spread=True``; ``--gpus=g`` alone, or per task): any nodes, any split.
    * **derived** (the default; what a trace job gets): the way users submit on a partition of
      ``s``-accelerator nodes: ``g <= s`` on one node; else whole nodes, ``n`` = the smallest
      ``n >= ceil(g/s)`` that divides ``g``, ``g/n`` each (16 on 8-GPU nodes is 2x8, 12 is
      2x6, 9 is 3x3). See :func:`derived_shape`.
    """

    nodes: int | None = None
    per_node: int | None = None
    spread: bool = False

    def __post_init__(self) -> None:
        if (self.nodes is None) != (self.per_node is None):
            raise ValueError("RequestShape needs both nodes and per_node, or neither")
        if self.nodes is not None:
            if self.spread:
                raise ValueError("a fixed RequestShape (nodes x per_node) cannot also be spread")
            for name in ("nodes", "per_node"):
                value = getattr(self, name)
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"RequestShape.{name} must be a positive integer, got {value!r}")

    @property
    def fixed(self) -> bool:
        return self.nodes is not None

    def on(self, accelerators: int, node_size: int) -> tuple[int, int] | None:
        """(nodes, accelerators per node) for a job of ``accelerators`` on a partition of
        ``node_size``-accelerator nodes; None for a spread request (any split will do)."""
        if self.spread:
            return None
        if self.nodes is not None:
            assert self.per_node is not None
            return self.nodes, self.per_node
        return derived_shape(accelerators, node_size)


#: The default request: derived per partition.
DERIVED = RequestShape()
#: ``--gpus=g`` without a per-node count: cons_tres may put the workers anywhere.
SPREAD = RequestShape(spread=True)


@lru_cache(maxsize=4096)
def derived_shape(accelerators: int, node_size: int) -> tuple[int, int]:
    """(nodes, per node) a user would ask for: one node if the job fits in one, else the fewest
    whole-node-or-less equal shares: the smallest ``n >= ceil(g/s)`` dividing ``g`` (``n = g``,
    one each, always qualifies, so a prime g larger than a node becomes g nodes x 1). Cached on
    purpose: a pure function of small immutable, hashable arguments, asked for the same few
    again and again; a bounded cache of such cannot change an answer."""
    g, s = accelerators, max(node_size, 1)
    if g <= s:
        return 1, g
    n = -(-g // s)
    while g % n:
        n += 1
    return n, g // n


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
    #: The allocation shape the request asks for (derived per partition by default).
    request_shape: RequestShape = DERIVED
    #: A preemptive policy may stop and requeue it (it restarts from its own checkpoint).
    #: True for trace jobs (the simulator assumes checkpoints, as Tiresias does); the daemon
    #: sets it from Slurm's requeue flag of the job.
    requeueable: bool = True

    def __post_init__(self) -> None:
        shape = self.request_shape
        if shape.nodes is not None and shape.nodes * shape.per_node != self.parallel.workers:  # type: ignore[operator]
            raise ValueError(
                f"job {self.job_id}: request {shape.nodes} node(s) x {shape.per_node} does not make "
                f"its {self.parallel.workers} workers"
            )

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
    """Cached on purpose (pure, on small immutable arguments, so it cannot change an answer):
    the same few restrictions are checked against the same partitions very often."""
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


class StaleSnapshot(RuntimeError):
    """A snapshot's live view was read after the backend changed the cluster under it."""


class ChangeLog:
    """Append-only log of pending job ids a backend added, replaced or removed.

    A backend that keeps its pending jobs between cycles (the simulator) appends an id each
    time it touches one, so a policy can update its state from the ids since its last look
    instead of rescanning a queue of thousands at every event.
    """

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: list[str] = []


class PendingJobs(Sequence[Job]):
    """The pending jobs of one snapshot as a live view of the backend's dictionary.

    Iterates like the tuple it stands in for; adds ``by_id`` and ``changes_since``. Valid until
    the backend changes its pending set (it logs every change); reading it afterwards raises
    ``StaleSnapshot`` rather than showing a different queue.
    """

    __slots__ = ("_by_id", "_log", "_cursor", "_tuple")

    def __init__(self, by_id: dict[str, Job], log: ChangeLog) -> None:
        self._by_id = by_id
        self._log = log
        self._cursor = len(log.ids)
        self._tuple: tuple[Job, ...] | None = None

    def _check(self) -> None:
        if len(self._log.ids) != self._cursor:
            raise StaleSnapshot("the pending jobs changed since this snapshot was taken")

    def by_id(self) -> Mapping[str, Job]:
        self._check()
        return self._by_id

    def changes_since(self, log: object, cursor: int) -> tuple[list[str] | None, int]:
        """Ids touched since ``cursor`` of ``log`` (None if that is another backend's log),
        and the cursor to remember for next time."""
        self._check()
        if log is not self._log:
            return None, self._cursor
        return self._log.ids[cursor:self._cursor], self._cursor

    @property
    def log(self) -> ChangeLog:
        return self._log

    def _as_tuple(self) -> tuple[Job, ...]:
        self._check()
        if self._tuple is None:
            self._tuple = tuple(self._by_id.values())
        return self._tuple

    def __len__(self) -> int:
        self._check()
        return len(self._by_id)

    def __iter__(self) -> Iterator[Job]:
        return iter(self._as_tuple())

    @overload
    def __getitem__(self, index: int) -> Job: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Job, ...]: ...
    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._as_tuple()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return self._as_tuple() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def pending_by_id(pending: Sequence[Job]) -> Mapping[str, Job]:
    """Pending jobs by id: the backend's own index when it keeps one, else built here."""
    if isinstance(pending, PendingJobs):
        return pending.by_id()
    return {job.job_id: job for job in pending}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSnapshot:
    """Everything the policy may look at in one cycle.

    ``pending`` is a tuple, or a ``PendingJobs`` view from a backend that logs its changes.
    """

    partitions: tuple[Partition, ...]
    nodes: tuple[Node, ...]
    pending: Sequence[Job]
    running: tuple[RunningJob, ...] = ()

    def frozen(self) -> "ClusterSnapshot":
        """This snapshot with its pending jobs copied out of a live ``PendingJobs`` view: what
        to keep when the snapshot must outlive the decision it was taken for."""
        if isinstance(self.pending, tuple):
            return self
        return ClusterSnapshot(partitions=self.partitions, nodes=self.nodes, pending=tuple(self.pending), running=self.running)

    def partition(self, name: str) -> Partition:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(name)


class StaleOrder(RuntimeError):
    """A lazily built order was read after its policy had decided again."""


class LazyOrder(Sequence[str]):
    """A decision's order, built only when read.

    The simulator reads the order only when Slurm's own scheduler could start something (and
    then only a prefix, through ``stream``); sorting thousands of pending jobs at every event
    would dominate a replay. ``is_current`` says whether the
    state ``build`` reads is still the one decided on; reading later raises ``StaleOrder``.
    """

    __slots__ = ("_build", "_is_current", "_built")

    def __init__(self, build: Callable[[], Iterable[str]], is_current: Callable[[], bool]) -> None:
        self._build: Callable[[], Iterable[str]] | None = build
        self._is_current = is_current
        self._built: tuple[str, ...] = ()

    def _ids(self) -> tuple[str, ...]:
        if self._build is not None:
            if not self._is_current():
                raise StaleOrder("read a decision's order before the policy decides again")
            self._built = tuple(self._build())
            self._build = None
        return self._built

    def stream(self) -> Iterator[str]:
        """The ids in order, produced only as far as they are read (the simulator's Slurm
        model reads a prefix at many events); read it to the end before the policy decides
        again, as the whole order."""
        if self._build is None:
            return iter(self._built)
        if not self._is_current():
            raise StaleOrder("read a decision's order before the policy decides again")
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._ids())

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids())

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._ids()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return self._ids() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LazyOrder({self._ids()!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What a policy wants done now.

    The daemon turns it into Slurm priorities (starts first), node lists and holds and lets
    slurmctld start the starts, and whatever else its own scheduler finds room for; the
    simulator does the same (``SimCluster``, ``asrpt.sim.slurmctld``).
    """

    #: Pending job ids, most urgent first (becomes Slurm priority order); a ``LazyOrder``
    #: must be read before the same policy state decides again.
    order: Sequence[str]
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
