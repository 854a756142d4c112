"""Invariants of the simulator's Slurm model (sim/slurmctld.py) on random queues: what
slurmctld would start on its own after a decision that starts nothing itself."""

from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.model import Decision, Job, ParallelConfig
from asrpt.core.placement import alpha_min_s
from asrpt.sim.cluster import SimCluster
from tests.property.test_policy_properties import CLASSES, SPEED, clusters


@st.composite
def cases(draw):
    partitions, nodes = draw(clusters())
    names = [p.name for p in partitions]
    jobs = [
        Job(
            job_id=str(i),
            submit_time_s=float(draw(st.integers(0, 5))),
            parallel=ParallelConfig.data_parallel(draw(st.sampled_from([1, 2, 4, 8, 16]))),
            workload_class=draw(st.sampled_from(CLASSES)),
            allowed_partitions=tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True))),
            true_iterations=100.0,
            time_limit_s=draw(st.one_of(st.none(), st.floats(10.0, 1e5))),
        )
        for i in range(draw(st.integers(1, 12)))
    ]
    order = draw(st.permutations([j.job_id for j in jobs]))
    order = order[: draw(st.integers(0, len(order)))]  # some jobs missing from the order
    held = draw(st.sets(st.sampled_from([j.job_id for j in jobs])))
    return partitions, nodes, jobs, tuple(order), tuple(sorted(held))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_slurm_starts_no_held_job_and_always_the_top_job_that_fits(case):
    partitions, nodes, jobs, order, held = case
    cluster = SimCluster(partitions, nodes, speed=SPEED)
    cluster.now_s = 10.0
    for job in jobs:
        cluster.submit(job)
    cluster.apply(Decision(order=order, holds=held))
    started = {p.job_id: p for p in cluster.last_fills}
    by_id = {j.job_id: j for j in jobs}
    assert not started.keys() & set(held)
    for job_id, placement in started.items():
        assert by_id[job_id].allows(next(p for p in partitions if p.name == placement.partition))
    # Slurm's priority order: the written order, then the rest by submit time and id.
    listed = set(order)
    rest = sorted((j for j in jobs if j.job_id not in listed), key=lambda j: (j.submit_time_s, int(j.job_id)))
    queue = [by_id[j] for j in order] + rest
    top = next((j for j in queue if j.job_id not in held), None)
    if top is not None and alpha_min_s(top, partitions, nodes, SPEED) < float("inf"):
        assert top.job_id in started  # an empty cluster: the top job fits if it can ever run
