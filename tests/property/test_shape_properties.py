"""Every start of every policy has the shape Slurm would allocate for the job's request.

Random clusters (partitions of one node size each, some nodes busy), random jobs with fixed,
derived and spread requests, all policies: each decision's starts are checked against the
snapshot it was made on: gang (one worker per accelerator), one allowed partition, no node
oversubscribed (starts of one decision together), and for a shaped request ``n x k`` exactly
``n`` distinct nodes with ``k`` workers each.
"""

from __future__ import annotations

import math
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asrpt.core.dispatch import FreeCapacity
from asrpt.core.model import DERIVED, SPREAD, Job, Node, ParallelConfig, Partition, RequestShape
from asrpt.core.placement import alpha_min_s, best_placement
from asrpt.core.policies import POLICIES, make_policy
from asrpt.core.speed import default_speed_table
from asrpt.sim.cluster import SimCluster
from asrpt.sim.engine import simulate
from asrpt.sim.metrics import policy_metrics
from asrpt.sim.predictors import GroupHistoryPredictions
from tests.helpers import WrappedPolicy

SPEED = default_speed_table()
CLASSES = SPEED.workload_classes


@st.composite
def clusters(draw, busy: bool = False):
    partitions, nodes = [], []
    for index, accelerator in enumerate(draw(st.lists(st.sampled_from(["a100", "v100", "t4"]), min_size=1, max_size=2, unique=True))):
        name = f"p{index}"
        partitions.append(Partition(name=name, accelerator=accelerator))
        per_node = draw(st.sampled_from([2, 4, 8]))
        for n in range(draw(st.integers(1, 5))):
            free = draw(st.integers(0, per_node)) if busy else per_node
            nodes.append(Node(name=f"{name}-{n}", partition=name, accelerator=accelerator,
                              accelerators_total=per_node, accelerators_free=free))
    return partitions, nodes


@st.composite
def requests(draw, g: int) -> RequestShape:
    kind = draw(st.sampled_from(["derived", "spread", "fixed"]))
    if kind == "derived":
        return DERIVED
    if kind == "spread":
        return SPREAD
    n = draw(st.sampled_from([d for d in range(1, g + 1) if g % d == 0]))
    return RequestShape(nodes=n, per_node=g // n)


LAYOUTS = [(1, 1, 1), (2, 1, 1), (1, 1, 2), (4, 1, 1), (2, 1, 2), (1, 2, 2), (2, 2, 1), (8, 1, 1),
           (3, 1, 2), (2, 2, 4), (4, 1, 4)]


@st.composite
def job_list(draw, partitions, count=st.integers(1, 12)):
    jobs = []
    names = [p.name for p in partitions]
    for i in range(draw(count)):
        d, p, t = draw(st.sampled_from(LAYOUTS))
        iterations = draw(st.floats(1.0, 3000.0))
        jobs.append(Job(
            job_id=str(i),
            submit_time_s=draw(st.floats(0.0, 1000.0)),
            parallel=ParallelConfig(data=d, pipeline=p, tensor=t, micro_batches=2 if p > 1 else 1),
            workload_class=draw(st.sampled_from(CLASSES)),
            group=f"g{draw(st.integers(0, 3))}",
            allowed_partitions=tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True))),
            true_iterations=iterations,
            predicted_iterations=draw(st.one_of(st.none(), st.floats(0.0, 3000.0))),
            request_shape=draw(requests(d * p * t)),
        ))
    return jobs


def check_shape(job: Job, placement, partitions, nodes) -> None:
    """The placement is a gang of ``job`` in one allowed partition, in the request's shape."""
    by_name = {n.name: n for n in nodes}
    part = next(p for p in partitions if p.name == placement.partition)
    assert job.allows(part)
    assert len(placement.worker_nodes) == job.accelerators
    assert all(by_name[name].partition == part.name for name in placement.node_counts)
    size = max(n.accelerators_total for n in nodes if n.partition == part.name)
    request = job.request_shape.on(job.accelerators, size)
    if request is not None:
        n, k = request
        assert len(placement.node_counts) == n
        assert set(placement.node_counts.values()) == {k}


class Checked(WrappedPolicy):
    """A policy whose every decision is checked against the snapshot it was made on."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.starts = 0

    def decide(self, snapshot, now_s, state):
        decision = self.inner.decide(snapshot, now_s, state)
        free = {n.name: n.accelerators_free for n in snapshot.nodes}
        for running in snapshot.running:
            if running.job.job_id in decision.preempts:
                for name, count in running.placement.node_counts.items():
                    free[name] += count
        pending = {j.job_id: j for j in snapshot.pending}
        for placement in decision.starts:
            check_shape(pending[placement.job_id], placement, snapshot.partitions, snapshot.nodes)
            for name, count in placement.node_counts.items():
                free[name] -= count
                assert free[name] >= 0, f"{placement.job_id} oversubscribes {name}"
            self.starts += 1
        return decision


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), policy_name=st.sampled_from(sorted(POLICIES)))
def test_every_start_of_every_policy_has_the_jobs_shape(data, policy_name):
    partitions, nodes = data.draw(clusters())
    jobs = [j for j in data.draw(job_list(partitions)) if not math.isinf(alpha_min_s(j, partitions, nodes, SPEED))]
    if not jobs:
        return
    policy = Checked(make_policy(policy_name, SPEED))
    by_id = {j.job_id: j for j in jobs}
    filled = []
    plain_apply = SimCluster.apply

    def checked_apply(cluster, decision):
        """The jobs Slurm starts on its own (sim/slurmctld.py) must have their shape too."""
        plain_apply(cluster, decision)
        for placement in cluster.last_fills:
            check_shape(by_id[placement.job_id], placement, partitions, nodes)
            filled.append(placement.job_id)

    with mock.patch.object(SimCluster, "apply", checked_apply):
        result = simulate(jobs, partitions, nodes, policy, GroupHistoryPredictions())
    policy_metrics(result)  # every job ends: a shape that fits an empty cluster is always found
    assert policy.starts + len(filled) >= len(jobs)
    for job in jobs:
        record = result.records[job.job_id]
        ideal_s = job.true_iterations * alpha_min_s(job, partitions, nodes, SPEED)
        assert record.end_s - job.submit_time_s >= ideal_s * (1 - 1e-9)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fits_and_placement_agree_on_busy_clusters(data):
    """``FreeCapacity.fits`` says yes exactly when placement finds the shape (so a reservation
    made where the head "fits" always gets its placement), and the placement has the shape."""
    partitions, nodes = data.draw(clusters(busy=True))
    for job in data.draw(job_list(partitions, count=st.integers(1, 4))):
        placement = best_placement(job, tuple(nodes), partitions, SPEED)
        assert FreeCapacity(nodes).fits(partitions, job) == (placement is not None)
        if placement is not None:
            check_shape(job, placement, partitions, nodes)
            free = {n.name: n.accelerators_free for n in nodes}
            assert all(count <= free[name] for name, count in placement.node_counts.items())
            assert placement.iteration_time_s >= alpha_min_s(job, partitions, nodes, SPEED) * (1 - 1e-9)
