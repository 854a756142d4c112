"""Heavy-Edge placement of a gang job onto free accelerators of one partition, and the choice of partition.

Heavy-Edge (papers.md A.6, reconstructed): take the fewest nodes that can hold the job, glue
workers together along the heaviest edges of the job graph (union-find, a group never larger
than the biggest free node), put groups on nodes largest-first and best-fit, and split a
group that fits nowhere by gluing it again under the space that is left. Its cost is the cut
weight; its quality is alpha(x) from ``asrpt.core.comm``.

Two additions of ours, both measured in ``bench/bench_placement.py``: (1) besides the bytes
order we also glue in the order alpha cares about (what a spanning collective costs per
iteration; collectives too big to stay whole last) and in the remaining kind orders, stopping
early once a candidate reaches the exact lower bound (``alpha_aware=False`` turns this off),
and (2) when the fewest nodes force a glued group apart we also try spreading whole groups
over all free nodes. The candidate with the smallest alpha wins (then the smaller cut, then
fewer nodes).

Allocation shapes: a job starts only in a shape Slurm would allocate for its request
(:class:`~asrpt.core.model.RequestShape`). A fixed or derived shape ``n x k`` takes the ``n``
nodes of the partition with the least free that still holds ``k`` (then by name, close to
cons_tres's best fit) and maps the workers onto them with the same Heavy-Edge glue under
capacities ``(k,) * n``; ``n == 1`` is the closed-form single node. Only a spread request
(``--gpus`` alone) gets the free-form search above. Because the mapping onto ``n x k`` does not
depend on which nodes were chosen, a shaped job's alpha is the same wherever it starts, and
that is its alpha_min (:func:`alpha_min_s`).

These functions run per pending job per scheduling event in an 80k-job replay, so the common
cases never touch networkx: a job that fits on one node is placed best-fit in closed form, and
the multi-node path works on the cached, pre-sorted edge list of the job's shape.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from typing import Sequence

from asrpt.core.comm import (
    JobShape,
    _alpha_from_codes,
    _cut_from_codes,
    ideal_iteration_time_s,
    job_shape,
    single_node_iteration_time_s,
)
from asrpt.core.model import Job, Node, Partition, Placement
from asrpt.core.speed import SpeedTable

__all__ = ["heavy_edge_place", "best_placement", "alpha_min_s", "PlacementMemo"]


class _PartitionView:
    """Per-partition facts of one node tuple: free nodes, free total, largest and total size."""

    __slots__ = ("free_nodes", "free_total", "largest", "total", "sizes", "_fit_keys", "_fit_nodes")

    def __init__(self) -> None:
        self.free_nodes: list[Node] = []
        self.free_total = 0
        #: The partition's node size (largest node given, busy or not): what derived shapes use.
        self.largest = 0
        self.total = 0
        #: Accelerators of every node given, busy or not (for alpha_min of shaped jobs).
        self.sizes: list[int] = []
        self._fit_keys: list[tuple[int, str]] | None = None
        self._fit_nodes: list[Node] = []

    def best_fit(self, g: int) -> Node | None:
        """The node with the smallest free count >= g (then the smallest name), by bisection."""
        if self._fit_keys is None:
            ordered = sorted(self.free_nodes, key=lambda n: (n.accelerators_free, n.name))
            self._fit_keys = [(n.accelerators_free, n.name) for n in ordered]
            self._fit_nodes = ordered
        i = bisect.bisect_left(self._fit_keys, (g, ""))
        return self._fit_nodes[i] if i < len(self._fit_nodes) else None

    def best_fits(self, k: int, n: int) -> list[Node] | None:
        """The ``n`` nodes with the least free counts >= k (then by name), or None if fewer."""
        if self.best_fit(k) is None:  # also builds the sorted keys
            return None
        i = bisect.bisect_left(self._fit_keys, (k, ""))  # type: ignore[arg-type]
        if len(self._fit_nodes) - i < n:
            return None
        return self._fit_nodes[i:i + n]


class PlacementMemo:
    """What one caller's successive placements may reuse: the grouping of the last node tuple,
    and the parts of it that do not depend on free counts (which nodes, partitions and sizes).

    The caller owns it (a :class:`~asrpt.core.dispatch.DispatchMemo` holds one) and passes it
    in; without one every call groups its nodes afresh. A policy asks about many pending jobs
    against the same tuple, and consecutive tuples differ only in free counts, so a new tuple
    costs one pass over its free nodes. Entries are used only for the very tuple (frozen nodes
    in a tuple cannot change) or, for the static part, after checking every node's name,
    partition and size, so a memo never changes an answer.
    """

    __slots__ = ("nodes", "views", "layout", "static", "position_of", "positions", "single")

    def __init__(self) -> None:
        #: (the last node tuple, its views).
        self.nodes: object = None
        self.views: dict[str, _PartitionView] = {}
        #: (name, partition, size) of every node of the tuple ``static`` was made for.
        self.layout: list[tuple[str, str, int]] | None = None
        #: Per partition (in first-seen order): (total, largest, sizes).
        self.static: dict[str, tuple[int, int, list[int]]] = {}
        #: Per node object checked against ``layout``, by ``id``: (its position there, the node,
        #: held so the id is not reused). A tuple whose every node is known at its own position
        #: has the layout without looking at each node again.
        self.position_of: dict[int, tuple[int, Node]] = {}
        self.positions: list[int] = []
        #: The one partition, if the layout has only one.
        self.single: str | None = None

    def has_layout(self, nodes: Sequence[Node]) -> bool:
        """Whether ``nodes`` are the layout's nodes, in order, with any free counts."""
        layout = self.layout
        if layout is None or len(nodes) != len(layout):
            return False
        position_of = self.position_of
        found = [entry[0] if entry is not None else -1 for entry in map(position_of.get, map(id, nodes))]
        if found == self.positions:
            return True
        if len(position_of) > 16 * len(layout) + 1024:
            position_of.clear()  # a backend that makes new nodes every time: start again
        for i, node in enumerate(nodes):
            if found[i] != i:
                if _LAYOUT(node) != layout[i]:
                    return False
                position_of[id(node)] = (i, node)
        return True


_LAYOUT = operator.attrgetter("name", "partition", "accelerators_total")


def _views(nodes: Sequence[Node], memo: PlacementMemo | None = None) -> dict[str, _PartitionView]:
    """Group ``nodes`` by partition (once per distinct tuple, with a memo)."""
    if memo is None:
        return _group(nodes)
    if memo.nodes is nodes:
        return memo.views
    if not memo.has_layout(nodes):
        views = _group(nodes)
        memo.layout = list(map(_LAYOUT, nodes))
        memo.static = {name: (view.total, view.largest, view.sizes) for name, view in views.items()}
        memo.position_of = {id(node): (i, node) for i, node in enumerate(nodes)}
        memo.positions = list(range(len(nodes)))
        memo.single = next(iter(views)) if len(views) == 1 else None
    else:
        views = {}
        for name, (total, largest, sizes) in memo.static.items():
            view = views[name] = _PartitionView()
            view.total, view.largest, view.sizes = total, largest, sizes
        if memo.single is not None:
            view = views[memo.single]
            view.free_nodes = [node for node in nodes if node.accelerators_free > 0]
            view.free_total = sum(map(_FREE, view.free_nodes))
        else:
            for node in nodes:
                free = node.accelerators_free
                if free > 0:
                    view = views[node.partition]
                    view.free_nodes.append(node)
                    view.free_total += free
    if isinstance(nodes, tuple):
        memo.nodes, memo.views = nodes, views
    return views


_FREE = operator.attrgetter("accelerators_free")


def _group(nodes: Sequence[Node]) -> dict[str, _PartitionView]:
    views: dict[str, _PartitionView] = {}
    for node in nodes:
        view = views.get(node.partition)
        if view is None:
            view = views[node.partition] = _PartitionView()
        view.total += node.accelerators_total
        view.sizes.append(node.accelerators_total)
        if node.accelerators_total > view.largest:
            view.largest = node.accelerators_total
        if node.accelerators_free > 0:
            view.free_nodes.append(node)
            view.free_total += node.accelerators_free
    return views


def heavy_edge_place(
    job: Job, nodes: Sequence[Node], partition: Partition, speed: SpeedTable, *, alpha_aware: bool = True,
    memo: PlacementMemo | None = None,
) -> Placement | None:
    """Heavy-Edge placement of ``job`` on the free accelerators of ``partition``'s nodes in ``nodes``.

    Gang: every worker gets an accelerator or the result is None (too few free accelerators).
    Nodes of other partitions are ignored; no node gets more workers than it has free. Whether
    the job *may* use the partition is the caller's business (see :func:`best_placement`).
    ``alpha_aware=False`` glues in bytes order only (the paper's cut-minimising Heavy-Edge):
    smaller cuts, sometimes a much larger alpha. Unknown workload class or accelerator:
    ``KeyError`` from the speed table.
    """
    view = _views(nodes, memo).get(partition.name)
    if view is None:
        return None
    return _place(job, partition, speed, view, alpha_aware)


def _place(job: Job, partition: Partition, speed: SpeedTable, view: _PartitionView,
           alpha_aware: bool = True) -> Placement | None:
    """Heavy-Edge on the free nodes of ``view`` (one partition of one node tuple)."""
    g = job.accelerators
    if view.free_total < g:
        return None
    request = job.request_shape.on(g, view.largest)
    if request is not None:
        return _place_shaped(job, partition, speed, view, request, alpha_aware)
    best = view.best_fit(g)
    if best is not None:
        return Placement(
            job_id=job.job_id,
            partition=partition.name,
            worker_nodes=(best.name,) * g,
            iteration_time_s=single_node_iteration_time_s(job, partition, speed),
            cut_gb=0.0,
        )
    shape = job_shape(job, speed)
    ordered = sorted(view.free_nodes, key=lambda n: (-n.accelerators_free, n.name))
    total, count = 0, 0
    for node in ordered:
        total += node.accelerators_free
        count += 1
        if total >= g:
            break
    c_s = speed.step_time_s(job.workload_class, partition.accelerator) / (job.parallel.pipeline * job.parallel.tensor)
    # No placement on these nodes beats the exact ideal for nodes as large as the largest free
    # count: the search stops as soon as a candidate reaches it (usually the first one does).
    largest_free = ordered[0].accelerators_free
    floor_s = ideal_iteration_time_s(job, partition, largest_free, speed) * (1 + 1e-12)
    counts = tuple(n.accelerators_free for n in ordered)
    alpha_s, cut_gb, codes, spread = _search(shape, partition, c_s, floor_s, counts, count, alpha_aware)
    chosen = ordered if spread else ordered[:count]
    return Placement(
        job_id=job.job_id,
        partition=partition.name,
        worker_nodes=tuple(chosen[c].name for c in codes),
        iteration_time_s=alpha_s,
        cut_gb=cut_gb,
    )


def _place_shaped(job: Job, partition: Partition, speed: SpeedTable, view: _PartitionView,
                  request: tuple[int, int], alpha_aware: bool) -> Placement | None:
    """``job`` on exactly ``n`` nodes with ``k`` each (``request``), best fit, or None."""
    n, k = request
    if n == 1:
        best = view.best_fit(k)
        if best is None:
            return None
        return Placement(job_id=job.job_id, partition=partition.name, worker_nodes=(best.name,) * k,
                         iteration_time_s=single_node_iteration_time_s(job, partition, speed), cut_gb=0.0)
    chosen = view.best_fits(k, n)
    if chosen is None:
        return None
    alpha_s, cut_gb, codes = _shaped(job, partition, speed, n, k, alpha_aware)
    return Placement(job_id=job.job_id, partition=partition.name,
                     worker_nodes=tuple(chosen[c].name for c in codes), iteration_time_s=alpha_s, cut_gb=cut_gb)


def _shaped(job: Job, partition: Partition, speed: SpeedTable, n: int, k: int,
            alpha_aware: bool = True) -> tuple[float, float, tuple[int, ...]]:
    """Heavy-Edge of ``job`` onto ``n`` empty nodes of ``k``: alpha, cut, node index per worker.

    The same whichever ``n`` nodes are chosen, so also the job's alpha_min on ``partition``.
    """
    c_s = speed.step_time_s(job.workload_class, partition.accelerator) / (job.parallel.pipeline * job.parallel.tensor)
    return _shaped_search(job_shape(job, speed), partition, c_s, ideal_iteration_time_s(job, partition, k, speed),
                          n, k, alpha_aware)


@functools.lru_cache(maxsize=16384)
def _shaped_search(shape: JobShape, partition: Partition, c_s: float, ideal_s: float, n: int, k: int,
                   alpha_aware: bool) -> tuple[float, float, tuple[int, ...]]:
    """The best Heavy-Edge mapping onto ``n x k``. Cached on purpose: a pure function of small
    immutable, hashable arguments, asked for the same few again and again; a bounded cache of
    such cannot change an answer."""
    # The exact ideal for nodes of k is a floor: no placement on n x k beats it (bin packing
    # can make it unreachable, e.g. three 4-wide TP groups on 2 x 6, then every order is tried).
    alpha_s, cut_gb, codes, _ = _search(shape, partition, c_s, ideal_s * (1 + 1e-12), (k,) * n, n, alpha_aware)
    return alpha_s, cut_gb, codes


def _search(shape: JobShape, partition: Partition, c_s: float, floor_s: float, counts: tuple[int, ...],
            count: int, alpha_aware: bool) -> tuple[float, float, tuple[int, ...], bool]:
    """The multi-node search on free counts ``counts`` (largest first; the first ``count`` are
    the fewest nodes that hold the job): alpha, cut, node index per worker, and whether the
    indices are into all free nodes (spread) rather than the fewest.

    Glue orders: heaviest bytes first (the classic Heavy-Edge), then, if alpha_aware, the
    other kind orders (see _kind_orders). For each, the fewest nodes first; only if a glued
    group had to be split there, also spread whole groups best-fit over every free node.
    Keep the smallest alpha, then the smallest cut, then fewer nodes.
    """
    best: tuple[float, float, int, tuple[int, ...], bool] | None = None
    best_spread = False
    orders = _kind_orders(shape, counts[0])
    for kinds in orders if alpha_aware else orders[:1]:
        for spread in (False, True):
            capacities = counts if spread else counts[:count]
            alpha, cut, used, codes, split = _evaluate(shape, kinds, capacities, counts[0], c_s,
                                                       partition.intra_node_gbps, partition.inter_node_gbps)
            if best is None or (alpha, cut, used) < best[:3]:
                best, best_spread = (alpha, cut, used, codes, split), spread
            if not split or count == len(counts):
                break
        if best[0] <= floor_s:
            break
    assert best is not None
    return best[0], best[1], best[3], best_spread


@functools.lru_cache(maxsize=65536)
def _evaluate(shape: JobShape, kinds: tuple[int, ...], capacities: tuple[int, ...], cap: int, c_s: float,
              intra_gbps: float, inter_gbps: float) -> tuple[float, float, int, tuple[int, ...], bool]:
    """One Heavy-Edge candidate: glue along ``kinds`` under ``cap``, place on ``capacities``;
    alpha, cut, nodes used, node index per worker, whether a glued group was split.

    It depends on free counts, never on node names, so it is cached: a replay asks the same
    question about the same shape of job on the same shape of free space over and over (pure,
    on immutable arguments, so the cache cannot change an answer).
    """
    edges = _edges_in_order(shape, kinds)
    glued = _coarsen(shape, range(shape.workers), cap, edges)
    codes, split = _heavy_edge_codes(shape, capacities, edges, glued)
    alpha = _alpha_from_codes(c_s, shape, codes, intra_gbps, inter_gbps)
    return alpha, _cut_from_codes(shape, codes), len(set(codes)), tuple(codes), split


def _kind_orders(shape: JobShape, cap: int) -> list[tuple[int, ...]]:
    """Orders in which to glue edge kinds (0 TP, 1 PP, 2 DP), present kinds only.

    First by bytes per edge (Heavy-Edge proper: minimises the cut). Second by what alpha pays
    when a collective of that kind spans nodes, with kinds whose collective cannot fit in
    ``cap`` (the largest free count) last: alpha charges a spanning collective once, however
    many nodes it touches, so gluing most of a DP ring that must span anyway only steals room
    from TP groups that could stay whole. Then every other order (at most 6 in all), again with
    collectives that cannot fit last: alpha's max over stages means e.g. cutting every PP
    boundary can cost no more than cutting one, which no single fixed order anticipates.
    """
    present = [k for k in range(3) if shape.edges_by_kind[k]]
    by_bytes = tuple(sorted(present, key=lambda k: (-shape.edges_by_kind[k][0][2], k)))
    by_alpha = tuple(sorted(present, key=lambda k: (shape.collective_size[k] > cap, -shape.span_penalty[k], k)))
    orders = [by_bytes]
    if by_alpha != by_bytes:
        orders.append(by_alpha)
    for perm in itertools.permutations(present):
        fits_first = tuple(sorted(perm, key=lambda k: shape.collective_size[k] > cap))
        if fits_first not in orders:
            orders.append(fits_first)
    return orders


@functools.lru_cache(maxsize=4096)
def _edges_in_order(shape: JobShape, kinds: tuple[int, ...]) -> tuple[tuple[int, int, float, int], ...]:
    """A shape's edges in the order of ``kinds``. Cached on purpose: a pure function of small
    immutable, hashable arguments, asked for the same few again and again; a bounded cache of
    such cannot change an answer."""
    return tuple(e for k in kinds for e in shape.edges_by_kind[k])


def _coarsen(shape: JobShape, members: Sequence[int], cap: int,
             edges: Sequence[tuple[int, int, float, int]]) -> list[list[int]]:
    """Union-find over ``members`` along ``edges`` in order; no group grows beyond ``cap``."""
    g = shape.workers
    inside = bytearray(g)
    for v in members:
        inside[v] = 1
    parent = list(range(g))
    size = [1] * g
    budget = len(members) - 1  # merges left before everything is one group
    for u, v, _, _ in edges:
        if not (inside[u] and inside[v]):
            continue
        a = u
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        b = v
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b and size[a] + size[b] <= cap:
            if b < a:
                a, b = b, a
            parent[b] = a
            size[a] += size[b]
            budget -= 1
            if budget == 0:
                break
    groups: dict[int, list[int]] = {}
    for v in members:
        root = v
        while parent[root] != root:
            root = parent[root]
        groups.setdefault(root, []).append(v)
    return list(groups.values())


def _heavy_edge_codes(shape: JobShape, capacities: Sequence[int], edges: Sequence[tuple[int, int, float, int]],
                      glued: Sequence[Sequence[int]]) -> tuple[list[int], bool]:
    """Node index per worker, and whether a glued group had to be split.

    ``capacities`` are the free counts of candidate nodes (sum >= workers, the largest first);
    node indices double as the tie-break order (the caller sorts nodes by free desc, then
    name). ``glued`` is the coarsening of all workers under the largest capacity.
    """
    remaining = list(capacities)
    codes = [-1] * shape.workers
    pending = [list(group) for group in glued]
    split = False
    while pending:
        pending.sort(key=lambda grp: (-len(grp), grp[0]))
        group = pending.pop(0)
        size = len(group)
        target = -1
        for s, room in enumerate(remaining):  # best fit: least room that still holds the group
            if room >= size and (target < 0 or room < remaining[target]):
                target = s
        if target >= 0:
            for v in group:
                codes[v] = target
            remaining[target] -= size
            continue
        # Fits nowhere: glue it again under the largest space left, cutting its lightest edges.
        split = True
        pending.extend(_coarsen(shape, group, max(remaining), edges))
    return codes, split


def best_placement(
    job: Job, nodes: Sequence[Node], partitions: Sequence[Partition], speed: SpeedTable, *, alpha_aware: bool = True,
    memo: PlacementMemo | None = None,
) -> Placement | None:
    """The Heavy-Edge placement with the smallest alpha over the partitions ``job`` may use.

    Partitions whose accelerator the speed table does not know are skipped. Ties go to fewer
    nodes, then the partition name. None when no allowed partition has room now.
    ``alpha_aware`` as in :func:`heavy_edge_place`; ``memo`` (the caller's) only saves work.
    """
    views = _views(nodes, memo)
    g = job.accelerators
    candidates: list[tuple[float, str, Partition, _PartitionView]] = []
    for partition in partitions:
        view = views.get(partition.name)
        if view is None or view.free_total < g:
            continue
        if not job.allows(partition) or not speed.knows(partition.accelerator):
            continue
        # alpha never drops below the all-intra closed form: a lower bound to prune with.
        candidates.append((single_node_iteration_time_s(job, partition, speed), partition.name, partition, view))
    candidates.sort(key=lambda c: (c[0], c[1]))
    best: Placement | None = None
    best_key: tuple[float, int, str] | None = None
    for lower_bound, _, partition, view in candidates:
        if best_key is not None and lower_bound > best_key[0]:
            break
        placement = _place(job, partition, speed, view, alpha_aware)
        if placement is None:
            continue
        key = (placement.iteration_time_s, len(set(placement.worker_nodes)), partition.name)
        if best_key is None or key < best_key:
            best, best_key = placement, key
    return best


def alpha_min_s(job: Job, partitions: Sequence[Partition], nodes: Sequence[Node], speed: SpeedTable,
                memo: PlacementMemo | None = None) -> float:
    """alpha_min: the best per-iteration time the job could ever get on the partitions it may use.

    Per allowed partition (known accelerator, busy or not) that can hold the job's shape: for a
    shaped request ``n x k`` (fixed or derived), the alpha of its placement on ``n`` empty nodes
    of ``k`` (which is the alpha it gets on any ``n`` nodes with ``k`` free; the partition needs
    ``n`` nodes of at least ``k``); for a spread request, the exact ideal alpha on empty nodes as
    large as the largest node (at least g accelerators in total). ``math.inf`` if no partition
    qualifies: the job can never start. ``memo`` (the caller's) only saves work.
    """
    views = _views(nodes, memo)
    g = job.accelerators
    best = math.inf
    for partition in partitions:
        view = views.get(partition.name)
        if view is None or view.total < g or view.largest < 1:
            continue
        if not job.allows(partition) or not speed.knows(partition.accelerator):
            continue
        request = job.request_shape.on(g, view.largest)
        if request is None:
            best = min(best, ideal_iteration_time_s(job, partition, view.largest, speed))
            continue
        n, k = request
        if sum(1 for size in view.sizes if size >= k) < n:
            continue
        if n == 1:
            best = min(best, single_node_iteration_time_s(job, partition, speed))
        else:
            best = min(best, _shaped(job, partition, speed, n, k)[0])
    return best
