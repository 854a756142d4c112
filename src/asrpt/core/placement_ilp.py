"""Exact reference placement by integer programming (scipy.optimize.milp, HiGHS), for small jobs.

Used to judge Heavy-Edge (tests and ``bench/bench_placement.py``), never in the scheduling loop:
it takes milliseconds to seconds where Heavy-Edge takes microseconds.

Model (papers.md A.6): binary y[v,s] = worker v on node s, ``sum_s y[v,s] = 1``,
``sum_v y[v,s] <= free_s``.

* ``objective="cut"`` (default, the paper's reference): z[e,s] <= y[u,s], z[e,s] <= y[v,s]
  (continuous in [0, 1]; integral at the optimum), maximise ``sum w_e z[e,s]``, i.e. minimise the
  cut weight ``sum_e w_e - sum w_e z[e,s]``. Star inequalities (a worker on node s has at most
  free_s - 1 neighbours there, over all edges and over TP edges alone) tighten the LP
  relaxation, which is otherwise 0 for any fractional spread; they cut solve times several-fold.
* ``objective="alpha"``: edge-cut indicators ``x[e] >= y[u,s] - y[v,s]``, binary span indicators
  per collective class (TP groups of stage k, PP boundary k, DP rings) ``span >= x[e]`` over the
  class's edges, and a stage-time
  variable S >= c + T_TP,k(span) + T_PP,k(span); minimise ``(m+p-1) S + T_DP(span)`` (alpha
  exactly, see ``asrpt.core.comm``), with the cut weight as a tiny tie-breaker.

Symmetry: nodes with equal free counts are interchangeable, so worker 0 may only use the first
of each such set (valid: any solution can be relabelled that way).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from asrpt.core.comm import _alpha_from_codes, _cut_from_codes, job_shape, single_node_iteration_time_s
from asrpt.core.model import Job, Node, Partition, Placement
from asrpt.core.speed import SpeedTable

__all__ = ["ilp_place"]


class _Rows:
    """Sparse constraint rows ``lb <= A x <= ub`` built incrementally."""

    def __init__(self) -> None:
        self.data: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.lb: list[float] = []
        self.ub: list[float] = []

    def add(self, coefs: dict[int, float], lb: float, ub: float) -> None:
        r = len(self.lb)
        for c, a in coefs.items():
            self.rows.append(r)
            self.cols.append(c)
            self.data.append(a)
        self.lb.append(lb)
        self.ub.append(ub)

    def constraint(self, n_vars: int) -> LinearConstraint:
        a = coo_array((self.data, (self.rows, self.cols)), shape=(len(self.lb), n_vars)).tocsr()
        return LinearConstraint(a, np.array(self.lb), np.array(self.ub))


def ilp_place(
    job: Job,
    nodes: Sequence[Node],
    partition: Partition,
    speed: SpeedTable,
    time_limit_s: float = 10.0,
    *,
    objective: str = "cut",
) -> Placement | None:
    """Optimal placement of ``job`` on the free accelerators of ``partition``'s nodes in ``nodes``.

    Minimises the cut weight (``objective="cut"``) or alpha (``objective="alpha"``). Meant for
    <= 16 workers on <= 8 nodes; larger inputs work but may hit ``time_limit_s``, in which case the
    best solution found is returned (not proven optimal). None if the job cannot fit.
    """
    if objective not in ("cut", "alpha"):
        raise ValueError(f"objective must be 'cut' or 'alpha', got {objective!r}")
    free = sorted(
        (n for n in nodes if n.partition == partition.name and n.accelerators_free > 0),
        key=lambda n: (-n.accelerators_free, n.name),
    )
    g = job.accelerators
    if sum(n.accelerators_free for n in free) < g:
        return None
    if free[0].accelerators_free >= g:  # one node holds it: cut 0 and all-intra alpha, nothing to solve
        best = min((n for n in free if n.accelerators_free >= g), key=lambda n: (n.accelerators_free, n.name))
        return Placement(job_id=job.job_id, partition=partition.name, worker_nodes=(best.name,) * g,
                         iteration_time_s=single_node_iteration_time_s(job, partition, speed), cut_gb=0.0)

    shape = job_shape(job, speed)
    n_nodes = len(free)
    edges = shape.edges
    n_y = g * n_nodes

    def y(v: int, s: int) -> int:
        return v * n_nodes + s

    rows = _Rows()
    for v in range(g):
        rows.add({y(v, s): 1.0 for s in range(n_nodes)}, 1.0, 1.0)
    for s, node in enumerate(free):
        rows.add({y(v, s): 1.0 for v in range(g)}, 0.0, float(node.accelerators_free))
    # Symmetry: nodes with equal free counts are interchangeable, so worker 0 may use only the
    # first of each run. (Full orbit ordering on every worker was tried: HiGHS got slower.)
    forbidden = []
    for s in range(1, n_nodes):
        if free[s].accelerators_free == free[s - 1].accelerators_free:
            forbidden.append(y(0, s))

    total_w = float(sum(w for _, _, w, _ in edges))
    if objective == "cut":
        # z[e,s] = edge e kept inside node s; maximising sum w_e z[e,s] minimises the cut.
        n_vars = n_y + len(edges) * n_nodes
        cost = np.zeros(n_vars)
        star: dict[tuple[int, int], dict[int, float]] = {}
        for e, (u, v, w, kind) in enumerate(edges):
            for s in range(n_nodes):
                z = n_y + e * n_nodes + s
                cost[z] = -w
                rows.add({z: 1.0, y(u, s): -1.0}, -np.inf, 0.0)
                rows.add({z: 1.0, y(v, s): -1.0}, -np.inf, 0.0)
                star.setdefault((u, s, -1), {})[z] = 1.0
                star.setdefault((v, s, -1), {})[z] = 1.0
                if kind == 0:
                    star.setdefault((u, s, 0), {})[z] = 1.0
                    star.setdefault((v, s, 0), {})[z] = 1.0
        # Star inequalities (tighten the LP a lot): a worker on node s has at most free_s - 1
        # neighbours there.
        for (v, s, _), coefs in star.items():
            room = free[s].accelerators_free - 1
            if len(coefs) > room:
                rows.add({**coefs, y(v, s): -float(room)}, -np.inf, 0.0)
        integrality = np.concatenate([np.ones(n_y), np.zeros(n_vars - n_y)])
    else:
        c_s = speed.step_time_s(job.workload_class, partition.accelerator) / (shape.p * shape.t)
        intra, inter = partition.intra_node_gbps, partition.inter_node_gbps
        p = shape.p
        # variable layout: y | tp_span[k] | pp_span[k] | dp_span | S | edge-cut indicators
        tp0 = n_y
        pp0 = tp0 + p
        dp_var = pp0 + max(p - 1, 0)
        s_var = dp_var + 1
        cut0 = s_var + 1
        n_vars = cut0 + len(edges)
        cost = np.zeros(n_vars)
        cost[s_var] = shape.m + p - 1
        dp_extra = (shape.dp_gb / inter - shape.dp_gb / intra) if shape.d > 1 else 0.0
        cost[dp_var] = dp_extra
        tie = 1e-6 * (c_s / max(total_w, 1e-12))  # cut weight as a tie-breaker far below any alpha step
        tp_i, tp_x = (shape.tp_gb / intra, shape.tp_gb / inter) if shape.t > 1 else (0.0, 0.0)
        pp_i, pp_x = (shape.pp_gb / intra, shape.pp_gb / inter) if p > 1 else (0.0, 0.0)
        for e, (u, v, w, kind) in enumerate(edges):
            cut = cut0 + e
            cost[cut] = tie * w
            k_u = (u // shape.t) % p
            span = {0: tp0 + k_u, 1: pp0 + k_u, 2: dp_var}[kind]
            for s in range(n_nodes):
                # an edge is cut (and its class spans) if its ends differ on any node
                rows.add({cut: 1.0, y(u, s): -1.0, y(v, s): 1.0}, 0.0, np.inf)
            rows.add({span: 1.0, cut: -1.0}, 0.0, np.inf)
        for k in range(p):
            coefs = {s_var: 1.0, tp0 + k: -(tp_x - tp_i)}
            rhs = c_s + tp_i
            if k + 1 < p:
                coefs[pp0 + k] = -(pp_x - pp_i)
                rhs += pp_i
            rows.add(coefs, rhs, np.inf)
        integrality = np.concatenate([np.ones(n_y), np.ones(s_var - n_y), [0.0], np.zeros(len(edges))])
    lower = np.zeros(n_vars)
    upper = np.ones(n_vars)
    if objective == "alpha":
        upper[s_var] = np.inf
    for idx in forbidden:
        upper[idx] = 0.0
    result = milp(
        c=cost,
        constraints=[rows.constraint(n_vars)],
        integrality=integrality,
        bounds=Bounds(lower, upper),
        options={"time_limit": float(time_limit_s), "disp": False},
    )
    if result.x is None:
        return None
    assign = np.asarray(result.x[:n_y]).reshape(g, n_nodes)
    codes = [int(i) for i in assign.argmax(axis=1)]
    c_s = speed.step_time_s(job.workload_class, partition.accelerator) / (shape.p * shape.t)
    return Placement(
        job_id=job.job_id,
        partition=partition.name,
        worker_nodes=tuple(free[c].name for c in codes),
        iteration_time_s=_alpha_from_codes(c_s, shape, codes, partition.intra_node_gbps, partition.inter_node_gbps),
        cut_gb=_cut_from_codes(shape, codes),
    )
