"""Turning an ordered pending queue into starts and holds on the real (heterogeneous) cluster.

Every policy (A-SRPT and the baselines) ends here, so they differ only in the order they hand
over and in what they believe a job's runtime to be; the placement and the rules of the road
(head-of-line, backfill reservations, communication-heavy holds) are the same code.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Callable, Iterable, Iterator, Literal, Mapping, Sequence

from asrpt.core.model import ClusterSnapshot, Job, Node, Partition, Placement, RunningJob
from asrpt.core.placement import PlacementMemo, best_placement
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

    ``strict``: a job that does not fit blocks every later job on the partitions it could use
    (the A-SRPT paper's head-of-line rule, per partition as Slurm's main scheduler blocks them:
    a queue for a100 does not stop a free t4 partition); a later job that may also use an
    unblocked partition is tried there. ``backfill``: the first blocked job gets a reservation
    at the earliest time it fits by predicted runtimes, and later jobs start only when they do
    not delay it.
    ``greedy``: any job that fits starts (list scheduling, no reservation).
    """

    mode: DispatchMode = "backfill"
    #: alpha(best placement now) / alpha_min at or above which a job is communication-heavy.
    comm_heavy_ratio: float = 1.5
    #: A communication-heavy job waits at most tau x its ideal runtime for a better placement.
    comm_heavy_tau: float = 0.1
    #: Jobs examined behind the first blocked one per cycle (every mode), like Slurm's
    #: ``bf_max_job_test``: bounds the cost of a cycle on a very long queue.
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


#: Shortest estimate the doubling rule starts from (an unknown runtime counts as 0).
MIN_ESTIMATE_S = 1.0


def expected_end_s(running: RunningJob, now_s: float, runtime_s: float) -> float:
    """When a running job is expected to end. One that outlived its estimate has the estimate
    doubled until it ends after ``now_s`` (the rule the daemon applies to predictions), so a
    reservation never sits in the past and stays put until some job reaches its expected end."""
    end_s = running.start_time_s + runtime_s
    if end_s > now_s or math.isinf(end_s):
        return end_s
    estimate_s = max(runtime_s, MIN_ESTIMATE_S)
    elapsed_s = now_s - running.start_time_s
    if elapsed_s >= estimate_s:
        estimate_s *= 2.0 ** max(math.floor(math.log2(elapsed_s / estimate_s)), 0)
        while estimate_s <= elapsed_s:
            estimate_s *= 2.0
    return running.start_time_s + estimate_s


class FreeCapacity:
    """Free accelerators per node during one decision; starts are subtracted as they happen.

    Each node is held as a ``Node`` with its current free count (made once per (node, count)
    and reused: few counts recur), so ``nodes()`` for a placement is one tuple of them.
    ``fits`` knows allocation shapes (:class:`~asrpt.core.model.RequestShape`): a job of
    ``n x k`` fits a partition only if ``n`` of its nodes have ``k`` free each, exactly what
    placement will look for, so a job that fits always gets a placement. That question is
    answered from a per-partition histogram (how many nodes have exactly f free), kept up to
    date by every change, so it costs at most a node size's worth of additions.
    """

    def __init__(self, nodes: Sequence[Node], node_variants: dict[str, list[Node | None]] | None = None) -> None:
        """``node_variants``: where to keep the ``Node`` made for each (node, free count), to
        reuse across decisions (a :class:`DispatchMemo`'s); by default this capacity's own."""
        #: Every node with its current free count.
        self._current: dict[str, Node] = {n.name: n for n in nodes}
        #: Per node name, the ``Node`` for each free count made so far (shared by copies);
        #: entry 0 is the node as first seen, to tell a different node of the same name.
        self._variants: dict[str, list[Node | None]] = {} if node_variants is None else node_variants
        self.free_by_partition: dict[str, int] = {}
        #: Per partition, its largest node (the ``s`` derived shapes are worked out for).
        self.node_size: dict[str, int] = {}
        self._members: dict[str, list[str]] = {}
        free_by_partition, node_size, members = self.free_by_partition, self.node_size, self._members
        for n in nodes:
            partition = n.partition
            if partition in members:
                free_by_partition[partition] += n.accelerators_free
                if n.accelerators_total > node_size[partition]:
                    node_size[partition] = n.accelerators_total
                members[partition].append(n.name)
            else:
                free_by_partition[partition] = n.accelerators_free
                node_size[partition] = n.accelerators_total
                members[partition] = [n.name]
        #: Per partition, ``nodes_by_free[partition][f]``: how many of its nodes have f free.
        # (a Node's free count is within 0..its size, so within 0..the partition's node size)
        self._nodes_by_free: dict[str, list[int]] = {name: [0] * (size + 1) for name, size in node_size.items()}
        for n in nodes:
            self._nodes_by_free[n.partition][n.accelerators_free] += 1
        #: Whether ``_nodes_by_free`` is shared with a copy (copied before the first change).
        self._histograms_shared = False
        self.free_total = sum(free_by_partition.values())
        self._cache: tuple[Node, ...] | None = None
        self._allowed: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[str, ...]] = {}
        #: Per (restriction, request shape, accelerators), whether the job fits (until a change).
        self._fits: dict[tuple[object, ...], bool] = {}

    @classmethod
    def of(cls, nodes: tuple[Node, ...], memo: "DispatchMemo | None" = None) -> "FreeCapacity":
        """A fresh capacity for ``nodes``; with a memo, copied from one built once per node
        tuple (the simulator hands the same tuple to every decision until a job starts or
        ends)."""
        if memo is None:
            return cls(nodes)
        cached = memo.capacity
        if cached is None or cached[0] is not nodes:
            built = None if cached is None else cached[1]._changed_to(cached[0], nodes)
            if built is None:
                built = cls(nodes, memo.node_variants)
            if len(built._current) == len(nodes):
                # It holds exactly these node objects in this order: hand out the tuple itself,
                # so placement's grouping of it is shared with the caller's own look-ups.
                built._cache = nodes
            cached = memo.capacity = (nodes, built)
        return cached[1].copy()

    def _changed_to(self, old: tuple[Node, ...], new: tuple[Node, ...]) -> "FreeCapacity | None":
        """The capacity of ``new`` made from this one (of ``old``) by applying the free counts
        that changed (a backend rebuilds its tuple reusing the nodes that did not change);
        None unless ``new`` is ``old``'s nodes in the same order with other free counts."""
        if len(old) != len(new) or len(self._current) != len(old):
            return None  # (the second: names repeat in the tuple; start afresh)
        twin = self.copy()
        for before, after in zip(old, new):
            if before is after:
                continue
            if before.name != after.name or not _same_node(before, after):
                return None
            if before.accelerators_free != after.accelerators_free:
                twin._own_histograms()
                twin._set_free(twin._current[before.name], after.accelerators_free)
            twin._current[after.name] = after
        twin._cache = None
        twin._fits = {}
        twin._allowed = {}  # worked out again against this decision's partitions
        return twin

    def nodes(self) -> tuple[Node, ...]:
        """Every node with its current free count. Busy nodes are kept: placement reads a
        partition's node size from them (derived shapes), and uses only nodes with room."""
        if self._cache is None:
            self._cache = tuple(self._current.values())
        return self._cache

    def node(self, node_name: str) -> Node | None:
        """The node called ``node_name`` with its current free count."""
        return self._current.get(node_name)

    def nodes_with_free(self, partition: str, at_least: int) -> int:
        """How many of ``partition``'s nodes have ``at_least`` accelerators free."""
        histogram = self._nodes_by_free.get(partition)
        return 0 if histogram is None else sum(histogram[at_least:])

    def partition_of(self, node_name: str) -> str | None:
        node = self._current.get(node_name)
        return None if node is None else node.partition

    def allowed_names(self, partitions: Sequence[Partition], job: Job) -> tuple[str, ...]:
        """Names of the partitions ``job`` may use (cached per restriction)."""
        key = (job.allowed_partitions, job.allowed_accelerators)
        names = self._allowed.get(key)
        if names is None:
            names = self._allowed[key] = tuple(p.name for p in partitions if job.allows(p))
        return names

    def fits(self, partitions: Sequence[Partition], job: Job) -> bool:
        """Whether some partition ``job`` allows can hold it now in its request's shape (a
        gang never spans partitions). The answer per (restriction, shape, size) is kept until
        the capacity changes, so a long queue of jobs that cannot start costs a dictionary
        lookup each."""
        shape, parallel = job.request_shape, job.parallel
        # (the shape's fields, not the shape: a frozen dataclass hashes all of them every time)
        key = (job.allowed_partitions, job.allowed_accelerators, shape.nodes, shape.per_node, shape.spread,
               parallel.data * parallel.pipeline * parallel.tensor)
        answer = self._fits.get(key)
        if answer is None:
            answer = self._fits[key] = any(self.fits_in(name, job) for name in self.allowed_names(partitions, job))
        return answer

    def fits_in(self, partition: str, job: Job) -> bool:
        """Whether ``partition`` can hold ``job`` now: enough free for a spread request, else
        ``n`` nodes with ``k`` free each."""
        g = job.parallel.workers
        if self.free_by_partition.get(partition, 0) < g:
            return False
        request = job.request_shape.on(g, self.node_size.get(partition, 0))
        if request is None:
            return True
        n, k = request
        return sum(self._nodes_by_free[partition][k:]) >= n

    def _set_free(self, node: Node, new: int) -> None:
        """Make ``node`` (as currently held) have ``new`` free."""
        old, partition = node.accelerators_free, node.partition
        variants = self._variants.get(node.name)
        if variants is None or not _same_node(variants[0], node):
            variants = self._variants[node.name] = [node] + [None] * (node.accelerators_total + 1)
        current = variants[new + 1]
        if current is None:
            current = variants[new + 1] = replace(node, accelerators_free=new)
        self._current[node.name] = current
        histogram = self._nodes_by_free[partition]
        histogram[old] -= 1
        histogram[new] += 1
        self.free_by_partition[partition] += new - old
        self.free_total += new - old

    def _own_histograms(self) -> None:
        """Copy the histograms before the first change (a copy shares them until then)."""
        if self._histograms_shared:
            self._nodes_by_free = {name: list(counts) for name, counts in self._nodes_by_free.items()}
            self._histograms_shared = False

    def take(self, placement: Placement) -> None:
        self._own_histograms()
        for name, count in placement.node_counts.items():
            node = self._current[name]
            if count > node.accelerators_free:
                raise ValueError(f"placement of {placement.job_id} oversubscribes node {name}")
            self._set_free(node, node.accelerators_free - count)
        self._cache = None
        self._fits.clear()

    def set_free(self, free_by_node: Mapping[str, int]) -> None:
        """Give these nodes exactly these free counts."""
        self._own_histograms()
        for name, count in free_by_node.items():
            node = self._current[name]
            if node.accelerators_free != count:
                self._set_free(node, count)
        self._cache = None
        self._fits.clear()

    def give(self, counts: Mapping[str, int]) -> None:
        self._own_histograms()
        for name, count in counts.items():
            node = self._current.get(name)
            if node is None:
                continue
            self._set_free(node, min(node.accelerators_free + count, node.accelerators_total))
        self._cache = None
        self._fits.clear()

    def capped(self, partition: str, cap_by_node: Mapping[str, int]) -> "FreeCapacity":
        """This capacity with ``partition``'s nodes limited to ``cap_by_node`` (the spare
        accelerators a reservation leaves to jobs that would still run at its start)."""
        twin = self.copy()
        twin._fits = {}
        twin._own_histograms()
        for name in self._members.get(partition, ()):
            node = self._current[name]
            free = node.accelerators_free
            if free <= 0:
                continue  # only nodes with something free can lose anything
            allowed = max(min(free, cap_by_node.get(name, 0)), 0)
            if allowed != free:
                twin._set_free(node, allowed)
                twin._cache = None
        return twin

    def copy(self) -> "FreeCapacity":
        twin = FreeCapacity.__new__(FreeCapacity)
        twin._current = dict(self._current)
        twin._variants = self._variants
        twin.free_by_partition = dict(self.free_by_partition)
        twin.node_size = self.node_size
        twin._members = self._members
        twin._nodes_by_free = self._nodes_by_free
        twin._histograms_shared = True
        self._histograms_shared = True
        twin.free_total = self.free_total
        twin._cache = self._cache
        twin._allowed = self._allowed
        twin._fits = dict(self._fits)
        return twin


def _same_node(a: Node | None, b: Node) -> bool:
    """The same node but for its free count."""
    return (a is not None and a.partition == b.partition and a.accelerator == b.accelerator
            and a.accelerators_total == b.accelerators_total)


class DispatchMemo:
    """What one caller's successive dispatches may reuse: the last walk that started nothing,
    the last reservation, each running job's expected end, the capacity of the last node
    tuple and the ``Node`` made for each (node, free count).

    The caller owns it and passes it in: one per policy instance, one for the simulator's
    Slurm model, so two callers that alternate never evict each other's entries. Every entry
    is used only while the inputs it came from are the same objects (frozen tuples a backend
    reuses while nothing changed) and before anything it depended on expires, so a dispatch
    gives the same answer with a memo as without one (property-tested); the memo only saves
    work.
    """

    __slots__ = ("walk", "reservation", "sorted_ends", "capacity", "node_variants", "placement")

    def __init__(self) -> None:
        self.walk: _Walk | None = None
        #: (inputs, valid until, answer) of the last reservation made with nothing started.
        self.reservation: tuple[tuple[object, ...], float, _Reservation | None] | None = None
        #: Running jobs' expected ends, sorted, for one runtime estimate.
        self.sorted_ends: _SortedEnds | None = None
        #: (node tuple, capacity built from it).
        self.capacity: tuple[tuple[Node, ...], FreeCapacity] | None = None
        self.node_variants: dict[str, list[Node | None]] = {}
        #: Grouping of node tuples for placement.
        self.placement = PlacementMemo()


class _ReservedPlace:
    """Where the blocked head goes at its reserved start: Heavy-Edge on the capacity expected
    then, worked out on first use. Only a backfill candidate that would still be running at
    that time needs it; most reservations are never asked."""

    __slots__ = ("head", "future", "partitions", "speed", "memo", "_result")

    def __init__(self, head: Job, future: FreeCapacity, partitions: Sequence[Partition], speed: SpeedTable,
                 memo: PlacementMemo | None) -> None:
        self.head, self.future, self.partitions, self.speed, self.memo = head, future, partitions, speed, memo
        self._result: tuple[str, dict[str, int]] | None = None

    def result(self) -> tuple[str, dict[str, int]]:
        """(partition, accelerators per node left beside the head there)."""
        if self._result is None:
            placement = best_placement(self.head, self.future.nodes(), self.partitions, self.speed, memo=self.memo)
            assert placement is not None, "a reservation is made only where the head fits"
            spare = {n.name: n.accelerators_free for n in self.future.nodes() if n.partition == placement.partition}
            for name, count in placement.node_counts.items():
                spare[name] -= count
            self._result = (placement.partition, spare)
        return self._result


class _Reservation:
    """The blocked head's promised start: its placement at the shadow time."""

    __slots__ = ("job_id", "start_s", "_place", "_spare")

    def __init__(self, job_id: str, start_s: float, place: _ReservedPlace) -> None:
        self.job_id = job_id
        self.start_s = start_s
        self._place = place
        self._spare: dict[str, int] | None = None

    @property
    def partition(self) -> str:
        return self._place.result()[0]

    @property
    def spare_by_node(self) -> dict[str, int]:
        """Accelerators per node that later jobs may still use without delaying the head
        (this decision's own copy: starts that run past the shadow time take from it)."""
        if self._spare is None:
            self._spare = dict(self._place.result()[1])
        return self._spare

    def copy(self) -> "_Reservation":
        return _Reservation(self.job_id, self.start_s, self._place)


def _reserve(
    head: Job,
    snapshot: ClusterSnapshot,
    free: FreeCapacity,
    started: Sequence[tuple[Placement, float]],
    now_s: float,
    speed: SpeedTable,
    runtime_s: RuntimeEstimate,
    memo: DispatchMemo | None = None,
) -> tuple[_Reservation | None, float]:
    """Earliest start of ``head`` as running jobs end by their estimates (EASY backfill), and
    until when that answer holds if nothing else changes (the first expected end).

    With nothing started yet this decision, the answer depends only on the head, the node and
    running tuples and the estimates, and stays the same until ``now_s`` reaches the first
    expected end: a simulator asks again at every arrival, so the last answer is kept in the
    memo.
    """
    key: tuple[object, ...] | None = None
    if not started and memo is not None:
        key = (head, snapshot.nodes, snapshot.running, speed, runtime_s)
        cached = memo.reservation
        if cached is not None and now_s < cached[1] and _same_inputs(cached[0], key):
            found = cached[2]
            return (None if found is None else found.copy()), cached[1]
    releases = _expected_releases(snapshot.running, now_s, runtime_s, memo)
    if started:
        # After every running job of the same end, in the order they started (a stable sort).
        after = _AFTER_RUNNING
        for i, (p, end_s) in enumerate(started):
            bisect.insort(releases, (end_s, after + i, p.node_counts))
    found: _Reservation | None = None
    # Where best_placement can put the head: allowed partitions of an accelerator we can time.
    placeable = tuple(p.name for p in snapshot.partitions if head.allows(p) and speed.knows(p.accelerator))
    ends = _FirstFit(head, free, placeable)
    for end_s, _, counts in releases:
        if math.isinf(end_s):
            break
        # Placement finds the head a place wherever its partition holds its shape (enough
        # free for a spread request, n nodes with k free for n x k), so the head starts here;
        # where exactly is worked out only if someone asks.
        if ends.returned_fits(counts):
            # Only the head's placeable partitions matter to where it goes (best_placement
            # looks nowhere else), and those are exactly the nodes counted so far.
            future = free.copy()
            future.set_free(ends.node_free)
            found = _Reservation(head.job_id, end_s, _ReservedPlace(head, future, snapshot.partitions, speed,
                                                                                None if memo is None else memo.placement))
            break
    valid_until_s = releases[0][0] if releases else math.inf
    if key is not None and memo is not None:
        memo.reservation = (key, valid_until_s, found)
        if found is not None:
            found = found.copy()
    return found, valid_until_s


class _FirstFit:
    """Accelerators handed back to ``free`` one release at a time, counted only as far as
    ``FreeCapacity.fits_in`` would read them for ``head``: free per partition (capped at each
    node's size, as ``give`` caps) and, for an ``n x k`` request, how many nodes have ``k``
    free. Much cheaper than giving each release back to a copy of the capacity, and the
    same answer; the copy is made once, for the release at which the head fits."""

    __slots__ = ("free", "g", "free_by_partition", "request", "wide_nodes", "node_free")

    def __init__(self, head: Job, free: FreeCapacity, placeable: Sequence[str]) -> None:
        self.free = free
        self.g = head.parallel.workers
        self.free_by_partition = {name: free.free_by_partition.get(name, 0) for name in placeable}
        #: Per placeable partition, the head's request there (None: spread).
        self.request = {name: head.request_shape.on(self.g, free.node_size.get(name, 0)) for name in placeable}
        #: Per partition with an ``n x k`` request, how many of its nodes have ``k`` free.
        self.wide_nodes = {name: free.nodes_with_free(name, request[1])
                           for name, request in self.request.items() if request is not None}
        #: Free count of every node of a placeable partition a release touched so far.
        self.node_free: dict[str, int] = {}

    def returned_fits(self, counts: Mapping[str, int]) -> bool:
        """Hand ``counts`` back; whether the head now fits some placeable partition."""
        free_by_partition, node_free, request_of = self.free_by_partition, self.node_free, self.request
        current = self.free._current
        for name, count in counts.items():
            node = current.get(name)
            if node is None:
                continue
            partition = node.partition
            if partition not in free_by_partition:
                continue
            before = node_free.get(name)
            if before is None:
                before = node.accelerators_free
            after = before + count
            if after > node.accelerators_total:
                after = node.accelerators_total
            node_free[name] = after
            free_by_partition[partition] += after - before
            request = request_of[partition]
            if request is not None and before < request[1] <= after:
                self.wide_nodes[partition] += 1
        g = self.g
        for name, free_there in free_by_partition.items():
            if free_there >= g:
                request = self.request[name]
                if request is None or self.wide_nodes[name] >= request[0]:
                    return True
        return False


def _expected_releases(running: Sequence[RunningJob], now_s: float, runtime_s: RuntimeEstimate,
                       memo: DispatchMemo | None) -> list[tuple[float, int, Mapping[str, int]]]:
    """(expected end, tie-break, accelerators per node) of each running job, as
    ``expected_end_s`` gives, sorted by end and then by place in ``running`` (the tie-break
    numbers only keep that order).

    With a memo the sorted list is kept across decisions (see :class:`_SortedEnds`): the
    running set changes by a job or two between reservations, a job's estimate not at all, and
    its expected end only when reached (the doubled estimate is then the same as worked out
    afresh), so re-sorting ~170 ends per reservation is wasted work.
    """
    if memo is None:
        out = [(expected_end_s(r, now_s, runtime_s(r.job, r.placement.iteration_time_s)), i, r.placement.node_counts)
               for i, r in enumerate(running)]
        out.sort()
        return out
    ends = memo.sorted_ends
    if ends is None or ends.estimate != runtime_s:
        ends = memo.sorted_ends = _SortedEnds(runtime_s)
    return ends.releases(running, now_s)


#: Tie-break numbers of this decision's starts: above any running job's.
_AFTER_RUNNING = 1 << 62


class _SortedEnds:
    """Each running job's expected end, kept sorted across decisions for one runtime estimate.

    Entries are ``(end, sequence, accelerators per node)``; ``sequence`` numbers jobs in the
    order first seen, which is their order in the running tuple as long as a new tuple keeps
    the survivors in order and adds new jobs at the back (a backend's tuple of a dict of running
    jobs does). Any other change is detected and the list is rebuilt, so the order is always
    that of the tuple.
    """

    __slots__ = ("estimate", "running", "ids", "id_order", "entries", "by_sequence", "sorted", "next_sequence")

    def __init__(self, estimate: RuntimeEstimate) -> None:
        self.estimate = estimate
        #: The running tuple last seen (held, so the ids of its jobs are not reused meanwhile).
        self.running: Sequence[RunningJob] = ()
        self.ids: set[int] = set()
        self.id_order: list[int] = []
        #: Per job ``id``: [job, believed runtime, sequence, its current sorted entry].
        self.entries: dict[int, list] = {}
        self.by_sequence: dict[int, list] = {}
        self.sorted: list[tuple[float, int, Mapping[str, int]]] = []
        self.next_sequence = 0

    def releases(self, running: Sequence[RunningJob], now_s: float) -> list[tuple[float, int, Mapping[str, int]]]:
        if running is not self.running:
            self._follow(running, now_s)
        ordered = self.sorted
        if ordered and ordered[0][0] <= now_s:
            self._renew_reached(now_s)
        return list(self.sorted)

    def _follow(self, running: Sequence[RunningJob], now_s: float) -> None:
        """Drop the jobs that left, add the new ones (or rebuild if the order changed). The
        check runs on lists of ids (the old tuple is held, so an id seen in both is the same
        job)."""
        ids = list(map(id, running))
        known = self.ids
        gone = known.difference(ids)
        if gone:
            survivors = list(self.id_order)
            for i in gone:
                survivors.remove(i)
        else:
            survivors = self.id_order
        kept = len(survivors)
        added = ids[kept:]
        if ids[:kept] != survivors or not known.isdisjoint(added) or len(set(added)) != len(added):
            self._rebuild(running, now_s)
            return
        entries, ordered = self.entries, self.sorted
        for i in gone:
            entry = entries.pop(i)
            del self.by_sequence[entry[2]]
            del ordered[bisect.bisect_left(ordered, entry[3][:2])]
        for r in running[kept:]:
            self._add(r, now_s)
        known.difference_update(gone)
        known.update(added)
        self.running, self.id_order = running, ids

    def _rebuild(self, running: Sequence[RunningJob], now_s: float) -> None:
        self.entries, self.by_sequence, self.sorted, self.next_sequence = {}, {}, [], 0
        for r in running:
            self._add(r, now_s)
        self.id_order = list(map(id, running))
        self.running, self.ids = running, set(self.id_order)

    def _add(self, r: RunningJob, now_s: float) -> None:
        runtime = self.estimate(r.job, r.placement.iteration_time_s)
        item = (expected_end_s(r, now_s, runtime), self.next_sequence, r.placement.node_counts)
        self.entries[id(r)] = self.by_sequence[self.next_sequence] = [r, runtime, self.next_sequence, item]
        self.next_sequence += 1
        bisect.insort(self.sorted, item)

    def _renew_reached(self, now_s: float) -> None:
        """Jobs that outlived their expected end get the doubled estimate (moved back in order)."""
        ordered, by_sequence = self.sorted, self.by_sequence
        cut = bisect.bisect_right(ordered, (now_s, _AFTER_RUNNING))
        reached = ordered[:cut]
        del ordered[:cut]
        for _, sequence, counts in reached:
            entry = by_sequence[sequence]
            item = (expected_end_s(entry[0], now_s, entry[1]), sequence, counts)
            entry[3] = item
            bisect.insort(ordered, item)


def _same_inputs(old: tuple[object, ...], new: tuple[object, ...]) -> bool:
    """The same head, node tuple, running tuple and speed table (by identity: frozen objects a
    backend reuses while nothing changed) and an equal runtime estimate (a bound method of
    the same policy compares equal)."""
    return all(a is b for a, b in zip(old[:-1], new[:-1])) and old[-1] == new[-1]


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
    memo: DispatchMemo | None = None,
) -> DispatchResult:
    """Walk ``queue`` (most urgent first) and decide what starts now and what is held.

    Jobs the walk never reaches (behind a strict head, or once the cluster is full) get no
    reason: their place in the order is the reason. ``first_blocked_s`` remembers when each
    communication-heavy job was first held; the caller keeps it between cycles (it is part of
    the policy state).

    ``memo`` (the caller's, kept between calls; see :class:`DispatchMemo`) only saves work.
    With it, a walk that started nothing is remembered: asked again with the same node and
    running tuples, the same jobs at the front of the queue and before anything it depended
    on expires (a hold's deadline, the reservation's first expected end), it gives the same
    answer without walking. A simulator asks at every arrival, and an arrival that joins the
    back of a long queue changes nothing.
    """
    last = memo.walk if memo is not None else None
    queue = iter(queue)
    if last is not None and now_s < last.valid_until_s and last.same_inputs(snapshot, options, speed, runtime_s):
        pulled: list[Job] = []
        for expected in last.examined:
            job = next(queue, None)
            if job is None:
                break
            pulled.append(job)
            if job is not expected:
                break
        else:
            # All the same so far; a walk that ran out of queue must run out again.
            extra = None if last.stopped_early else next(queue, None)
            if extra is None:
                return last.replay()
            pulled.append(extra)
        queue = chain(pulled, queue)
    result, examined, stopped_early, valid_until_s = _walk(
        queue, snapshot, now_s, speed=speed, options=options, runtime_s=runtime_s,
        alpha_min_s=alpha_min_s, first_blocked_s=first_blocked_s, memo=memo,
    )
    if memo is not None:
        memo.walk = None if result.starts else _Walk(
            snapshot.nodes, snapshot.running, options, speed, runtime_s,
            tuple(examined), stopped_early, min(valid_until_s, result.wake_at_s), result,
        )
    return result


@dataclass(slots=True)
class _Walk:
    """A remembered walk that started nothing (see ``dispatch``)."""

    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...]
    options: DispatchOptions
    speed: SpeedTable
    runtime_s: RuntimeEstimate
    #: Every job the walk looked at, in order.
    examined: tuple[Job, ...]
    #: Whether the walk stopped before the end of the queue (full cluster, backfill depth).
    stopped_early: bool
    valid_until_s: float
    result: DispatchResult

    def same_inputs(self, snapshot: ClusterSnapshot, options: DispatchOptions, speed: SpeedTable,
                    runtime_s: RuntimeEstimate) -> bool:
        return (
            snapshot.nodes is self.nodes
            and snapshot.running is self.running
            and options is self.options
            and speed is self.speed
            and runtime_s == self.runtime_s
        )

    def replay(self) -> DispatchResult:
        again = DispatchResult(
            holds=list(self.result.holds),
            wake_at_s=self.result.wake_at_s,
            accelerators_free_after=self.result.accelerators_free_after,
        )
        again.reasons.merge(self.result.reasons)
        return again


def _walk(
    queue: Iterator[Job],
    snapshot: ClusterSnapshot,
    now_s: float,
    *,
    speed: SpeedTable,
    options: DispatchOptions,
    runtime_s: RuntimeEstimate,
    alpha_min_s: Callable[[Job], float],
    first_blocked_s: dict[str, float],
    memo: DispatchMemo | None,
) -> tuple[DispatchResult, list[Job], bool, float]:
    """The walk itself; also returns the jobs it examined, whether it stopped before the end
    of the queue, and until when its reservation holds."""
    result = DispatchResult()
    free = FreeCapacity.of(snapshot.nodes, memo)
    placement_memo = None if memo is None else memo.placement
    started: list[tuple[Placement, float]] = []
    reservation: _Reservation | None = None
    #: ``free`` with the reservation's accelerators taken out: what a job that would still be
    #: running at the reserved start may use (rebuilt after each start).
    around_reservation: FreeCapacity | None = None
    blocked_head: Job | None = None
    reserve_tried = False
    examined_behind_head = 0
    examined: list[Job] = []
    valid_until_s = math.inf
    stopped_early = False
    strict = options.mode == "strict"
    #: strict: partitions some job that could not start could use; a later job that could use
    #: one of them waits behind it (Slurm's main scheduler blocks partitions, not the queue).
    blocked_partitions: set[str] = set()
    every_partition = len(snapshot.partitions)

    def waits(job: Job, position: int) -> bool:
        """Note that ``job`` cannot start now; it becomes the blocked head if it is the first.
        In strict mode it blocks its partitions; True once every partition is blocked."""
        nonlocal blocked_head
        result.reasons.note(job.job_id, "waiting for {} accelerators (queue position {})", job.accelerators, position + 1)
        if blocked_head is None:
            blocked_head = job
        if not strict:
            return False
        blocked_partitions.update(free.allowed_names(snapshot.partitions, job))
        return len(blocked_partitions) >= every_partition

    for position, job in enumerate(queue):
        if blocked_head is not None:
            if examined_behind_head >= options.backfill_depth:
                stopped_early = True
                break  # everything further back waits; `asrpt explain` derives that from the order
            examined_behind_head += 1
        if free.free_total <= 0:
            stopped_early = True
            break  # nothing more can start this cycle
        examined.append(job)
        if blocked_partitions:
            # Like a job Slurm queues in several partitions: tried only where nothing ahead waits.
            usable = free.allowed_names(snapshot.partitions, job)
            if not blocked_partitions.isdisjoint(usable):
                open_names = tuple(name for name in usable if name not in blocked_partitions)
                if not open_names:
                    continue
                job = replace(job, allowed_partitions=open_names)
        if not free.fits(snapshot.partitions, job):
            if waits(job, position):
                stopped_early = True
                break  # every partition waits for a job ahead
            continue
        if (
            blocked_head is not None
            and options.mode == "backfill"
            and not reserve_tried
            and runtime_s(job, alpha_min_s(job)) > 0.0
        ):
            # Reserve for the head only now that a later job could start (often none can) and
            # could still run when the head might start (a job believed to take no time ends
            # before any running job's expected end, hence before any reservation).
            reserve_tried = True
            reservation, valid_until_s = _reserve(blocked_head, snapshot, free, started, now_s, speed, runtime_s, memo)
            if reservation is not None:
                result.reasons.note(
                    blocked_head.job_id,
                    "waiting for {0} accelerators; reserved on {1.partition} from t={1.start_s:.0f}s",
                    blocked_head.accelerators,
                    reservation,
                )
        capacity = free
        if reservation is not None and now_s + runtime_s(job, alpha_min_s(job)) > reservation.start_s:
            if around_reservation is None:
                around_reservation = free.capped(reservation.partition, reservation.spare_by_node)
            capacity = around_reservation
        placement = best_placement(job, capacity.nodes(), snapshot.partitions, speed, memo=placement_memo) if capacity.fits(snapshot.partitions, job) else None
        if placement is None:
            if capacity is not free and reservation is not None:
                result.reasons.note(job.job_id, "would delay the reserved start of {}", reservation.job_id)
            elif waits(job, position):
                stopped_early = True
                break
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
    return result, examined, stopped_early, valid_until_s

