"""A job's communication graph and its per-iteration time alpha(x) under a placement.

Reconstructed model (docs: papers.md A.6/A.7; our choices, not the paper's text):

* Worker ``(r, k, j)`` = DP replica r, PP stage k, TP rank j; worker id ``(r*p + k)*t + j``.
* Per stage k the model is split evenly: compute per micro-batch ``c = step_time_s / (p*t)``;
  TP all-reduce payload per micro-batch ``V/p``; parameters ``P/p``; the activation crossing a
  stage boundary is ``A`` (sharded over the t TP ranks, Megatron-style).
* Times per micro-batch: ``T_TP = 2(t-1)/t * (V/p) / B``, ``T_PP = (A/t) / B``;
  per iteration ``T_DP = 2(d-1)/d * (P/p)/t / B``. B is the partition's intra-node bandwidth if
  every member of the collective (TP group, PP pair, DP ring) sits on one node, else the
  inter-node bandwidth. NIC sharing between concurrent flows is not modelled.
* ``alpha = (m + p - 1) * max_k (c + T_TP,k + T_PP,k) + T_DP`` (GPipe/1F1B bubble; the last
  stage sends nothing forward; gradient sync is not overlapped).
* Edge weights (GB per iteration): TP pair ``2 m (V/p) / t``, PP pair ``2 m A / t`` (activations
  forward and gradients backward), DP ring edge ``2(d-1)/d * (P/p)/t``. The cut weight is the
  sum over edges whose ends sit on different nodes.

Everything expensive is cached per (speed table, workload class, parallel layout); a placement
on one node is evaluated in closed form without touching a graph.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import networkx as nx
import numpy as np

from asrpt.core.model import Job, ParallelConfig, Partition
from asrpt.core.speed import SpeedTable

__all__ = [
    "JobShape",
    "job_graph",
    "job_shape",
    "iteration_time_s",
    "ideal_iteration_time_s",
    "single_node_iteration_time_s",
    "cut_weight_gb",
]

#: Edge kinds, in the order ties between equal weights are broken (heavier kind first).
KINDS = ("tp", "pp", "dp")

#: Cap on per-stage choices the exact ideal search enumerates (2**12); beyond it, uniform choices.
_MAX_STAGE_CHOICES = 4096


@dataclass(frozen=True, slots=True, eq=False)
class JobShape:
    """Accelerator-independent structure of a (workload class, parallel layout): sizes and edges."""

    d: int
    p: int
    t: int
    m: int
    #: TP all-reduce payload per worker per micro-batch per stage, GB (0 when t == 1).
    tp_gb: float
    #: Activation each sender ships to the next stage per micro-batch, GB (0 when p == 1).
    pp_gb: float
    #: DP all-reduce payload per worker per iteration, GB (0 when d == 1).
    dp_gb: float
    #: Edges (u, v, weight_gb, kind index into KINDS), heaviest first, ties TP < PP < DP then ids.
    edges: tuple[tuple[int, int, float, int], ...]
    #: The same edges per kind (TP, PP, DP), by vertex ids; every edge of one kind weighs the same.
    edges_by_kind: tuple[tuple[tuple[int, int, float, int], ...], ...]
    #: Per kind, what alpha pays per (inverse-bandwidth unit) when such a collective spans nodes:
    #: (m+p-1)*tp_gb, (m+p-1)*pp_gb, dp_gb. Bytes rank kinds for the cut; this ranks them for alpha.
    span_penalty: tuple[float, float, float]
    #: Workers one collective of each kind glues together: t, 2, d.
    collective_size: tuple[int, int, int]
    #: For the ideal search: spanning-tree edges per TP group of stage k (all replicas).
    tp_chain_by_stage: tuple[tuple[tuple[int, int], ...], ...]
    #: PP pairs of boundary k -> k+1 (all replicas and ranks).
    pp_pairs_by_boundary: tuple[tuple[tuple[int, int], ...], ...]
    #: Spanning-tree edges of every DP ring.
    dp_chain: tuple[tuple[int, int], ...]

    @property
    def workers(self) -> int:
        return self.d * self.p * self.t


def _wid(r: int, k: int, j: int, p: int, t: int) -> int:
    return (r * p + k) * t + j


@functools.lru_cache(maxsize=16384)
def _shape(speed: SpeedTable, workload_class: str, parallel: ParallelConfig) -> JobShape:
    """The communication facts of one (workload class, parallel config). Cached on purpose: a
    pure function of small immutable, hashable arguments, asked for the same few again and
    again; a bounded cache of such cannot change an answer."""
    prof = speed.profile(workload_class)
    d, p, t, m = parallel.data, parallel.pipeline, parallel.tensor, parallel.micro_batches
    v_stage_gb = prof.tp_allreduce_gb_per_microbatch / p
    p_stage_gb = prof.params_gb / p
    a_gb = prof.activation_gb_per_microbatch
    tp_gb = 2.0 * (t - 1) / t * v_stage_gb if t > 1 else 0.0
    pp_gb = a_gb / t if p > 1 else 0.0
    dp_gb = 2.0 * (d - 1) / d * p_stage_gb / t if d > 1 else 0.0

    w_tp = 2.0 * m * v_stage_gb / t
    w_pp = 2.0 * m * a_gb / t
    w_dp = dp_gb
    edges: list[tuple[int, int, float, int]] = []
    tp_chain: list[list[tuple[int, int]]] = [[] for _ in range(p)]
    pp_pairs: list[list[tuple[int, int]]] = [[] for _ in range(max(p - 1, 0))]
    dp_chain: list[tuple[int, int]] = []
    for r in range(d):
        for k in range(p):
            for j in range(t):
                u = _wid(r, k, j, p, t)
                for j2 in range(j + 1, t):
                    edges.append((u, _wid(r, k, j2, p, t), w_tp, 0))
                if j + 1 < t:
                    tp_chain[k].append((u, u + 1))
                if k + 1 < p:
                    v = _wid(r, k + 1, j, p, t)
                    edges.append((u, v, w_pp, 1))
                    pp_pairs[k].append((u, v))
    for k in range(p):
        for j in range(t):
            ring = [_wid(r, k, j, p, t) for r in range(d)]
            dp_chain.extend(zip(ring, ring[1:]))
            if d == 2:
                edges.append((ring[0], ring[1], w_dp, 2))
            elif d > 2:
                for a, b in zip(ring, ring[1:] + ring[:1]):
                    edges.append((min(a, b), max(a, b), w_dp, 2))
    edges.sort(key=lambda e: (-e[2], e[3], e[0], e[1]))
    by_kind = tuple(tuple(sorted(e for e in edges if e[3] == kind)) for kind in range(len(KINDS)))
    bubble = m + p - 1
    return JobShape(
        d=d, p=p, t=t, m=m, tp_gb=tp_gb, pp_gb=pp_gb, dp_gb=dp_gb,
        edges=tuple(edges),
        edges_by_kind=by_kind,
        span_penalty=(bubble * tp_gb, bubble * pp_gb, dp_gb),
        collective_size=(t, 2, d),
        tp_chain_by_stage=tuple(tuple(c) for c in tp_chain),
        pp_pairs_by_boundary=tuple(tuple(c) for c in pp_pairs),
        dp_chain=tuple(dp_chain),
    )


def job_shape(job: Job, speed: SpeedTable) -> JobShape:
    """The cached accelerator-independent structure of ``job`` (sizes, sorted weighted edges)."""
    return _shape(speed, speed.canonical_class(job.workload_class), job.parallel)


@functools.lru_cache(maxsize=1024)
def _graph(speed: SpeedTable, workload_class: str, parallel: ParallelConfig) -> nx.Graph:
    """The networkx graph of one job shape (slow paths only). Cached on purpose: a pure function
    of small immutable, hashable arguments, asked for the same few again and again; a bounded
    cache of such cannot change an answer."""
    shape = _shape(speed, workload_class, parallel)
    graph = nx.Graph()
    graph.add_nodes_from(range(shape.workers))
    graph.add_edges_from((u, v, {"weight_gb": w, "kind": KINDS[kind]}) for u, v, w, kind in shape.edges)
    return nx.freeze(graph)


def job_graph(job: Job, speed: SpeedTable) -> nx.Graph:
    """Worker graph of ``job``: vertex per worker id, edges with ``weight_gb`` and ``kind``.

    The graph is cached per (workload class, parallel layout) and frozen: copy it
    (``nx.Graph(g)``) before modifying.
    """
    return _graph(speed, speed.canonical_class(job.workload_class), job.parallel)


def _alpha(
    c_s: float, shape: JobShape, intra_gbps: float, inter_gbps: float,
    tp_span: Sequence[bool], pp_span: Sequence[bool], dp_span: bool,
) -> float:
    """alpha from which collectives span nodes: ``tp_span[k]``, ``pp_span[k]`` (k < p-1), DP any."""
    worst = 0.0
    for k in range(shape.p):
        stage = c_s
        if shape.t > 1:
            stage += shape.tp_gb / (inter_gbps if tp_span[k] else intra_gbps)
        if k + 1 < shape.p:
            stage += shape.pp_gb / (inter_gbps if pp_span[k] else intra_gbps)
        worst = max(worst, stage)
    dp_s = shape.dp_gb / (inter_gbps if dp_span else intra_gbps) if shape.d > 1 else 0.0
    return (shape.m + shape.p - 1) * worst + dp_s


def _compute_per_microbatch_s(job: Job, accelerator: str, speed: SpeedTable) -> float:
    par = job.parallel
    return speed.step_time_s(job.workload_class, accelerator) / (par.pipeline * par.tensor)


@functools.lru_cache(maxsize=65536)
def _single_node(speed: SpeedTable, workload_class: str, parallel: ParallelConfig,
                 accelerator: str, intra_gbps: float) -> float:
    """alpha with every worker on one node. Cached on purpose: a pure function of small
    immutable, hashable arguments, asked for the same few again and again; a bounded cache of
    such cannot change an answer."""
    step = speed.step_time_s(workload_class, accelerator)
    c_s = step / (parallel.pipeline * parallel.tensor)
    if parallel.workers == 1:
        return parallel.micro_batches * c_s
    shape = _shape(speed, workload_class, parallel)
    p = shape.p
    return _alpha(c_s, shape, intra_gbps, intra_gbps, (False,) * p, (False,) * max(p - 1, 0), False)


def single_node_iteration_time_s(job: Job, partition: Partition, speed: SpeedTable) -> float:
    """alpha with every collective inside one node (closed form, cached); a lower bound on any alpha."""
    return _single_node(speed, speed.canonical_class(job.workload_class), job.parallel,
                        speed.canonical_accelerator(partition.accelerator), partition.intra_node_gbps)


def _codes(worker_nodes: Sequence[str]) -> list[int]:
    index: dict[str, int] = {}
    return [index.setdefault(name, len(index)) for name in worker_nodes]


def _alpha_from_codes(c_s: float, shape: JobShape, codes: Sequence[int],
                      intra_gbps: float, inter_gbps: float) -> float:
    arr = np.asarray(codes, dtype=np.int64).reshape(shape.d, shape.p, shape.t)
    tp_span = (arr.min(axis=2) != arr.max(axis=2)).any(axis=0) if shape.t > 1 else (False,) * shape.p
    pp_span = (arr[:, :-1, :] != arr[:, 1:, :]).any(axis=(0, 2)) if shape.p > 1 else ()
    dp_span = bool((arr.min(axis=0) != arr.max(axis=0)).any()) if shape.d > 1 else False
    return _alpha(c_s, shape, intra_gbps, inter_gbps, tp_span, pp_span, dp_span)


def _cut_from_codes(shape: JobShape, codes: Sequence[int]) -> float:
    return math.fsum(w for u, v, w, _ in shape.edges if codes[u] != codes[v])


def cut_weight_gb(job: Job, worker_nodes: Sequence[str], speed: SpeedTable) -> float:
    """GB per iteration crossing nodes under ``worker_nodes`` (0 on one node)."""
    if len(worker_nodes) != job.accelerators:
        raise ValueError(f"job {job.job_id}: {len(worker_nodes)} worker nodes for {job.accelerators} workers")
    if len(set(worker_nodes)) <= 1:
        return 0.0
    return _cut_from_codes(job_shape(job, speed), _codes(worker_nodes))


def iteration_time_s(job: Job, worker_nodes: Sequence[str], partition: Partition, speed: SpeedTable) -> float:
    """alpha(x): seconds per training iteration of ``job`` with worker i on ``worker_nodes[i]``.

    Single-node placements (and one-worker jobs) use the cached closed form; spread placements
    check which TP groups, PP pairs and DP rings cross nodes (see the module docstring).
    """
    if len(worker_nodes) != job.accelerators:
        raise ValueError(f"job {job.job_id}: {len(worker_nodes)} worker nodes for {job.accelerators} workers")
    if len(set(worker_nodes)) <= 1:
        return single_node_iteration_time_s(job, partition, speed)
    c_s = _compute_per_microbatch_s(job, partition.accelerator, speed)
    return _alpha_from_codes(c_s, job_shape(job, speed), _codes(worker_nodes),
                             partition.intra_node_gbps, partition.inter_node_gbps)


def _fits(shape: JobShape, n: int, tp_intact: Sequence[bool], pp_intact: Sequence[bool], dp_intact: bool) -> bool:
    """Whether every group the intact collectives glue together has at most ``n`` workers."""
    parent = list(range(shape.workers))
    size = [1] * shape.workers

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pairs: list[tuple[int, int]] = []
    for k in range(shape.p):
        if tp_intact[k]:
            pairs.extend(shape.tp_chain_by_stage[k])
        if k + 1 < shape.p and pp_intact[k]:
            pairs.extend(shape.pp_pairs_by_boundary[k])
    if dp_intact:
        pairs.extend(shape.dp_chain)
    for u, v in pairs:
        a, b = find(u), find(v)
        if a != b:
            if size[a] + size[b] > n:
                return False
            if size[a] < size[b]:
                a, b = b, a
            parent[b] = a
            size[a] += size[b]
    return True


@functools.lru_cache(maxsize=65536)
def _ideal(speed: SpeedTable, workload_class: str, parallel: ParallelConfig, accelerator: str,
           intra_gbps: float, inter_gbps: float, n: int) -> float:
    """The exact ideal alpha on empty nodes of ``n``. Cached on purpose: a pure function of
    small immutable, hashable arguments, asked for the same few again and again; a bounded cache
    of such cannot change an answer."""
    if parallel.workers <= n:
        return _single_node(speed, workload_class, parallel, accelerator, intra_gbps)
    shape = _shape(speed, workload_class, parallel)
    p = shape.p
    c_s = speed.step_time_s(workload_class, accelerator) / (p * shape.t)
    tp = (shape.tp_gb / intra_gbps, shape.tp_gb / inter_gbps) if shape.t > 1 else (0.0, 0.0)
    pp = (shape.pp_gb / intra_gbps, shape.pp_gb / inter_gbps) if p > 1 else (0.0, 0.0)
    dp_costs = [(False, shape.dp_gb / inter_gbps if shape.d > 1 else 0.0)]
    if shape.d > 1:
        dp_costs.append((True, shape.dp_gb / intra_gbps))
    # (tp spans, pp spans) -> extra stage seconds; the last stage only has the TP part.
    combos = {(a, b): tp[a] + pp[b] for a in (0, 1) for b in (0, 1)}
    last = {(a, 0): tp[a] for a in (0, 1)}
    levels = sorted(set(combos.values()) | set(last.values()))
    candidates = sorted(
        ((shape.m + p - 1) * (c_s + level) + dp_s, level, dp_intact)
        for level in levels for dp_intact, dp_s in dp_costs
    )
    for alpha, level, dp_intact in candidates:
        options: list[list[tuple[int, int]]] = []
        for k in range(p):
            table = combos if k + 1 < p else last
            allowed = [c for c, cost in table.items() if cost <= level]
            maximal = [c for c in allowed if not any(o != c and o[0] >= c[0] and o[1] >= c[1] for o in allowed)]
            options.append(maximal)
        if any(not o for o in options):
            continue
        n_choices = math.prod(len(o) for o in options)
        if n_choices <= _MAX_STAGE_CHOICES:
            choices = itertools.product(*options)
        else:  # uniform choices only: an achievable (not always minimal) value for very deep pipelines
            choices = iter([tuple(o[min(i, len(o) - 1)] for o in options) for i in range(2)])
        for choice in choices:
            tp_intact = [not c[0] for c in choice]
            pp_intact = [not c[1] for c in choice]
            if _fits(shape, n, tp_intact, pp_intact, dp_intact):
                return alpha
    # Unreachable: with everything spanning the groups are single workers.
    raise AssertionError("ideal search found no feasible span pattern")


def ideal_iteration_time_s(job: Job, partition: Partition, accelerators_per_node: int, speed: SpeedTable) -> float:
    """alpha_min on ``partition``: the best placement on empty nodes of ``accelerators_per_node``.

    One node when the job fits in one. Otherwise the exact minimum of alpha over all placements
    on enough empty nodes of that size: alpha depends only on which TP groups, PP boundaries and
    DP rings cross nodes, so we try those span patterns cheapest first and keep the first whose
    intact collectives glue no more than ``accelerators_per_node`` workers together. This is never
    above the Heavy-Edge placement on the same empty nodes, so alpha(x) >= alpha_min holds for
    every placement on nodes no larger. Cached.
    """
    if accelerators_per_node < 1:
        raise ValueError(f"accelerators_per_node must be >= 1, got {accelerators_per_node}")
    return _ideal(speed, speed.canonical_class(job.workload_class), job.parallel,
                  speed.canonical_accelerator(partition.accelerator),
                  partition.intra_node_gbps, partition.inter_node_gbps, accelerators_per_node)
