"""Turning an ordered pending queue into starts and holds on the real (heterogeneous) cluster.

Every policy (A-SRPT and the baselines) ends here, so they differ only in the order they hand
over and in what they believe a job's runtime to be; the placement and the rules of the road
(head-of-line, backfill reservations, communication-heavy holds) are the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Literal, Mapping, Sequence

from asrpt.core.model import ClusterSnapshot, Job, Node, Partition, Placement, RunningJob
from asrpt.core.placement import best_placement
from asrpt.core.reasons import Reasons
from asrpt.core.speed import SpeedTable

DispatchMode = Literal["strict", "backfill", "greedy"]
DISPATCH_MODES: tuple[str, ...] = ("strict", "backfill", "greedy")

#: ``runtime_s(job, iteration_time_s)`` -> what the policy believes the job will run, seconds;
#: ``math.inf`` when it cannot say (such a job never backfills in front of a reservation).
RuntimeEstimate = Callable[[Job, float], float]


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchOptions:
    """Rules the dispatcher applies to the queue it is given.

    ``strict``: the first job that does not fit blocks everything behind it (the A-SRPT paper's
    analysed algorithm). ``backfill``: the first blocked job gets a reservation at the earliest
    time it fits by predicted runtimes, and later jobs start only when they do not delay it.
    ``greedy``: any job that fits starts (list scheduling, no reservation).
    """

    mode: DispatchMode = "backfill"
    #: alpha(best placement now) / alpha_min at or above which a job is communication-heavy.
    comm_heavy_ratio: float = 1.5
    #: A communication-heavy job waits at most tau x its ideal runtime for a better placement.
    comm_heavy_tau: float = 0.1
    #: Jobs examined behind the first blocked one per cycle (backfill and greedy), like
    #: Slurm's ``bf_max_job_test``: bounds the cost of a cycle on a very long queue.
    backfill_depth: int = 100

    def __post_init__(self) -> None:
        if self.mode not in DISPATCH_MODES:
            raise ValueError(f"dispatch mode {self.mode!r} is not one of {', '.join(DISPATCH_MODES)}")
        if self.comm_heavy_ratio < 1.0:
            raise ValueError(f"comm_heavy_ratio must be >= 1, got {self.comm_heavy_ratio}")
        if self.comm_heavy_tau < 0.0:
            raise ValueError(f"comm_heavy_tau must be >= 0, got {self.comm_heavy_tau}")
        if self.backfill_depth < 0:
            raise ValueError(f"backfill_depth must be >= 0, got {self.backfill_depth}")


@dataclass(slots=True)
class DispatchResult:
    starts: list[Placement] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)
    reasons: Reasons = field(default_factory=Reasons)
    #: Earliest time a hold expires (the policy must be asked again then).
    wake_at_s: float = math.inf
    #: Accelerators still free once the starts are made.
    accelerators_free_after: int = 0


def expected_end_s(running: RunningJob, now_s: float, runtime_s: float) -> float:
    """When a running job is expected to end; one that outlived its estimate gets its elapsed
    time again (the doubling rule), so reservations never sit in the past."""
    end_s = running.start_time_s + runtime_s
    if end_s <= now_s:
        end_s = now_s + max(now_s - running.start_time_s, 1.0)
    return end_s


class FreeCapacity:
    """Free accelerators per node during one decision; starts are subtracted as they happen."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self._nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.free_by_partition: dict[str, int] = {}
        for n in nodes:
            self.free_by_partition[n.partition] = self.free_by_partition.get(n.partition, 0) + n.accelerators_free
        self.free_total = sum(self.free_by_partition.values())
        self._cache: tuple[Node, ...] | None = None
        self._allowed: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...]] = {}
        #: Per restriction, the smallest gang that found no room (valid until capacity grows).
        self._misfits: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}

    def nodes(self) -> tuple[Node, ...]:
        """Nodes with at least one free accelerator (the only ones placement can use)."""
        if self._cache is None:
            self._cache = tuple(n for n in self._nodes.values() if n.accelerators_free > 0)
        return self._cache

    def _allowed_names(self, partitions: Sequence[Partition], job: Job) -> tuple[str, ...]:
        key = (job.allowed_partitions, job.allowed_accelerators)
        names = self._allowed.get(key)
        if names is None:
            names = self._allowed[key] = tuple(p.name for p in partitions if job.allows(p))
        return names

    def fits(self, partitions: Sequence[Partition], job: Job) -> bool:
        """Whether some partition ``job`` allows has ``job.accelerators`` free (a gang never
        spans partitions). Remembers the smallest size that did not fit per restriction, so a
        long queue of jobs that cannot start costs a dictionary lookup each."""
        key = (job.allowed_partitions, job.allowed_accelerators)
        g = job.accelerators
        smallest_misfit = self._misfits.get(key)
        if smallest_misfit is not None and g >= smallest_misfit:
            return False
        free = self.free_by_partition
        if any(free.get(name, 0) >= g for name in self._allowed_names(partitions, job)):
            return True
        self._misfits[key] = g
        return False

    def take(self, placement: Placement) -> None:
        for name, count in placement.node_counts.items():
            node = self._nodes[name]
            if count > node.accelerators_free:
                raise ValueError(f"placement of {placement.job_id} oversubscribes node {name}")
            self._nodes[name] = replace(node, accelerators_free=node.accelerators_free - count)
            self.free_by_partition[node.partition] -= count
            self.free_total -= count
        self._cache = None

    def give(self, counts: Mapping[str, int]) -> None:
        for name, count in counts.items():
            node = self._nodes.get(name)
            if node is None:
                continue
            freed = min(node.accelerators_free + count, node.accelerators_total)
            self.free_by_partition[node.partition] += freed - node.accelerators_free
            self.free_total += freed - node.accelerators_free
            self._nodes[name] = replace(node, accelerators_free=freed)
        self._cache = None
        self._misfits.clear()

    def capped(self, partition: str, cap_by_node: Mapping[str, int]) -> "FreeCapacity":
        """This capacity with ``partition``'s nodes limited to ``cap_by_node`` (the spare
        accelerators a reservation leaves to jobs that would still run at its start)."""
        twin = self.copy()
        for name, node in self._nodes.items():
            if node.partition == partition:
                allowed = max(min(node.accelerators_free, cap_by_node.get(name, 0)), 0)
                if allowed != node.accelerators_free:
                    twin._nodes[name] = replace(node, accelerators_free=allowed)
                    twin.free_by_partition[partition] -= node.accelerators_free - allowed
                    twin.free_total -= node.accelerators_free - allowed
        return twin

    def copy(self) -> "FreeCapacity":
        twin = FreeCapacity(())
        twin._nodes = dict(self._nodes)
        twin.free_by_partition = dict(self.free_by_partition)
        twin.free_total = self.free_total
        twin._allowed = self._allowed
        twin._misfits = dict(self._misfits)
        return twin


@dataclass(slots=True)
class _Reservation:
    """The blocked head's promised start: its placement at the shadow time."""

    job_id: str
    start_s: float
    partition: str
    #: Accelerators per node that later jobs may still use without delaying the head.
    spare_by_node: dict[str, int]


def _reserve(
    head: Job,
    snapshot: ClusterSnapshot,
    free: FreeCapacity,
    started: Sequence[tuple[Placement, float]],
    now_s: float,
    speed: SpeedTable,
    runtime_s: RuntimeEstimate,
) -> _Reservation | None:
    """Earliest start of ``head`` as running jobs end by their estimates (EASY backfill)."""
    releases: list[tuple[float, dict[str, int]]] = [
        (expected_end_s(r, now_s, runtime_s(r.job, r.placement.iteration_time_s)), r.placement.node_counts)
        for r in snapshot.running
    ]
    releases += [(end_s, p.node_counts) for p, end_s in started]
    releases.sort(key=lambda item: item[0])
    future = free.copy()
    for end_s, counts in releases:
        if math.isinf(end_s):
            break
        future.give(counts)
        if not future.fits(snapshot.partitions, head):
            continue
        placement = best_placement(head, future.nodes(), snapshot.partitions, speed)
        if placement is not None:
            spare = {n.name: n.accelerators_free for n in future.nodes() if n.partition == placement.partition}
            for name, count in placement.node_counts.items():
                spare[name] -= count
            return _Reservation(head.job_id, end_s, placement.partition, spare)
    return None


def _delays_reservation(placement: Placement, end_s: float, reservation: _Reservation) -> bool:
    """A start delays the head if it still runs at the shadow time on accelerators the head needs."""
    if end_s <= reservation.start_s or placement.partition != reservation.partition:
        return False
    return any(count > reservation.spare_by_node.get(name, 0) for name, count in placement.node_counts.items())


def dispatch(
    queue: Iterable[Job],
    snapshot: ClusterSnapshot,
    now_s: float,
    *,
    speed: SpeedTable,
    options: DispatchOptions,
    runtime_s: RuntimeEstimate,
    alpha_min_s: Callable[[Job], float],
    first_blocked_s: dict[str, float],
) -> DispatchResult:
    """Walk ``queue`` (most urgent first) and decide what starts now and what is held.

    Jobs the walk never reaches (behind a strict head, or once the cluster is full) get no
    reason: their place in the order is the reason. ``first_blocked_s`` remembers when each communication-heavy job was first held; the
    caller keeps it between cycles (it is part of the policy state).
    """
    result = DispatchResult()
    free = FreeCapacity(snapshot.nodes)
    started: list[tuple[Placement, float]] = []
    reservation: _Reservation | None = None
    #: ``free`` with the reservation's accelerators taken out: what a job that would still be
    #: running at the reserved start may use (rebuilt after each start).
    around_reservation: FreeCapacity | None = None
    blocked_head: Job | None = None
    reserve_tried = False
    examined_behind_head = 0
    for position, job in enumerate(queue):
        if blocked_head is not None:
            if options.mode == "strict" or examined_behind_head >= options.backfill_depth:
                break  # everything further back waits; `asrpt explain` derives that from the order
            examined_behind_head += 1
        if free.free_total <= 0:
            break  # nothing more can start this cycle
        if not free.fits(snapshot.partitions, job):
            result.reasons.note(job.job_id, "waiting for {} accelerators (queue position {})", job.accelerators, position + 1)
            if blocked_head is None:
                blocked_head = job
            continue
        if blocked_head is not None and options.mode == "backfill" and not reserve_tried:
            # Reserve for the head only now that a later job could start (often none can).
            reserve_tried = True
            reservation = _reserve(blocked_head, snapshot, free, started, now_s, speed, runtime_s)
            if reservation is not None:
                result.reasons.note(
                    blocked_head.job_id,
                    "waiting for {} accelerators; reserved on {} from t={:.0f}s",
                    blocked_head.accelerators,
                    reservation.partition,
                    reservation.start_s,
                )
        capacity = free
        if reservation is not None and now_s + runtime_s(job, alpha_min_s(job)) > reservation.start_s:
            if around_reservation is None:
                around_reservation = free.capped(reservation.partition, reservation.spare_by_node)
            capacity = around_reservation
        placement = best_placement(job, capacity.nodes(), snapshot.partitions, speed) if capacity.fits(snapshot.partitions, job) else None
        if placement is None:
            if capacity is not free and reservation is not None:
                result.reasons.note(job.job_id, "would delay the reserved start of {}", reservation.job_id)
            else:
                result.reasons.note(job.job_id, "waiting for {} accelerators (queue position {})", job.accelerators, position + 1)
                if blocked_head is None:
                    blocked_head = job
            continue
        ideal_s = alpha_min_s(job)
        ratio = placement.iteration_time_s / ideal_s if ideal_s > 0 else 1.0
        if ratio >= options.comm_heavy_ratio and options.comm_heavy_tau > 0:
            ideal_runtime_s = runtime_s(job, ideal_s)
            first_s = first_blocked_s.setdefault(job.job_id, now_s)
            deadline_s = first_s + options.comm_heavy_tau * ideal_runtime_s
            if now_s < deadline_s:
                result.holds.append(job.job_id)
                result.wake_at_s = min(result.wake_at_s, deadline_s)
                result.reasons.note(
                    job.job_id,
                    "communication-heavy: best placement now is {:.2f}x its ideal per-iteration time; "
                    "held until t={:.0f}s for a consolidated placement",
                    ratio,
                    deadline_s,
                )
                continue
        end_s = now_s + runtime_s(job, placement.iteration_time_s)
        if reservation is not None and _delays_reservation(placement, end_s, reservation):
            result.reasons.note(job.job_id, "would delay the reserved start of {}", reservation.job_id)
            continue
        free.take(placement)
        around_reservation = None
        if reservation is not None and placement.partition == reservation.partition and end_s > reservation.start_s:
            for name, count in placement.node_counts.items():
                reservation.spare_by_node[name] -= count
        started.append((placement, end_s))
        result.starts.append(placement)
        first_blocked_s.pop(job.job_id, None)
        result.reasons.note(
            job.job_id,
            "starts now on {} ({} node(s), {:.2f}x ideal per-iteration time)",
            placement.partition,
            len(placement.node_counts),
            ratio,
        )
    result.accelerators_free_after = free.free_total
    return result

