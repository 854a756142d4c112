"""What the Slurm adapter reads, normalised across Slurm versions.

``parsing`` turns each version's output (22.05's openapi v0.0.38 JSON, 24.11's data_parser
v0.0.42 JSON, the job completion log, ``sacct -P``) into these records; ``cli_backend`` turns
them into the scheduling core's model. Times are float seconds since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GresItem", "SlurmJob", "SlurmNode", "FinishedJob", "PENDING", "HOLDING_STATES"]

#: Base state of a job waiting to start.
PENDING = "PENDING"
#: Base states of a running job. A COMPLETING job (22.05: base state; 24.11: a flag next to
#: the final state) is over for scheduling: its GRES stay in the nodes' ``gres_used`` until
#: it is gone, so the free counts are right without listing it as running.
HOLDING_STATES = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})


@dataclass(frozen=True, slots=True)
class GresItem:
    """One generic resource: ``gpu:a100:8`` is ``GresItem("gpu", "a100", 8)``, ``npu:4`` has no type."""

    name: str
    type: str | None
    count: int

    def matches(self, name: str, type_: str | None) -> bool:
        """Same resource name and, when ``type_`` is given, the same type (case-insensitive)."""
        if self.name.lower() != name.lower():
            return False
        return type_ is None or (self.type or "").lower() == type_.lower()

    def __str__(self) -> str:
        return f"{self.name}:{self.type}:{self.count}" if self.type else f"{self.name}:{self.count}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmJob:
    """A job in slurmctld's memory (pending, running or recently finished)."""

    job_id: str
    #: Base state in upper case: PENDING, RUNNING, COMPLETED, CANCELLED, ...
    state: str
    #: Extra state flags (24.11 lists them next to the base state: REQUEUED, COMPLETING, ...).
    state_flags: tuple[str, ...] = ()
    #: Why a pending job waits (Priority, Resources, JobHeldUser, BeginTime, ...); "None" when running.
    reason: str = ""
    user: str = ""
    name: str = ""
    #: Pending: every partition the job may run in; running: the one it runs in.
    partitions: tuple[str, ...] = ()
    submit_time_s: float = 0.0
    #: When it started; None while pending (22.05 reports 0, 24.11 a backfill estimate).
    start_time_s: float | None = None
    #: Requested wall-time limit; None for no limit.
    time_limit_s: float | None = None
    priority: int | None = None
    #: Requested (pending) or allocated (running) node count.
    node_count: int = 1
    tasks: int = 1
    #: Allocated nodes, expanded ("node[1-2]" -> node1, node2); empty while pending.
    nodes: tuple[str, ...] = ()
    #: ReqNodeList as Slurm shows it (expanded); the user's ``-w`` or what asrpt pinned.
    required_nodes: tuple[str, ...] = ()
    #: GRES requested per node (``--gres``, ``--gpus-per-node``).
    gres_per_node: tuple[GresItem, ...] = ()
    #: GRES requested for the whole job (``--gpus``).
    gres_per_job: tuple[GresItem, ...] = ()
    #: GRES requested per task (``--gpus-per-task``).
    gres_per_task: tuple[GresItem, ...] = ()
    #: GRES allocated on each node of ``nodes`` (same order); empty while pending.
    gres_allocated: tuple[tuple[GresItem, ...], ...] = ()
    #: The user's ``--comment`` (the owner can change it: never trust it for anything but hints).
    comment: str = ""
    #: Admin-only comment (asrpt keeps its marker and text here).
    admin_comment: str = ""
    #: Slurm may requeue it: submitted with ``--requeue``, or by the site's ``JobRequeue=1``
    #: default. With ``JobRequeue=0`` this says the user declared the job restartable.
    requeue: bool = False
    #: For a task of a job array: the array's job id (what sbatch printed) and the task id.
    #: ``job_id`` is then ``<array>_<task>``, the same whether Slurm still keeps the task in
    #: the array's one pending record or has split it into a record of its own.
    array_job_id: str = ""
    array_task_id: int | None = None

    @property
    def is_pending(self) -> bool:
        return self.state == PENDING

    @property
    def holds_resources(self) -> bool:
        """Running (or starting, or suspended) and not completing."""
        return self.state in HOLDING_STATES and "COMPLETING" not in self.state_flags

    @property
    def is_held(self) -> bool:
        """Held (by its user, an admin or asrpt): Slurm shows priority 0 and a JobHeld* reason."""
        return self.is_pending and (self.reason.startswith("JobHeld") or self.priority == 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmNode:
    name: str
    #: Base state in upper case: IDLE, MIXED, ALLOCATED, DOWN, ...
    state: str
    #: Flags such as DRAIN, NOT_RESPONDING, MAINTENANCE (upper case).
    state_flags: tuple[str, ...] = ()
    #: Slurm partitions the node belongs to.
    partitions: tuple[str, ...] = ()
    #: Configured GRES.
    gres: tuple[GresItem, ...] = ()
    #: GRES allocated to running jobs.
    gres_used: tuple[GresItem, ...] = ()
    reason: str = ""

    #: States and flags in which Slurm starts nothing new on a node.
    UNAVAILABLE = frozenset({
        "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND",
        "FUTURE", "INVALID", "INVALID_REG", "MAINTENANCE", "MAINT", "POWERED_DOWN", "POWER_DOWN",
        "POWERING_DOWN", "POWERING_UP", "REBOOT_ISSUED", "REBOOT_REQUESTED", "UNKNOWN", "RESERVED",
    })

    @property
    def available(self) -> bool:
        """Whether Slurm may start a new job here (not down, drained, failing or unknown)."""
        return self.state not in self.UNAVAILABLE and not (set(self.state_flags) & self.UNAVAILABLE)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedJob:
    """One job's outcome, from the job completion log or accounting."""

    job_id: str
    user: str
    #: Final state: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ...
    state: str
    end_time_s: float
    #: None when the job never started (cancelled while pending).
    start_time_s: float | None = None
    submit_time_s: float | None = None
    nodes: tuple[str, ...] = ()
    #: The batch script's exit status; None when not known.
    exit_code: int | None = None
    #: Signal that ended it (0 = none).
    signal: int = 0
    name: str = ""
    partition: str = ""
    time_limit_s: float | None = None
    #: "jobcomp" or "sacct".
    source: str = ""

    @property
    def ran(self) -> bool:
        """Whether it ever ran on a node: only then do start/end give a runtime."""
        return self.start_time_s is not None and bool(self.nodes)

    @property
    def runtime_s(self) -> float | None:
        if not self.ran:
            return None
        return max(0.0, self.end_time_s - (self.start_time_s or 0.0))
