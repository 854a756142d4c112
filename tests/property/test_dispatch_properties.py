"""Invariants of one dispatch walk on random queues over random heterogeneous clusters."""

from hypothesis import given, settings
from hypothesis import strategies as st

from asrpt.core.dispatch import DispatchOptions, dispatch
from asrpt.core.model import ClusterSnapshot, Job, ParallelConfig
from asrpt.core.placement import alpha_min_s
from tests.property.test_policy_properties import SPEED, CLASSES, clusters


@st.composite
def strict_cases(draw):
    partitions, nodes = draw(clusters())
    names = [p.name for p in partitions]
    nodes = [n.__class__(**{**{f: getattr(n, f) for f in n.__slots__}, "accelerators_free": draw(st.integers(0, n.accelerators_total))})
             for n in nodes]
    queue = [
        Job(
            job_id=str(i),
            submit_time_s=float(i),
            parallel=ParallelConfig.data_parallel(draw(st.sampled_from([1, 2, 4, 8]))),
            workload_class=draw(st.sampled_from(CLASSES)),
            allowed_partitions=tuple(draw(st.lists(st.sampled_from(names), max_size=2, unique=True))),
            predicted_iterations=100.0,
        )
        for i in range(draw(st.integers(1, 12)))
    ]
    return ClusterSnapshot(partitions=tuple(partitions), nodes=tuple(nodes), pending=()), queue


@settings(max_examples=150, deadline=None)
@given(strict_cases())
def test_strict_start_never_uses_a_partition_an_earlier_waiting_job_could_use(case):
    """Strict mode: a job starts only on a partition that no job ahead of it that stays
    pending could use (a waiting job blocks exactly the partitions it could use)."""
    snapshot, queue = case
    result = dispatch(
        queue, snapshot, 0.0, speed=SPEED, options=DispatchOptions(mode="strict", comm_heavy_tau=0.0),
        runtime_s=lambda job, a: 100.0 * a,
        alpha_min_s=lambda job: alpha_min_s(job, snapshot.partitions, snapshot.nodes, SPEED),
        first_blocked_s={},
    )
    started = {p.job_id: p.partition for p in result.starts}
    usable = {j.job_id: {p.name for p in snapshot.partitions if j.allows(p)} for j in queue}
    for i, job in enumerate(queue):
        if job.job_id in started:
            assert started[job.job_id] in usable[job.job_id]
            for ahead in queue[:i]:
                if ahead.job_id not in started:
                    assert started[job.job_id] not in usable[ahead.job_id], (ahead.job_id, job.job_id)
